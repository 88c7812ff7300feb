"""CO2e and cost for the pages, from :func:`agent.carbon.footprint.footprint`.

The Jobs and Compare pages price thousands of jobs per run; calling ``footprint()``
once per job (with its per-tick series) would cost a series query and ~50 µs each.
Without a live intensity feed (the dashboard passes no Electricity Maps token) every
factor ``footprint()`` applies is constant per (instance type, region): operational
CO2e is kWh × PUE × intensity, embodied is linear in the time held, cost is price ×
hours. So :func:`rates` asks ``footprint()`` once per (instance type, region) for one
kWh over one hour, and each node of a job is scaled from that; a unit test checks the
result equals ``footprint()`` called on the whole job. The figures, their sources and
their fallbacks are footprint's; nothing is re-derived here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from agent.carbon.footprint import METHODOLOGY, NodePlacement, footprint
from agent.store.dashboard_queries import JobTotals
from agent.store.job_queries import JobDetail
from dashboard.analysis import JobCost

J_PER_KWH = 3_600_000.0
S_PER_HOUR = 3600.0
__all__ = ["METHODOLOGY", "Rates", "job_cost", "node_cost", "rates"]


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-joule and per-second factors of one (instance type, region)."""

    operational_g_per_j: float
    embodied_g_per_s: float | None
    usd_per_s: float | None
    intensity_g_per_kwh: float
    intensity_source: str
    pue: float
    notes: tuple[str, ...]


@functools.lru_cache(maxsize=1024)
def rates(instance_type: str, region: str) -> Rates:
    """The factors ``footprint()`` applies to a node of this type in this region."""
    result = footprint([(0.0, "n", J_PER_KWH)],
                       {"n": NodePlacement(instance_type or None, region or None, S_PER_HOUR)},
                       now_s=0.0)
    [node] = result.nodes
    return Rates(
        operational_g_per_j=node.operational_co2e_g / J_PER_KWH,
        embodied_g_per_s=None if node.embodied.g is None else node.embodied.g / S_PER_HOUR,
        usd_per_s=None if node.cost_usd is None else node.cost_usd / S_PER_HOUR,
        intensity_g_per_kwh=node.intensity.g_per_kwh,
        intensity_source=node.intensity.source,
        pue=node.pue.value,
        notes=tuple(n.replace("'n'", "this node") for n in result.notes),
    )


def node_cost(instance_type: str, region: str, energy_j: float, held_s: float) -> JobCost:
    """CO2e (operational + embodied) and cost of a node using ``energy_j`` while held
    ``held_s`` seconds; CO2e and cost are None where the catalog cannot say."""
    rate = rates(instance_type, region)
    operational = energy_j * rate.operational_g_per_j
    embodied = None if rate.embodied_g_per_s is None else held_s * rate.embodied_g_per_s
    return JobCost(
        co2e_g=None if embodied is None else operational + embodied,
        embodied_g=embodied,
        cost_usd=None if rate.usd_per_s is None else held_s * rate.usd_per_s,
        operational_g=operational,
    )


def job_cost(job: JobTotals | JobDetail, now_s: float) -> JobCost:
    """A job's CO2e and cost summed over its nodes, each held from its start to its end
    (or ``now_s`` while running); an unknown figure on any node makes the total None.

    Written as one loop of float arithmetic: the Jobs page prices ten thousand jobs.
    """
    if not job.per_node:
        return JobCost()
    operational = 0.0
    embodied: float | None = 0.0
    cost: float | None = 0.0
    for part in job.per_node:
        rate = rates(part.instance_type, part.region)
        held_s = max(0.0, (part.ended_s if part.ended_s is not None else now_s)
                     - part.started_s)
        operational += part.total_j * rate.operational_g_per_j
        if embodied is not None:
            embodied = (None if rate.embodied_g_per_s is None
                        else embodied + held_s * rate.embodied_g_per_s)
        if cost is not None:
            cost = None if rate.usd_per_s is None else cost + held_s * rate.usd_per_s
    return JobCost(co2e_g=None if embodied is None else operational + embodied,
                   embodied_g=embodied, cost_usd=cost, operational_g=operational)
