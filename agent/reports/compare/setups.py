"""A comparison by setup over a fleet: single-node jobs pooled in the store, not one by one.

``compare(figures, by="instance_type")`` builds a record, a price and a bound per job
before it adds them up per setup; over a fleet's week (10^5 jobs) that took 10 to 20 s
(issue 28). :func:`compare_setups` gives the same table from sums: the store adds up
the single-node jobs per instance type (:func:`joulestat.store.job_pools.job_pools`),
this module prices each pool per region with the same
:class:`~joulestat.carbon.pricing.Pricer` rates a job is priced with (energy times the
region's operational rate, held hours times the type's price and embodied rate: sums of
what each job's figures add up to), bounds it with the same
:func:`~joulestat.reports.bounds.total_bounds` over its energy per node, component and
source, and names its sources and accelerators from its nodes. Jobs on several nodes
(a setup named by all their types) are read one by one as before
(:func:`joulestat.reports.compare.figures.figures_for`) and join their setup's pool.
:func:`~joulestat.reports.compare.table.row_of` then makes every row from its
:class:`~joulestat.reports.compare.table.Pool`, as ``compare()`` does, the runs' mean
and spread included (a :class:`~joulestat.core.spread.Spread` of the jobs' own figures,
read beside the sums).

Every job, running or ended, is counted as its own page counts it (to its last flush);
only the order of additions differs from the per-job path (a figure agrees to
rounding). Two things still need each job's own record, and then :func:`compare_setups`
answers None and the caller takes the per-job path: live grid intensity (a job's CO2e
depends on when it ran) and served latency histograms (a row's percentiles are of its
jobs' histograms added up).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine

from joulestat.attribution.agent_labels import idle_policy_of
from joulestat.carbon.pricing import Pricer
from joulestat.reports.bounds import total_bounds
from joulestat.reports.compare.figures import accelerator_names, figures_for
from joulestat.reports.compare.groups import UNKNOWN_TYPE, setup_name
from joulestat.reports.compare.table import (
    ComparisonTable,
    JobFigures,
    Pool,
    choose_unit_of,
    pool_of,
    rebase,
    row_of,
)
from joulestat.store.job_pools import (
    JobPools,
    PoolKey,
    has_latency,
    job_pools,
    multi_node_ids,
    units_counted,
)
from joulestat.store.jobs import JobFilter, JobRef, PartTotals
from joulestat.store.nodes import node_accelerators, source_models
from joulestat.store.provenance import JobSourceEnergy, node_sources

BY_SETUP = "instance_type"


@dataclass(frozen=True, slots=True)
class SetupComparison:
    """The table, the notes ``compare`` prints under it (``"<job name>: <note>"``, in
    the order of the jobs), the instance types its jobs ran on (whose prices it lists),
    and how many jobs it compares (0: nothing matched)."""

    table: ComparisonTable
    notes: tuple[str, ...]
    instance_types: tuple[str, ...]
    jobs: int


def compare_setups(engine: Engine, where: JobFilter, pricer: Pricer, now_s: float,
                   unit: str | None = None, baseline: str | None = None,
                   sla_units_per_hour: float | None = None, with_ids: bool = True
                   ) -> SetupComparison | None:
    """``compare(figures, by="instance_type", unit, baseline, sla)`` of the jobs
    ``where`` matches, from pooled sums (see the module's docstring); None where those
    cannot give it (live intensity, served latency), for the per-job path. Without
    ``with_ids`` a pooled row's ``job_ids`` are left empty (a page that shows no ids
    need not read 10^5 of them). Raises
    :class:`~joulestat.reports.compare.groups.CompareError` as ``compare()`` does."""
    if pricer.live or has_latency(engine, where):
        return None
    # A unit asked for is checked once the pools are read (a pool or a job on several
    # nodes counted it); counting every unit's jobs first is only needed to pick one.
    if unit is None:
        several_ids = multi_node_ids(engine, where)
        chosen = choose_unit_of(units_counted(engine, where, several_ids))
        found = job_pools(engine, where, chosen, now_s, with_ids)
    else:
        # The jobs on several nodes are looked for while the pools are read, on a
        # connection of their own: each statement keeps one database process busy, and
        # a server has more than one core (over a fleet's week, 0.13 to 0.23 s of the
        # comparison's 2 s no longer waited for). Separate statements either way.
        chosen = unit
        with ThreadPoolExecutor(max_workers=1) as beside:
            finding = beside.submit(multi_node_ids, engine, where)
            found = job_pools(engine, where, chosen, now_s, with_ids)
            several_ids = finding.result()
    several = _several_nodes(engine, several_ids, pricer, now_s)
    if unit is not None and not any(key.counted for key in found.sums) and not any(
            job.counted(unit) > 0 for job in several):
        choose_unit_of(units_counted(engine, where, several_ids), unit)  # raises, naming the units
    pools: dict[tuple[str, bool], tuple[tuple[float, str], Pool]] = {}
    notes: set[tuple[float, str]] = set()
    types: set[str] = set()
    nodes = {node for listed in found.nodes.values() for node in listed}
    # What the nodes registered, three statements at once on connections of their own
    # (over a fleet's week, 0.07 s one after the other).
    with ThreadPoolExecutor(max_workers=2) as beside:
        reading_models = beside.submit(node_accelerators, engine, nodes)
        reading_bound_models = beside.submit(source_models, engine, nodes)
        sources = node_sources(engine, nodes)
        models, bound_models = reading_models.result(), reading_bound_models.result()
    for key in found.sums:
        group = setup_name([key.instance_type])
        types.add(key.instance_type)
        pools[(group, key.counted)] = (found.first[key],
                                       _pool(found, key, group, pricer, sources, models,
                                             bound_models))
        notes.update(_notes(found, key, pricer))
    starts = {(setup_name([k.instance_type]), k.counted): list(listed)
              for k, listed in found.job_ids.items()}
    for job in several:
        types.update(n.instance_type for n in job.nodes)
        counted = job.counted(chosen) > 0
        pool = pool_of([job], chosen if counted else None, job.setup)
        key2 = (job.setup, counted)
        start = (job.started_s or 0.0, job.job_id)
        starts.setdefault(key2, []).append(start)
        if key2 in pools:
            pools[key2] = (min(pools[key2][0], start), pools[key2][1].merged(pool))
        else:
            pools[key2] = (start, pool)
        for note in job.notes:
            notes.add((start[0], f"{job.name}: {note}"))
    for key2, (first, pool) in pools.items():  # a merged pool's jobs, by start as listed
        listed = tuple(job_id for _start, job_id in sorted(starts[key2])) if with_ids else ()
        pools[key2] = (first, replace(pool, job_ids=listed))
    ordered = sorted(pools.items(), key=lambda item: (not item[0][1], item[1][0]))
    rows = tuple(row_of(pool, chosen if counted else None, BY_SETUP)
                 for (_group, counted), (_first, pool) in ordered)
    table = rebase(ComparisonTable(BY_SETUP, chosen, None, None, rows), baseline,
                   sla_units_per_hour)
    said = tuple(dict.fromkeys(note for _start, note in sorted(notes)))
    runs = sum(s.runs for s in found.sums.values()) + len(several)
    return SetupComparison(table, said, tuple(sorted(types)), runs)


def _pool(found: JobPools, key: PoolKey, group: str, pricer: Pricer,
          sources: dict[str, tuple[str, ...]], models: dict[str, dict[str, int]],
          bound_models: dict[tuple[str, str], tuple[str, ...]]) -> Pool:
    """One pool's sums as a :class:`Pool`: priced per region, bounded per source."""
    sums = found.sums[key]
    operational = 0.0
    embodied: float | None = 0.0
    cost: float | None = 0.0
    held_s = 0.0
    for region, (energy_j, region_held_s) in found.regions[key].items():
        rate = pricer.rates(key.instance_type, region)
        operational += energy_j * rate.operational_g_per_j
        embodied = (None if embodied is None or rate.embodied_g_per_s is None
                    else embodied + region_held_s * rate.embodied_g_per_s)
        cost = (None if cost is None or rate.usd_per_s is None
                else cost + region_held_s * rate.usd_per_s)
        held_s += region_held_s
    nodes = found.nodes[key]
    bounds = total_bounds([JobSourceEnergy("", node, component, source, dynamic_j,
                                           energy_j - dynamic_j)
                           for (node, component, source), (energy_j, dynamic_j)
                           in sorted(found.sources[key].items())], bound_models)
    return Pool(
        job_ids=tuple(job_id for _start, job_id in found.job_ids.get(key, ())), group=group,
        runs=sums.runs, instance_s=held_s,
        instance_types=(key.instance_type or UNKNOWN_TYPE,),
        units=sums.units if key.counted else None, energy_j=sums.energy_j,
        operational_g=operational, embodied_g=embodied, cost_usd=cost,
        sources=tuple(sorted({s for node in nodes for s in sources.get(node, ())})),
        accelerator_j=sums.accelerator_j,
        accelerators=accelerator_names([(node, key.instance_type) for node in nodes], models),
        dynamic_j=sums.dynamic_j,
        idle_policies=frozenset(idle_policy_of(json.loads(labels) if labels else {})
                                for labels in found.agent_labels[key]),
        latency={}, bounds_j=None if bounds is None else (bounds.low, bounds.high),
        spread=found.spread[key])


def _notes(found: JobPools, key: PoolKey, pricer: Pricer) -> list[tuple[float, str]]:
    """``"<job name>: <note>"`` for the pool's jobs whose price or embodied figure is
    unknown (what a job's :meth:`Pricer.job` notes say), with when each first ran."""
    said = []
    for (name, node, region), started_s in found.names[key].items():
        rate = pricer.rates(key.instance_type, region)
        if rate.embodied_g_per_s is not None and rate.usd_per_s is not None:
            continue
        part = PartTotals(node, key.instance_type, region, started_s, None, 0.0, {})
        said += [(started_s, f"{name}: {note}") for note in pricer.notes([part])]
    return said


def _several_nodes(engine: Engine, ids: list[str], pricer: Pricer, now_s: float
                   ) -> list[JobFigures]:
    """The figures of the jobs ``ids`` (those on several nodes), one by one."""
    refs = [JobRef(job_id, "", "", "", 0.0, None) for job_id in ids]
    return figures_for(engine, refs, pricer.settings, now_s=now_s) if refs else []
