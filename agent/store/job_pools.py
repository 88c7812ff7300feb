"""A fleet's single-node jobs added up per instance type in SQL, for a comparison by setup.

``joulestat compare --by instance_type`` and the Compare page pool jobs per setup. Read
a job at a time (:func:`joulestat.store.jobs.job_totals`, then a record, a price and a
bound per job), a fleet's week of 10^5 jobs took 10 to 20 s, nearly all of it in
Python (issue 28). A job on one node, which is most of a fleet's, joins the row of its
node's instance type; so here the database adds them up per (instance type, counted
the unit or not), and only the sums leave it: energy, units, the runs' figures as
count, sum and sum of squares (their mean and spread), held time and energy per region
(what prices them), energy per node, component and source (what bounds them), which
nodes (their sources and accelerators) and which idle policies. Jobs on several nodes
are few and are left to the per-job path (:func:`multi_node_ids`), which names their
setup from all their nodes' types.

The sums are those of the per-job path: the same totals (settled totals plus the raw
rows after them, :func:`joulestat.store.jobs.recent_rows`), each running job held up to
``now_s``. Only the order of additions differs, so a figure agrees to rounding
(tests/integration/test_compare_pools.py checks the rows against the per-job path's).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Double, Select, String, and_, case, func, literal, null, select, union_all
from sqlalchemy.engine import Engine

from joulestat.core.tick import Component
from joulestat.store.jobs import (
    JobFilter,
    job_id_select,
    recent_rows,
    totals_rows,
)
from joulestat.store.model_split import ordinary_units
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
)


@dataclass(frozen=True, slots=True)
class PoolKey:
    """A pool: the single-node jobs of one instance type ('' when unknown) that counted
    the unit (``counted``) or did not."""

    instance_type: str
    counted: bool


@dataclass(frozen=True, slots=True)
class PoolSums:
    """The sums of one pool's jobs (see the module's docstring). ``value_*`` are the
    runs' own figures: energy per unit for a pool that counted, energy per run else."""

    runs: int
    energy_j: float
    accelerator_j: float
    dynamic_j: float
    units: float
    value_sum: float
    value_squares: float


@dataclass(frozen=True, slots=True)
class JobPools:
    """What :func:`job_pools` read: per pool its sums, its jobs' ids (by start, then id:
    the order of the per-job path, and of the pools themselves), held seconds and energy
    per region, energy and dynamic energy per (node, component, source), its nodes, and
    its jobs' recorded idle labels, and its (job name, node, region) (what a job's
    price notes name)."""

    sums: dict[PoolKey, PoolSums]
    first: dict[PoolKey, tuple[float, str]]  # (started_s, id) of its first job
    job_ids: dict[PoolKey, list[tuple[float, str]]]  # (started_s, id), by start then id
    regions: dict[PoolKey, dict[str, tuple[float, float]]]  # region -> (energy_j, held_s)
    sources: dict[PoolKey, dict[tuple[str, str, str], tuple[float, float]]]
    nodes: dict[PoolKey, list[str]]  # in the order their first job started
    agent_labels: dict[PoolKey, set[str]]  # the jobs' agent_labels JSON, distinct
    # (job name, node, region) -> when the first such job started
    names: dict[PoolKey, dict[tuple[str, str, str], float]]


def multi_node_ids(engine: Engine, where: JobFilter) -> list[str]:
    """The matching jobs not on exactly one node (by start, then id): those
    :func:`job_pools` leaves to the per-job path (several nodes; or none, which no
    writer leaves, but the per-job path says what such a job is)."""
    parts, jobs = JOB_NODES.c, JOBS.c
    one = select(parts.job_id).group_by(parts.job_id).having(func.count() == 1)
    query = (select(jobs.id).where(jobs.id.in_(job_id_select(where)), jobs.id.not_in(one))
             .order_by(jobs.created_s, jobs.id))
    with engine.connect() as connection:
        return [str(job_id) for job_id in connection.execute(query).scalars()]


def has_latency(engine: Engine, where: JobFilter) -> bool:
    """Whether a matching job holds served latency histograms (which :func:`job_pools`
    does not add up: a comparison with them reads its jobs one by one)."""
    parts = JOB_NODES.c
    query = select(parts.job_id).where(parts.job_id.in_(job_id_select(where)),
                                       parts.latency.is_not(None)).limit(1)
    with engine.connect() as connection:
        return connection.execute(query).first() is not None


def _part_energy(sources: Any) -> Any:
    """Per (job, node), from its energy per component and source (``sources``, read
    once for both): joules, accelerator joules and joules above idle, the job lists'
    :func:`joulestat.store.jobs.part_energy_j`."""
    b = sources.c
    energy = b.dynamic_j + b.idle_j
    return (select(b.job_id, b.node, func.sum(energy).label("energy_j"),
                   func.sum(case((b.component == Component.ACCELERATOR, energy), else_=0.0))
                   .label("accelerator_j"),
                   func.sum(b.dynamic_j).label("dynamic_j"))
            .group_by(b.job_id, b.node).subquery("energy"))


def _part_units(job_ids: Select[Any], unit: str) -> Any:
    """Per (job, node): its count of ``unit``."""
    raw, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    both = union_all(
        recent_rows(JOB_UNITS, [], [func.sum(raw.count).label("count")], job_ids, None,
                    "units_recent").where(raw.unit == unit),
        totals_rows(JOB_UNIT_TOTALS, [totals.count.label("count")], job_ids, None)
        .where(totals.unit == unit)).subquery("unit_parts")
    return (select(both.c.job_id, both.c.node, func.sum(both.c.count).label("count"))
            .group_by(both.c.job_id, both.c.node).subquery("units"))


def _part_sources(job_ids: Select[Any]) -> Any:
    """Per (job, node, component, source): joules above idle and idle (the totals and
    the raw windows after them, as separate rows: summed by whoever reads them)."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    return union_all(
        recent_rows(JOB_ENERGY, [raw.component, raw.source],
                    [func.sum(raw.dynamic_j).label("dynamic_j"),
                     func.sum(raw.idle_j).label("idle_j")], job_ids, None, "sources_recent"),
        totals_rows(JOB_ENERGY_TOTALS, [totals.component, totals.source,
                                        totals.dynamic_j, totals.idle_j], job_ids, None)
    ).cte("source_parts").prefix_with("MATERIALIZED")


def units_counted(engine: Engine, where: JobFilter) -> dict[str, int]:
    """Per unit, how many matching jobs (on any number of nodes) counted some of it:
    which unit a comparison is per when none is asked."""
    job_ids = job_id_select(where)
    raw, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    both = union_all(
        recent_rows(JOB_UNITS, [raw.unit], [func.sum(raw.count).label("count")], job_ids,
                    None).where(ordinary_units(raw.unit)),
        totals_rows(JOB_UNIT_TOTALS, [totals.unit, totals.count.label("count")], job_ids,
                    None).where(ordinary_units(totals.unit))).subquery("all_units")
    per_job = (select(both.c.job_id, both.c.unit).group_by(both.c.job_id, both.c.unit)
               .having(func.sum(both.c.count) > 0).subquery("counted"))
    query = select(per_job.c.unit, func.count()).group_by(per_job.c.unit)
    with engine.connect() as connection:
        return {str(u): int(n) for u, n in connection.execute(query)}


# What each branch of the one statement of job_pools() is about, its first column.
_SUMS, _FIRST, _IDS, _REGION, _NODE, _LABELS, _NAME, _SOURCE = (
    "sums", "first", "ids", "region", "node", "labels", "name", "source")


def job_pools(engine: Engine, where: JobFilter, unit: str | None, now_s: float,
              with_ids: bool = True) -> JobPools:
    """The matching single-node jobs added up per :class:`PoolKey` (see the module's
    docstring), counted per ``unit`` (None: every pool is per run), running jobs held up
    to ``now_s``; their ids too when ``with_ids`` (a row lists its jobs; 10^5 of them
    are most of what leaves the database).

    One statement: the jobs' parts are read once (a common table expression) and each
    kind of sum is a branch of a ``UNION ALL`` over them, its kind in the first column
    and the columns it does not use NULL.
    """
    matching = job_id_select(where)
    jobs, parts = JOBS.c, JOB_NODES.c
    sources = _part_sources(matching)
    energy = _part_energy(sources)
    counted_units: Any = literal(0.0, Double)
    joined: Any = JOBS.join(JOB_NODES, parts.job_id == jobs.id).outerjoin(
        energy, and_(energy.c.job_id == parts.job_id, energy.c.node == parts.node))
    if unit is not None:
        units = _part_units(matching, unit)
        joined = joined.outerjoin(units, and_(units.c.job_id == parts.job_id,
                                              units.c.node == parts.node))
        counted_units = func.coalesce(units.c.count, 0.0)
    energy_j = func.coalesce(energy.c.energy_j, 0.0)
    held = func.coalesce(parts.ended_s, now_s) - parts.started_s
    one_node = (select(parts.job_id).where(parts.job_id.in_(matching))
                .group_by(parts.job_id).having(func.count() == 1))
    single = (select(
        jobs.id.label("job_id"), jobs.created_s.label("created_s"), parts.node.label("node"),
        parts.instance_type.label("instance_type"), parts.region.label("region"),
        case((held > 0, held), else_=0.0).label("held_s"),
        energy_j.label("energy_j"),
        func.coalesce(energy.c.accelerator_j, 0.0).label("accelerator_j"),
        func.coalesce(energy.c.dynamic_j, 0.0).label("dynamic_j"),
        counted_units.label("units"),
        case((counted_units > 0, 1), else_=0).label("counted"),
        case((counted_units > 0, energy_j / counted_units), else_=energy_j).label("value"))
        .select_from(joined).where(jobs.id.in_(one_node))
        .cte("single").prefix_with("MATERIALIZED"))
    j = single.c
    named = single.join(JOBS, jobs.id == j.job_id)  # name and idle labels, where asked
    key = [j.instance_type, j.counted]
    number = null().cast(Double)
    word = null().cast(String)

    def branch(kind: str, words: list[Any], numbers: list[Any]) -> Select[Any]:
        return select(literal(kind, String), *key,
                      *(words + [word] * (3 - len(words))),
                      *(numbers + [number] * (7 - len(numbers))))

    b = sources.c
    earliest = select(*key, func.min(j.created_s).label("first_s")).group_by(*key).subquery()
    e = earliest.c
    branches = [
        branch(_FIRST, [func.min(j.job_id)], [e.first_s])
        .select_from(single.join(earliest, and_(j.instance_type == e.instance_type,
                                                j.counted == e.counted,
                                                j.created_s == e.first_s)))
        .group_by(*key, e.first_s),
        branch(_SUMS, [], [func.count(), func.sum(j.energy_j), func.sum(j.accelerator_j),
                           func.sum(j.dynamic_j), func.sum(j.units), func.sum(j.value),
                           func.sum(j.value * j.value)]).group_by(*key),
        branch(_REGION, [j.region], [func.sum(j.energy_j), func.sum(j.held_s)]
               ).group_by(*key, j.region),
        branch(_NODE, [j.node], [func.min(j.created_s)]).group_by(*key, j.node),
        branch(_LABELS, [jobs.agent_labels], []).select_from(named)
        .group_by(*key, jobs.agent_labels),
        branch(_NAME, [jobs.name, j.node, j.region], [func.min(j.created_s)])
        .select_from(named).group_by(*key, jobs.name, j.node, j.region),
        branch(_SOURCE, [b.node, b.component, b.source],
               [func.sum(b.dynamic_j + b.idle_j), func.sum(b.dynamic_j)])
        .select_from(sources.join(single, and_(j.job_id == b.job_id, j.node == b.node)))
        .group_by(*key, b.node, b.component, b.source),
    ]
    if with_ids:
        branches.append(branch(_IDS, [j.job_id], [j.created_s]))
    result = JobPools({}, {}, defaultdict(list), defaultdict(dict), defaultdict(dict),
                      defaultdict(list), defaultdict(set), defaultdict(dict))
    nodes: dict[PoolKey, list[tuple[float, str]]] = defaultdict(list)
    with engine.connect() as connection:
        for kind, itype, counted, w1, w2, w3, *n in connection.execute(union_all(*branches)):
            pool = PoolKey(itype, bool(counted))
            if kind == _SUMS:
                result.sums[pool] = PoolSums(int(n[0]), *(float(v) for v in n[1:]))
            elif kind == _FIRST:
                result.first[pool] = (float(n[0]), w1)
            elif kind == _IDS:
                result.job_ids[pool].append((float(n[0]), w1))
            elif kind == _REGION:
                result.regions[pool][w1] = (float(n[0]), float(n[1]))
            elif kind == _NODE:
                nodes[pool].append((float(n[0]), w1))
            elif kind == _LABELS:
                result.agent_labels[pool].add(w1)
            elif kind == _NAME:
                result.names[pool][(w1, w2, w3)] = float(n[0])
            else:
                result.sources[pool][(w1, w2, w3)] = (float(n[0]), float(n[1]))
    for listed in result.job_ids.values():
        listed.sort()
    for pool, found in nodes.items():
        result.nodes[pool] = [node for _first, node in sorted(found)]
    return result
