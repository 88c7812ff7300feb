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

:func:`job_figures` gives the Compare page a job as
:func:`agent.reports.compare.compare` takes it, with every field meaning what
:func:`agent.reports.compare_data.figures_of` gives ``joulestat compare``: the page and
the command then run the same arithmetic on the same numbers.

Prices: ``joulestat dashboard --prices FILE`` hands the file on as ``JOULESTAT_PRICES``
(absolute path). :func:`price_table` reads it once per path per process, and the table
is part of every cache key below (:func:`rates`, the notes), so a cached rate is always
the rate of the prices in force: the same precedence as ``joulestat compare --prices``
(``price_per_hour()``: the file's row for the type, else the catalog).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

from agent.carbon.footprint import METHODOLOGY, CarbonSettings, NodePlacement, footprint
from agent.carbon.prices import PriceTable, load_prices
from agent.reports.compare import JobFigures, NodeFigures
from agent.store.dashboard_queries import JobTotals
from agent.store.job_queries import JobDetail
from dashboard.analysis import JobCost

J_PER_KWH = 3_600_000.0
S_PER_HOUR = 3600.0
ENV_PRICES = "JOULESTAT_PRICES"
__all__ = ["ENV_PRICES", "METHODOLOGY", "Rates", "job_cost", "job_figures", "node_cost",
           "price_source", "price_table", "rates"]


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


def price_table() -> PriceTable | None:
    """The prices file named by ``JOULESTAT_PRICES`` (None when unset), read and checked
    once per path; a bad file raises :class:`agent.carbon.prices.PricesError` naming the
    file and line (``joulestat dashboard`` checks it before Streamlit starts)."""
    return _load_table(os.environ.get(ENV_PRICES, "").strip())


@functools.lru_cache(maxsize=8)
def _load_table(path: str) -> PriceTable | None:
    return load_prices(path) if path else None


def price_source() -> str:
    """Where the pages' hourly prices come from, in a sentence (Markdown)."""
    table = price_table()
    catalog = "catalog list prices (on-demand; SageMaker's for `ml.*`)"
    if table is None:
        return (f"{catalog}; give your own with `joulestat dashboard --prices FILE` "
                "(or `--price-per-hour` for the CLI)")
    return (f"prices file `{table.path}` for the {len(table.rows)} instance type(s) it "
            f"lists, else {catalog}")


def rates(instance_type: str, region: str) -> Rates:
    """The factors ``footprint()`` applies to a node of this type in this region, with
    the prices in force (:func:`price_table`)."""
    return _rates(instance_type, region, price_table())


@functools.lru_cache(maxsize=1024)
def _rates(instance_type: str, region: str, prices: PriceTable | None) -> Rates:
    result = footprint([(0.0, "n", J_PER_KWH)],
                       {"n": NodePlacement(instance_type or None, region or None, S_PER_HOUR)},
                       CarbonSettings(prices=prices), now_s=0.0)
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
    """Operational CO2e, embodied CO2e and cost of a node using ``energy_j`` while held
    ``held_s`` seconds; embodied and cost are None where the catalog cannot say, and
    operational is known whenever the energy is (world-average intensity at worst)."""
    rate = rates(instance_type, region)
    return JobCost(
        operational_g=energy_j * rate.operational_g_per_j,
        embodied_g=None if rate.embodied_g_per_s is None else held_s * rate.embodied_g_per_s,
        cost_usd=None if rate.usd_per_s is None else held_s * rate.usd_per_s,
    )


def _priced(job: JobTotals | JobDetail, now_s: float,
            nodes: list[NodeFigures] | None = None) -> tuple[float, float | None, float | None]:
    """(operational g, embodied g, cost USD) of a job, each node held from its start to
    its end, or ``now_s`` while running (``placements_from_detail``'s rule); embodied
    and cost are None once any node's is unknown. Appends each node's figures to
    ``nodes`` when given (the Jobs page needs only the sums).

    One loop of float arithmetic for :func:`job_cost` and :func:`job_figures` alike: the
    Jobs and Compare pages price ten thousand jobs.
    """
    operational = 0.0
    embodied: float | None = 0.0
    cost: float | None = 0.0
    for part in job.per_node:
        rate = rates(part.instance_type, part.region)
        end_s = part.ended_s if part.ended_s is not None else now_s
        held_s = max(0.0, end_s - part.started_s)
        node_usd = None if rate.usd_per_s is None else held_s * rate.usd_per_s
        if nodes is not None:
            nodes.append(NodeFigures(part.node, part.instance_type, held_s, part.total_j,
                                     node_usd))
        operational += part.total_j * rate.operational_g_per_j
        if embodied is not None:
            embodied = (None if rate.embodied_g_per_s is None
                        else embodied + held_s * rate.embodied_g_per_s)
        if cost is not None:
            cost = None if node_usd is None else cost + node_usd
    return operational, embodied, cost


def job_cost(job: JobTotals | JobDetail, now_s: float) -> JobCost:
    """A job's CO2e and cost summed over its nodes; an unknown embodied figure or price
    on any node makes that total None (operational CO2e is always known)."""
    if not job.per_node:
        return JobCost(operational_g=0.0)
    operational, embodied, cost = _priced(job, now_s)
    return JobCost(operational_g=operational, embodied_g=embodied, cost_usd=cost)


@functools.lru_cache(maxsize=4096)
def _notes(placed: tuple[tuple[str, str, str], ...], prices: PriceTable | None
           ) -> tuple[str, ...]:
    """``footprint()``'s notes for nodes (node, instance type, region) under ``prices``.
    Without a live feed they depend on nothing else (which node lacks a price or an
    embodied figure, and why), so one call per distinct set of nodes, with no energy,
    gives every job's."""
    return footprint([], {node: NodePlacement(itype or None, region or None, 0.0)
                          for node, itype, region in placed},
                     CarbonSettings(prices=prices), now_s=0.0).notes


def job_figures(job: JobTotals, now_s: float,
                sources: Mapping[str, tuple[str, ...]] | None = None) -> JobFigures:
    """The job as :func:`agent.reports.compare.compare` takes it, field for field what
    ``figures_of`` builds for ``joulestat compare``: energy is the job's attributed energy,
    CO2e operational with embodied apart, cost and held time per node, ``duration_s`` its
    wall-clock time, ``notes`` footprint's, ``sources`` its nodes' (``sources``: node ->
    sources, :func:`agent.store.report_queries.node_sources`, as the command reads them).
    A running job counts up to ``now_s``.

    A loop of float arithmetic (footprint only for notes, cached per set of nodes, and
    only when a node has an unknown figure): the Compare page builds ten thousand.
    """
    nodes: list[NodeFigures] = []
    operational, embodied, cost = _priced(job, now_s, nodes)
    notes = () if embodied is not None and cost is not None else _notes(tuple(
        (p.node, p.instance_type, p.region) for p in job.per_node), price_table())
    end_s = job.ended_s if job.ended_s is not None else now_s
    return JobFigures(
        job_id=job.id, name=job.name, kind=job.kind, nodes=tuple(nodes),
        units=dict(job.units), duration_s=max(0.0, end_s - job.started_s),
        energy_j=job.total_j, operational_co2e_g=operational, embodied_co2e_g=embodied,
        cost_usd=cost, notes=notes, labels=job.labels, started_s=job.started_s,
        sources=() if sources is None else tuple(sorted(
            {s for node, _itype in job.nodes for s in sources.get(node, ())})),
    )
