"""One tick's node energy -> per-job shares. The idle policy lives here and only here.

For every (component, device) entry of a tick:

* idle energy is the device's idle power x the tick's duration, capped at what was
  measured; the rest is dynamic energy;
* CPU, DRAM and network dynamic energy is split by each job's share of the node's busy
  CPU time (``/proc/stat``), the rest staying with ``system`` (unattributed);
* an accelerator's dynamic energy is split by the per-process utilization the driver
  reports, else evenly among the processes holding a context on it; its idle energy
  goes to the jobs holding it (you pay for the accelerator you hold), else stays unattributed;
* CPU/DRAM idle energy follows the idle policy: ``share`` splits it among running jobs
  in proportion to their dynamic shares (a job alone on a node carries the whole node,
  as a cloud bill does), ``exclude`` keeps it unattributed (Kepler's choice);
* ``platform`` (RAPL psys) overlaps cpu and dram and is never attributed.

Conservation is by construction: the unattributed part of each entry is the entry's
energy minus what the jobs got, so jobs + unattributed == node delta to float rounding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from joulestat.core.records import Share
from joulestat.core.tick import Component, Tick


class IdlePolicy(StrEnum):
    """What becomes of idle CPU, DRAM and network power (``--idle-policy``): ``share``d
    among the running jobs by their dynamic share, or ``exclude``d (it stays
    unattributed, so a job carries only what its work added)."""

    SHARE = "share"
    EXCLUDE = "exclude"


IDLE_POLICIES = tuple(policy.value for policy in IdlePolicy)
CPU_SHARED_COMPONENTS = (Component.CPU, Component.DRAM, Component.NET, Component.OTHER)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """Who used one accelerator during the tick: job -> utilization (any unit, summed)."""

    utilization: Mapping[str, float] = field(default_factory=dict)
    holders: tuple[str, ...] = ()  # jobs holding a context on the device


@dataclass(frozen=True, slots=True)
class TickUsage:
    """What the node did during the tick, as attribution needs it."""

    node_busy_cpu_s: float  # busy CPU seconds of the whole node over the tick
    job_cpu_s: Mapping[str, float]  # CPU seconds each running job's process tree used
    devices: Mapping[tuple[str, str], DeviceUse] = field(default_factory=dict)
    # Jobs running during the tick; a job with no CPU time still shares idle power.
    running_jobs: tuple[str, ...] = ()
    # Fraction of the tick each job existed (registered or ended inside it); default 1.
    # Idle power is shared in proportion, so a job pays for the time it held the node.
    presence: Mapping[str, float] = field(default_factory=dict)


def cpu_shares(usage: TickUsage) -> dict[str, float]:
    """Each job's fraction of the node's busy CPU time, scaled down if they exceed 1.

    Process and node CPU times are read a moment apart, so a lone busy job can show
    slightly more than the node; the shares are then normalised rather than letting
    the jobs receive more energy than the node used.
    """
    busy = usage.node_busy_cpu_s
    raw = {job: max(cpu_s, 0.0) for job, cpu_s in usage.job_cpu_s.items()}
    total = sum(raw.values())
    if total <= 0:
        return {job: 0.0 for job in raw}
    denominator = max(busy, total)
    return {job: cpu_s / denominator for job, cpu_s in raw.items()}


def _split(amount: float, weights: Mapping[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    if amount == 0 or total <= 0:
        return {}
    return {job: amount * w / total for job, w in weights.items() if w > 0}


def attribute(
    tick: Tick,
    usage: TickUsage,
    idle_power_w: Mapping[tuple[str, str], float],
    idle_policy: IdlePolicy | str = IdlePolicy.SHARE,
) -> list[Share]:
    """Split every entry of ``tick`` among jobs; one unattributed share per entry."""
    if idle_policy not in IDLE_POLICIES:
        raise ValueError(f"idle policy must be one of {', '.join(IDLE_POLICIES)}: {idle_policy!r}")
    shares_by_job = cpu_shares(usage)
    running = set(usage.running_jobs) | set(usage.job_cpu_s)
    idle_weights = {job: s for job, s in shares_by_job.items() if s > 0}
    if not idle_weights and running:
        idle_weights = {job: 1.0 for job in running}  # nobody busy: idle split evenly
    result: list[Share] = []
    for entry in tick.entries:
        key = (entry.component, entry.device)
        energy_j = entry.energy_j
        idle_j = min(max(idle_power_w.get(key, 0.0), 0.0) * tick.entry_duration_s(entry),
                     energy_j)
        dynamic_j = energy_j - idle_j
        dynamic_by_job: dict[str, float] = {}
        idle_by_job: dict[str, float] = {}
        if entry.component == Component.ACCELERATOR:
            use = usage.devices.get(key, DeviceUse())
            weights = {j: u for j, u in use.utilization.items() if u > 0}
            if not weights:
                weights = {job: 1.0 for job in use.holders}
            dynamic_by_job = _split(dynamic_j, weights)
            idle_by_job = _split(idle_j, {job: 1.0 for job in use.holders})
        elif entry.component in CPU_SHARED_COMPONENTS:
            dynamic_by_job = {job: dynamic_j * s for job, s in shares_by_job.items() if s > 0}
            if idle_policy == IdlePolicy.SHARE:
                idle_by_job = {job: part * usage.presence.get(job, 1.0)
                               for job, part in _split(idle_j, idle_weights).items()}
        for job in sorted(set(dynamic_by_job) | set(idle_by_job)):
            result.append(Share(job, entry.component, entry.device, entry.source,
                                dynamic_by_job.get(job, 0.0), idle_by_job.get(job, 0.0)))
        result.append(Share(
            None, entry.component, entry.device, entry.source,
            dynamic_j - sum(dynamic_by_job.values()),
            idle_j - sum(idle_by_job.values()),
        ))
    return result
