"""Which idle policy a job's energy was attributed under, in words every view shares.

Why: on a VM most of a small job's energy can be the node's idle power (a constant DRAM
figure) carried by the lone job. The same 6 s job read 90.0 J under ``--idle-policy
share`` and 14.9 J under ``exclude``, and nothing said which applied, so a per-unit
figure could not be read. Every comparison and report therefore shows energy twice
(total, and dynamic: the part above idle) and names the policy with these words:

* ``share``: the node's idle power was split among the jobs running
  (:mod:`joulestat.attribution.shares`), so a lone job carries the whole node;
* ``exclude``: CPU, DRAM and network idle power stayed unattributed, so the job carries
  what its work added (plus the idle power of accelerators it held);
* ``mixed``: for one job, partly each (nodes or agent runs with different settings);
  for a group of jobs (a comparison's row or table), jobs whose policies differ, a job
  without a recorded policy beside one with;
* not recorded: a job stored before the agent recorded its policy, or imported without.

The policy is the agent's record of the job (its ``agent_labels``, read by
:func:`joulestat.attribution.agent_labels.idle_policy_of`), never guessed from the
figures.
"""

from __future__ import annotations

from collections.abc import Iterable

from joulestat.attribution.agent_labels import MIXED, idle_policy_of
from joulestat.attribution.shares import IdlePolicy
from joulestat.store.jobs import JobSummary, JobTotals

__all__ = ["MIXED", "NOT_RECORDED", "common_policy", "job_idle_policy", "policy_words"]

NOT_RECORDED = "idle policy not recorded"
_WORDS = {
    IdlePolicy.SHARE.value: "idle policy share: the node's idle power is split among the "
                            "jobs running, so a lone job carries all of it",
    IdlePolicy.EXCLUDE.value: "idle policy exclude: CPU, DRAM and network idle power "
                              "stays unattributed, so a job carries what its work added",
    MIXED: "idle policy mixed: attributed partly under share and partly under exclude "
           "(nodes or agent runs with different settings)",
}


def job_idle_policy(job: JobTotals | JobSummary) -> str | None:
    """The idle policy the agent recorded for ``job`` (any of the store's read models of
    a job): ``share``, ``exclude``, ``mixed``; None when it recorded none."""
    return idle_policy_of(job.agent_labels)


def common_policy(policies: Iterable[str | None]) -> str | None:
    """The one policy of several jobs' figures: theirs when they all agree (None when
    none was recorded), :data:`MIXED` when they differ (a policy not recorded differs
    from any recorded one: nothing says it was the same)."""
    found = set(policies)
    if len(found) > 1:
        return MIXED
    return found.pop() if found else None


def policy_words(policy: str | None, jobs: bool = False) -> str:
    """A sentence part naming ``policy`` and what it means for the figures beside it; of
    several ``jobs`` (a comparison), ``mixed`` says they differ."""
    if jobs and policy == MIXED:
        return ("idle policies differ: the jobs were not all attributed under one idle "
                "policy (or some under none recorded)")
    return _WORDS.get(policy or "", NOT_RECORDED)
