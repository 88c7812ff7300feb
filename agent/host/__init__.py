"""Host usage: what the node's processes and cgroups did, read apart from attributing it.

This layer reads ``/proc`` and the cgroup filesystem and nothing else: node busy time
(:mod:`joulestat.host.procfs`), each job's CPU time from the cheapest exact source (its own
cgroup's counter, :mod:`joulestat.host.cgroups`, else its process tree walked through
``/proc/<pid>/task/<tid>/children``, :mod:`joulestat.host.processes`), and which job each
accelerator process belongs to. :class:`joulestat.host.usage.HostUsage` turns one tick of
that into an immutable :class:`joulestat.host.usage.UsageSnapshot`; attribution
(:mod:`joulestat.attribution.accounting`) only divides energy by it.

The split follows Kepler's ``internal/resource`` (what ran) and ``internal/monitor``
(what it cost): readers here can be tested against a fake tree (every reader takes its
root path) without any energy, and attribution can be tested without any ``/proc``.
"""
