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

Jobs that ended on one node and settled are already added up per node and day in the
store (:mod:`joulestat.store.job_days`): for the days a window holds whole
(:func:`whole_days`), their sums are read instead of their jobs, and only the other jobs
(running, not yet settled, on a day the window cuts) are added up from their totals
here. Both are the same kinds of sums, so each kind is read from both and added in
Python.

The sums are those of the per-job path: the same totals (settled totals plus the raw
rows after them, :func:`joulestat.store.jobs.recent_rows`). Only the order of additions
differs, so a figure agrees to rounding (tests/store/test_compare_pools.py checks
the rows against the per-job path's).

Except for a running job: it is counted up to its node's totals boundary
(``nodes.totals_until_ms``, 2 to 7 minutes behind the clock), energy, units and held
time alike, and left out while nothing of it is settled (:attr:`JobPools.running`
counts both, for the note that says so). Its raw windows after the boundary are most
of a busy fleet's recent rows (12 to 48 per job and device at 1 s ticks: millions over
50,000 running jobs); a job that ended is read to its last window, as before. So the
maintain pass can keep the running jobs' sums as well, as of that boundary (the day
:data:`~joulestat.store.job_days.RUNNING_DAY_S`), and a busy fleet's 50,000 running
jobs are a few thousand rows here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import (
    Double,
    Select,
    String,
    and_,
    case,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Engine

from joulestat.core.tick import Component
from joulestat.store.job_days import DAY_S, RUNNING_DAY_S, units_key
from joulestat.store.jobs import (
    JobFilter,
    job_id_select,
    recent_rows,
    totals_rows,
)
from joulestat.store.model_split import ordinary_units
from joulestat.store.schema import (
    JOB_DAY_SOURCES,
    JOB_DAY_SUMS,
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    NODES,
    settled_until_ms,
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
    # Running single-node jobs: (counted up to their node's totals boundary, left out
    # because nothing of them is settled yet)
    running: tuple[int, int] = (0, 0)


def multi_node_ids(engine: Engine, where: JobFilter) -> list[str]:
    """The matching jobs on several nodes (by start, then id): those :func:`job_pools`
    leaves to the per-job path. Counted among the parts no day sums hold (their own
    index, migration 0013): the fold takes only single-node jobs' parts and whatever
    gives a job another node takes its sums apart (agent/store/job_days.py), so all of
    such a job's parts are there, and a fleet's folded week is not counted part by part
    (0.16 s over 124,200 jobs when every job's parts were). A job on no node is not one
    of them: every writer saves a job with its part, in one transaction."""
    parts, jobs = JOB_NODES.c, JOBS.c
    several = (select(parts.job_id).where(parts.pooled_day_s.is_(None))
               .group_by(parts.job_id).having(func.count() > 1))
    query = (select(jobs.id).where(jobs.id.in_(several), jobs.id.in_(job_id_select(where)))
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
                    "units_recent", ended_only=True).where(raw.unit == unit),
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
                     func.sum(raw.idle_j).label("idle_j")], job_ids, None, "sources_recent",
                    ended_only=True),
        totals_rows(JOB_ENERGY_TOTALS, [totals.component, totals.source,
                                        totals.dynamic_j, totals.idle_j], job_ids, None)
    ).cte("source_parts").prefix_with("MATERIALIZED")


def whole_days(where: JobFilter) -> Any | None:
    """The (node, day_s) whose day sums (:mod:`joulestat.store.job_days`) hold every job
    there that ``where`` matches, as a common table expression: a day after ``since_s``
    (all its jobs ended after it) whose jobs all started by ``until_s``. None when
    ``where`` asks for what the sums do not keep (a status, node, instance type, ids, a
    label, the newest jobs): then every job is read one by one."""
    if (where.status, where.node, where.instance_type, where.job_ids, where.label_key,
            where.newest) != (None,) * 6:
        return None
    d = JOB_DAY_SUMS.c
    query = select(d.node, d.day_s).where(d.unit == "")
    if where.kind is not None:
        query = query.where(d.kind == where.kind)
    if where.since_s is not None:
        query = query.where(d.day_s > where.since_s)
    query = query.group_by(d.node, d.day_s)
    if where.until_s is not None:
        query = query.having(func.max(d.last_created_s) <= where.until_s)
    return query.cte("whole_days")


def _outside(matching: Select[Any], days: Any, where: JobFilter) -> Select[Any]:
    """``matching`` less the jobs that ``days``' sums hold, found from the parts no
    whole day holds (those never folded, and those of days the window cuts), not by
    looking at every job: a job folded into a day is on one node, so it is outside
    exactly when its part is. Over 124,200 jobs, 0.23 s when every job was tested
    against the whole days (an anti-join over all of them). Read once (a MATERIALIZED
    common table expression) for the statement's several uses of it: inline,
    PostgreSQL expected nearly every job to remain and planned the joins on them for
    10^5 jobs (6.7 s over 124,200, where 5,000 remained; 1.0 s so)."""
    parts, d = JOB_NODES.c, JOB_DAY_SUMS.c
    # The days with sums the window may hold jobs of, but not whole.
    cut = select(d.node, d.day_s).where(d.unit == "", *_of_kind(JOB_DAY_SUMS, where))
    if where.since_s is not None:
        cut = cut.where(d.day_s > where.since_s - DAY_S)
    cut_days = cut.except_(select(days.c.node, days.c.day_s)).subquery("cut_days")
    rest_parts = union_all(
        select(parts.job_id).where(parts.pooled_day_s.is_(None)),
        select(parts.job_id).select_from(JOB_NODES.join(cut_days, and_(
            parts.node == cut_days.c.node, parts.pooled_day_s == cut_days.c.day_s))))
    rest = (matching.where(JOBS.c.id.in_(rest_parts))
            .cte("outside_days").prefix_with("MATERIALIZED"))
    return select(rest.c.id)


def _days_to_read(engine: Engine, where: JobFilter) -> Any | None:
    """:func:`whole_days` where reading their sums pays (:func:`_mostly_folded`), else
    None: the one decision :func:`job_pools` and :func:`units_counted` both take."""
    days = whole_days(where)
    return days if days is not None and _mostly_folded(engine, days, where) else None


def _mostly_folded(engine: Engine, days: Any, where: JobFilter) -> bool:
    """Whether the jobs ``days``' sums hold outnumber the parts no sum holds (a few
    thousand rows of each kind to count). Setting the folded jobs aside costs the rest a
    step of its own (:func:`_outside`); where most jobs are running (a fleet's first
    hours) it cost more than the folded ones saved (3.5 against 2.9 s over 50,000
    running jobs), so then every job is read one by one, as before the day sums."""
    d, parts = JOB_DAY_SUMS.c, JOB_NODES.c
    folded = (select(func.coalesce(func.sum(d.runs), 0))
              .select_from(_in_days(JOB_DAY_SUMS, days))
              .where(d.unit == "", *_of_kind(JOB_DAY_SUMS, where)).scalar_subquery())
    unfolded = (select(func.count()).select_from(JOB_NODES)
                .where(parts.pooled_day_s.is_(None)).scalar_subquery())
    with engine.connect() as connection:
        found, rest = connection.execute(select(folded, unfolded)).one()
    return int(found) > 0 and int(found) >= int(rest)


def units_counted(engine: Engine, where: JobFilter) -> dict[str, int]:
    """Per unit, how many matching jobs (on any number of nodes) counted some of it:
    which unit a comparison is per when none is asked."""
    job_ids = job_id_select(where)
    days = _days_to_read(engine, where)
    if days is not None:
        job_ids = _outside(job_ids, days, where)
    raw, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    both = union_all(
        recent_rows(JOB_UNITS, [raw.unit], [func.sum(raw.count).label("count")], job_ids,
                    None).where(ordinary_units(raw.unit)),
        totals_rows(JOB_UNIT_TOTALS, [totals.unit, totals.count.label("count")], job_ids,
                    None).where(ordinary_units(totals.unit))).subquery("all_units")
    per_job = (select(both.c.job_id, both.c.unit).group_by(both.c.job_id, both.c.unit)
               .having(func.sum(both.c.count) > 0).subquery("counted"))
    queries = [select(per_job.c.unit, func.count().label("jobs")).group_by(per_job.c.unit)]
    if days is not None:
        d = JOB_DAY_SUMS.c
        queries.append(select(d.unit, func.sum(d.runs))
                       .select_from(_in_days(JOB_DAY_SUMS, days))
                       .where(d.unit != "", *_of_kind(JOB_DAY_SUMS, where))
                       .group_by(d.unit))
    found: defaultdict[str, int] = defaultdict(int)
    with engine.connect() as connection:
        for unit, jobs in connection.execute(union_all(*queries)):
            found[str(unit)] += int(jobs)
    return dict(found)


def _in_days(table: Any, days: Any) -> Any:
    """``table`` (day sums or their sources) on the (node, day) of ``days``."""
    return table.join(days, and_(table.c.node == days.c.node, table.c.day_s == days.c.day_s))


def _of_kind(table: Any, where: JobFilter) -> list[Any]:
    """Its rows of the kind ``where`` asks for (all, when none)."""
    return [] if where.kind is None else [table.c.kind == where.kind]


# What each branch of the one statement of job_pools() is about, its first column.
_SUMS, _FIRST, _IDS, _REGION, _NODE, _LABELS, _NAME, _SOURCE, _RUNNING = (
    "sums", "first", "ids", "region", "node", "labels", "name", "source", "running")
_NUMBER = null().cast(Double)
_WORD = null().cast(String)


def _branch(kind: str, key: list[Any], words: list[Any], numbers: list[Any]) -> Select[Any]:
    """A row of the one statement: its kind, the pool's key, three words, seven numbers
    (NULL where a kind has fewer)."""
    return select(literal(kind, String), *key, *(words + [_WORD] * (3 - len(words))),
                  *(numbers + [_NUMBER] * (7 - len(numbers))))


def _first_branch(rows: Any, key: list[Any], created: Any, job_id: Any) -> Select[Any]:
    """Per pool, the first job (earliest start, then smallest id) of ``rows``."""
    earliest = (select(*key, func.min(created).label("first_s")).select_from(rows)
                .group_by(*key).subquery())
    e = earliest.c
    return (_branch(_FIRST, key, [func.min(job_id)], [e.first_s])
            .select_from(rows.join(earliest, and_(key[0] == e[key[0].name],
                                                  key[1] == e[key[1].name],
                                                  created == e.first_s)))
            .group_by(*key, e.first_s))


def _day_branches(days: Any, where: JobFilter, unit: str | None) -> list[Select[Any]]:
    """The branches of :func:`job_pools` read from the day sums of ``days``: per pool
    the rows of ``unit`` (jobs that counted it) and the per-run rows of the jobs that
    did not; the sources of either by the units they counted."""
    d, s = JOB_DAY_SUMS.c, JOB_DAY_SOURCES.c
    if unit is None:
        chosen: Any = d.unit == ""
        source_counted: Any = literal(0)
    else:
        counted_it = units_key([unit])  # ",unit,": within the set of a job's units
        chosen = or_(d.unit == unit,
                     and_(d.unit == "", ~d.units_key.contains(counted_it, autoescape=True)))
        source_counted = case((s.units_key.contains(counted_it, autoescape=True), 1), else_=0)
    rows = (select(JOB_DAY_SUMS, case((d.unit != "", 1), else_=0).label("counted"))
            .select_from(_in_days(JOB_DAY_SUMS, days))
            .where(chosen, *_of_kind(JOB_DAY_SUMS, where))
            .cte("day_rows").prefix_with("MATERIALIZED"))
    r = rows.c
    key = [r.instance_type, r.counted]
    sources = (select(JOB_DAY_SOURCES, source_counted.label("counted"))
               .select_from(_in_days(JOB_DAY_SOURCES, days))
               .where(*_of_kind(JOB_DAY_SOURCES, where)).subquery("day_sources"))
    b = sources.c
    running = (select(func.coalesce(func.sum(d.runs), 0))
               .select_from(_in_days(JOB_DAY_SUMS, days))
               .where(d.unit == "", d.day_s == RUNNING_DAY_S, *_of_kind(JOB_DAY_SUMS, where))
               .scalar_subquery())
    return [
        _branch(_RUNNING, [literal(""), literal(0)], [], [running, running]),
        _branch(_SUMS, key, [], [func.sum(r.runs), func.sum(r.energy_j),
                                 func.sum(r.accelerator_j), func.sum(r.dynamic_j),
                                 func.sum(r.units), func.sum(r.value_sum),
                                 func.sum(r.value_squares)]).group_by(*key),
        _first_branch(rows, key, r.first_s, r.first_job_id),
        _branch(_REGION, key, [r.region], [func.sum(r.energy_j), func.sum(r.held_s)]
                ).group_by(*key, r.region),
        _branch(_NODE, key, [r.node], [func.min(r.first_s)]).group_by(*key, r.node),
        _branch(_LABELS, key, [r.agent_labels], []).group_by(*key, r.agent_labels),
        _branch(_NAME, key, [r.name, r.node, r.region], [func.min(r.first_s)])
        .group_by(*key, r.name, r.node, r.region),
        _branch(_SOURCE, [b.instance_type, b.counted], [b.node, b.component, b.source],
                [func.sum(b.energy_j), func.sum(b.dynamic_j)])
        .group_by(b.instance_type, b.counted, b.node, b.component, b.source),
    ]


def job_pools(engine: Engine, where: JobFilter, unit: str | None,
              with_ids: bool = True) -> JobPools:
    """The matching single-node jobs added up per :class:`PoolKey` (see the module's
    docstring), counted per ``unit`` (None: every pool is per run), running jobs up to
    their node's totals boundary; their ids too when ``with_ids`` (a row lists its
    jobs; 10^5 of them are most of what leaves the database; the day sums keep no ids,
    so then every job is read one by one).

    One statement: the jobs' parts are read once (a common table expression) and each
    kind of sum is a branch of a ``UNION ALL`` over them, its kind in the first column
    and the columns it does not use NULL; the day sums' branches are added to it.
    """
    days = None if with_ids else _days_to_read(engine, where)
    matching = job_id_select(where)
    if days is not None:
        matching = _outside(matching, days, where)
    jobs, parts = JOBS.c, JOB_NODES.c
    sources = _part_sources(matching)
    energy = _part_energy(sources)
    counted_units: Any = literal(0.0, Double)
    joined: Any = (JOBS.join(JOB_NODES, parts.job_id == jobs.id)
                   .join(NODES, NODES.c.node == parts.node)
                   .outerjoin(energy, and_(energy.c.job_id == parts.job_id,
                                           energy.c.node == parts.node)))
    if unit is not None:
        units = _part_units(matching, unit)
        joined = joined.outerjoin(units, and_(units.c.job_id == parts.job_id,
                                              units.c.node == parts.node))
        counted_units = func.coalesce(units.c.count, 0.0)
    energy_j = func.coalesce(energy.c.energy_j, 0.0)
    # A running part is held up to its node's boundary, as far as its energy is read
    # (and as fold_running holds it).
    running = parts.ended_s.is_(None)
    settled = or_(~running, energy.c.job_id.is_not(None))
    held = func.coalesce(parts.ended_s, settled_until_ms() / 1000.0) - parts.started_s
    # The single-node jobs, once: as a subquery PostgreSQL ran it as a merge semi-join
    # over every job (5 s of the 6.7 above).
    one_cte = (select(parts.job_id).where(parts.job_id.in_(matching))
               .group_by(parts.job_id).having(func.count() == 1)
               .cte("one_node").prefix_with("MATERIALIZED"))
    one_node = select(one_cte.c.job_id)
    single = (select(
        jobs.id.label("job_id"), jobs.created_s.label("created_s"), parts.node.label("node"),
        parts.instance_type.label("instance_type"), parts.region.label("region"),
        case((held > 0, held), else_=0.0).label("held_s"),
        energy_j.label("energy_j"),
        func.coalesce(energy.c.accelerator_j, 0.0).label("accelerator_j"),
        func.coalesce(energy.c.dynamic_j, 0.0).label("dynamic_j"),
        counted_units.label("units"),
        case((counted_units > 0, 1), else_=0).label("counted"),
        case((counted_units > 0, energy_j / counted_units), else_=energy_j).label("value"),
        case((running, 1), else_=0).label("running"))
        .select_from(joined).where(jobs.id.in_(one_node), settled)
        .cte("single").prefix_with("MATERIALIZED"))
    j = single.c
    named = single.join(JOBS, jobs.id == j.job_id)  # name and idle labels, where asked
    key = [j.instance_type, j.counted]
    b = sources.c
    branches = [
        _first_branch(single, key, j.created_s, j.job_id),
        _branch(_SUMS, key, [], [func.count(), func.sum(j.energy_j), func.sum(j.accelerator_j),
                                 func.sum(j.dynamic_j), func.sum(j.units), func.sum(j.value),
                                 func.sum(j.value * j.value)]).group_by(*key),
        _branch(_REGION, key, [j.region], [func.sum(j.energy_j), func.sum(j.held_s)]
                ).group_by(*key, j.region),
        _branch(_NODE, key, [j.node], [func.min(j.created_s)]).group_by(*key, j.node),
        _branch(_LABELS, key, [jobs.agent_labels], []).select_from(named)
        .group_by(*key, jobs.agent_labels),
        _branch(_NAME, key, [jobs.name, j.node, j.region], [func.min(j.created_s)])
        .select_from(named).group_by(*key, jobs.name, j.node, j.region),
        _branch(_SOURCE, key, [b.node, b.component, b.source],
                [func.sum(b.dynamic_j + b.idle_j), func.sum(b.dynamic_j)])
        .select_from(sources.join(single, and_(j.job_id == b.job_id, j.node == b.node)))
        .group_by(*key, b.node, b.component, b.source),
    ]
    all_running = (select(func.count()).select_from(JOB_NODES)
                   .where(parts.job_id.in_(one_node), running).scalar_subquery())
    branches.append(_branch(_RUNNING, [literal(""), literal(0)], [],
                            [func.coalesce(func.sum(j.running), 0), all_running])
                    .select_from(single))
    if with_ids:
        branches.append(_branch(_IDS, key, [j.job_id], [j.created_s]))
    if days is not None:
        branches += _day_branches(days, where, unit)
    with engine.connect() as connection:
        return _added_up(connection.execute(union_all(*branches)))


def _added_up(rows: Any) -> JobPools:
    """:class:`JobPools` from the statement's rows; a pool's sums from its jobs and from
    its day sums come as rows of the same kind, and are added here."""
    result = JobPools({}, {}, defaultdict(list), defaultdict(dict), defaultdict(dict),
                      defaultdict(list), defaultdict(set), defaultdict(dict))
    nodes: dict[PoolKey, dict[str, float]] = defaultdict(dict)
    running = (0, 0)
    for kind, itype, counted, w1, w2, w3, *n in rows:
        pool = PoolKey(itype, bool(counted))
        if kind == _SUMS:
            found = PoolSums(int(n[0]), *(float(v) for v in n[1:]))
            before = result.sums.get(pool)
            result.sums[pool] = found if before is None else PoolSums(
                before.runs + found.runs,
                *(float(getattr(before, f) + getattr(found, f))
                  for f in PoolSums.__dataclass_fields__ if f != "runs"))
        elif kind == _FIRST:
            first = (float(n[0]), w1)
            result.first[pool] = min(result.first.get(pool, first), first)
        elif kind == _RUNNING:  # (counted, all running) of the jobs or of the day sums
            running = (running[0] + int(n[0]), running[1] + int(n[1]) - int(n[0]))
        elif kind == _IDS:
            result.job_ids[pool].append((float(n[0]), w1))
        elif kind == _REGION:
            energy_j, held_s = result.regions[pool].get(w1, (0.0, 0.0))
            result.regions[pool][w1] = (energy_j + float(n[0]), held_s + float(n[1]))
        elif kind == _NODE:
            nodes[pool][w1] = min(nodes[pool].get(w1, float(n[0])), float(n[0]))
        elif kind == _LABELS:
            result.agent_labels[pool].add(w1)
        elif kind == _NAME:
            named = result.names[pool]
            named[(w1, w2, w3)] = min(named.get((w1, w2, w3), float(n[0])), float(n[0]))
        else:
            energy_j, dynamic_j = result.sources[pool].get((w1, w2, w3), (0.0, 0.0))
            result.sources[pool][(w1, w2, w3)] = (energy_j + float(n[0]),
                                                  dynamic_j + float(n[1]))
    for listed in result.job_ids.values():
        listed.sort()
    for pool, found_nodes in nodes.items():
        result.nodes[pool] = [node for node, _first in sorted(
            found_nodes.items(), key=lambda item: (item[1], item[0]))]
    return replace(result, running=running)
