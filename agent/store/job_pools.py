"""A fleet's single-node jobs added up per instance type in SQL, for a comparison by setup.

``joulestat compare --by instance_type`` and the Compare page pool jobs per setup. Read
a job at a time (:func:`joulestat.store.jobs.job_totals`, then a record, a price and a
bound per job), a fleet's week of 10^5 jobs took 10 to 20 s, nearly all of it in
Python (issue 28). A job on one node, which is most of a fleet's, joins the row of its
node's instance type; so here the database adds up per (instance type, counted the unit
or not) what adds up: energy, units, held time and energy per region (what prices
them), energy per node, component and source (what bounds them), which nodes (their
sources and accelerators) and which idle policies. The runs' spread comes back as a
:class:`~joulestat.core.spread.Spread` per pool, merged from each job's own figure
(energy per unit, or per run) or a summed day's count, mean and squared deviations:
:func:`joulestat.reports.compare.table.row_of` takes every comparison row's mean and
spread from one. Jobs on several nodes are few and are left to the per-job path
(:func:`multi_node_ids`), which names their setup from all their nodes' types.

A node's settled days of ended jobs are read as the day sums its maintain pass keeps
(:mod:`joulestat.store.pool_days`), when the comparison asks for a kind and a window at
most and no job ids: a few rows per node and day instead of its jobs. Running jobs, the
days not summed yet and those the window cuts are read job by job, in the same
statement: a running job from the copy of its row and totals that the node's pass keeps
(:mod:`joulestat.store.open_parts`), unless it changed since.

Every job is read by the store's one rule (:mod:`joulestat.store.jobs`): its settled
totals plus the raw rows after its node's totals boundary, a running job as of its last
flush and held up to ``now_s``, exactly as its own page, ``report`` and the job API
count it. Only the order of additions differs from the per-job path, so a figure agrees
to rounding (tests/store/test_compare_pools.py checks the rows against it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    Double,
    Integer,
    Select,
    String,
    and_,
    case,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Engine

from joulestat.core.spread import Spread
from joulestat.core.tick import Component
from joulestat.store.fleet_halves import NodeRange, read_by_node
from joulestat.store.jobs import JobFilter, job_id_select, kind_and_window, matching
from joulestat.store.model_split import ordinary_units
from joulestat.store.pool_days import (
    counted_unit,
    maybe_unsummed,
    summed_day_in,
    summed_days,
)
from joulestat.store.read_rule import (
    job_parts,
    part_energy_rows,
    part_unit_rows,
    recent_rows,
    settled_until_ms,
    totals_rows,
)
from joulestat.store.schema import (
    JOB_NODES,
    JOB_OPEN_ENERGY,
    JOB_OPEN_KINDS,
    JOB_OPEN_PARTS,
    JOB_OPEN_SOURCES,
    JOB_OPEN_SUMS,
    JOB_POOL_SOURCES,
    JOB_POOL_SUMS,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    NODES,
)


@dataclass(frozen=True, slots=True)
class PoolKey:
    """A pool: the single-node jobs of one instance type ('' when unknown) that counted
    the unit (``counted``) or did not."""

    instance_type: str
    counted: bool



@dataclass(frozen=True, slots=True)
class PoolSums:
    """The sums of one pool's jobs (see the module's docstring)."""

    runs: int
    energy_j: float
    accelerator_j: float
    dynamic_j: float
    units: float

    def plus(self, other: PoolSums) -> PoolSums:
        """Both sets of jobs' sums as one."""
        return PoolSums(self.runs + other.runs, self.energy_j + other.energy_j,
                        self.accelerator_j + other.accelerator_j,
                        self.dynamic_j + other.dynamic_j, self.units + other.units)


@dataclass(frozen=True, slots=True)
class JobPools:
    """What :func:`job_pools` read: per pool its sums, its first job (by start, then
    id: the order of the per-job path, and of the pools themselves), the
    :class:`~joulestat.core.spread.Spread` of its jobs' own figures (energy per unit for
    a pool that counted, energy per run else), held seconds and energy per region,
    energy and dynamic energy per (node, component, source), its nodes, its jobs'
    recorded idle labels, and its (job name, node, region) (what a job's price notes
    name). ``job_ids`` lists each pool's jobs by start, only when asked (then nothing
    is read from the day sums)."""

    sums: dict[PoolKey, PoolSums]
    first: dict[PoolKey, tuple[float, str]]  # (started_s, id)
    spread: dict[PoolKey, Spread]
    job_ids: dict[PoolKey, list[tuple[float, str]]]  # (started_s, id), by start then id
    regions: dict[PoolKey, dict[str, tuple[float, float]]]  # region -> (energy_j, held_s)
    sources: dict[PoolKey, dict[tuple[str, str, str], tuple[float, float]]]
    nodes: dict[PoolKey, list[str]]  # in the order their first job started
    agent_labels: dict[PoolKey, set[str]]  # the jobs' agent_labels JSON, distinct
    # (job name, node, region) -> when the first such job started
    names: dict[PoolKey, dict[tuple[str, str, str], float]]


def multi_node_ids(engine: Engine, where: JobFilter) -> list[str]:
    """The matching jobs on several nodes (by start, then id): those :func:`job_pools`
    leaves to the per-job path. A job on no node is not one of them: every writer saves
    a job with its part, in one transaction."""
    parts, jobs = JOB_NODES.c, JOBS.c
    several = select(parts.job_id).group_by(parts.job_id).having(func.count() > 1)
    query = (select(jobs.id).where(jobs.id.in_(several), *matching(where))
             .order_by(jobs.created_s, jobs.id))
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            # Parallel workers would each count every part again (a parallel hash
            # join builds its whole inner side in each): 0.34 s against 0.12 s in one
            # process over a fleet's week, 398,000 parts, on 2 cores.
            connection.exec_driver_sql("SET LOCAL max_parallel_workers_per_gather = 0")
        return [str(job_id) for job_id in connection.execute(query).scalars()]


def has_latency(engine: Engine, where: JobFilter) -> bool:
    """Whether a matching job holds served latency histograms or a serving trace (which
    :func:`job_pools` does not add up: a comparison with them reads its jobs one by
    one)."""
    parts = JOB_NODES.c
    query = select(parts.job_id).where(parts.job_id.in_(job_id_select(where)),
                                       or_(parts.latency.is_not(None),
                                           parts.serving_trace.is_not(None))).limit(1)
    with engine.connect() as connection:
        return connection.execute(query).first() is not None


def sums_stand_in(where: JobFilter) -> bool:
    """Whether the day sums (:mod:`joulestat.store.pool_days`) may stand in for the
    jobs ``where`` matches: it asks for a kind and a window at most (a summed day holds
    a node's jobs of every status, label and id)."""
    return (where.status is None and where.node is None and where.instance_type is None
            and where.job_ids is None and where.label_key is None and where.newest is None)


def _summed_in(where: JobFilter, nodes: NodeRange) -> Select[Any]:
    """The sums rows of the summed days on ``nodes`` in ``where``'s window and of its
    kind."""
    sums = JOB_POOL_SUMS.c
    days = summed_days(where.since_s, where.until_s).subquery("summed")
    query = (select(JOB_POOL_SUMS).join(days, and_(days.c.node == sums.node,
                                                   days.c.day_s == sums.day_s))
             .where(nodes.holds(sums.node)))
    if where.kind is not None:
        query = query.where(sums.kind == where.kind)
    return query


def units_counted(engine: Engine, where: JobFilter, multi_node: Sequence[str]
                  ) -> dict[str, int]:
    """Per unit, how many matching jobs (on any number of nodes) counted some of it:
    which unit a comparison is per when none is asked (:func:`units_by_kind`'s
    counts, summed over the kinds). ``multi_node`` lists the matching jobs on several
    nodes (:func:`multi_node_ids`)."""
    counted: dict[str, int] = defaultdict(int)
    for units in _units_counted_by_kind(engine, where, multi_node).values():
        for unit, jobs in units.items():
            counted[unit] += jobs
    return dict(counted)


def units_by_kind(engine: Engine) -> dict[str, list[str]]:
    """Kind -> the units its jobs counted, most counted first, ties by name: the
    Compare page's choices, its first the unit :func:`units_counted` makes
    ``joulestat compare`` choose for the kind over all time. Counted as the comparison
    reads jobs (a summed day from its sums), not from every job's unit rows (a fleet's
    week: 445,000 rows, 1 s)."""
    where = JobFilter()
    # The jobs on several nodes are found and counted on a connection of their own while
    # the single-node parts and summed days are (a third statement beside the halves of
    # read_by_node, 0.12 s of the page's 2 s over a fleet's week no longer waited for).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="joulestat-units") as beside:
        several = beside.submit(lambda: _jobs_units(engine, multi_node_ids(engine, where)))
        found = _per_kind([*_matching_units(engine, where, ()), *several.result()])
    return {kind: sorted(units, key=lambda unit: (-units[unit], unit))
            for kind, units in sorted(found.items())}


def _units_counted_by_kind(engine: Engine, where: JobFilter, multi_node: Sequence[str]
                           ) -> dict[str, dict[str, int]]:
    """Per kind and unit, how many matching jobs counted some of it. Where the day
    sums stand in (:func:`sums_stand_in`), a summed day's jobs are counted from its
    sums, the other single-node parts as :func:`job_pools` reads them (from their
    copies where these hold), the jobs on several nodes by id; else every matching job
    by id."""
    return _per_kind(_matching_units(engine, where, multi_node))


def _matching_units(engine: Engine, where: JobFilter, multi_node: Sequence[str]
                    ) -> list[Any]:
    """:func:`_units_counted_by_kind`'s rows (kind, unit, jobs), a kind and unit once
    per statement of :func:`~joulestat.store.fleet_halves.read_by_node`."""
    summed = sums_stand_in(where)
    return read_by_node(engine, summed, lambda nodes: _units_statement(
        where, summed, multi_node if nodes.first is None else (), nodes))


def _per_kind(rows: Sequence[Any]) -> dict[str, dict[str, int]]:
    """Rows (kind, unit, jobs) of disjoint sets of jobs as kind -> unit -> jobs."""
    found: dict[str, dict[str, int]] = defaultdict(dict)
    for kind, unit, jobs in rows:
        found[str(kind)][str(unit)] = found[str(kind)].get(str(unit), 0) + int(jobs)
    return found


def _units_statement(where: JobFilter, summed: bool, multi_node: Sequence[str],
                     nodes: NodeRange) -> Any:
    """:func:`_units_counted_by_kind`'s statement over the single-node parts and summed
    days on ``nodes`` (every matching job by id when not ``summed``), and the jobs of
    ``multi_node``: per kind and unit, how many jobs counted some."""
    if not summed:
        rows = _unit_rows(job_id_select(where))
    else:
        parts = _open_parts(where, nodes).cte("open_parts").prefix_with("MATERIALIZED")
        rows = [*part_unit_rows(parts, [parts.c.job_id, parts.c.kind], ordinary_units,
                                nodes.holds).selects]
        if multi_node:
            rows += _unit_rows(list(multi_node))
    counted: Any = _jobs_per_unit(rows)
    if summed:
        days = (_summed_in(where, nodes).where(JOB_POOL_SUMS.c.unit != "")
                .subquery("summed_units"))
        every = union_all(counted, select(days.c.kind, days.c.unit, func.sum(days.c.runs))
                          .group_by(days.c.kind, days.c.unit)).subquery("units_jobs")
        counted = (select(every.c.kind, every.c.unit, func.sum(every.c.jobs))
                   .group_by(every.c.kind, every.c.unit))
    return counted


def _jobs_per_unit(rows: list[Select[Any]]) -> Select[Any]:
    """Per kind and unit, how many jobs of the unit ``rows`` (job, kind, unit, count)
    counted some."""
    both = union_all(*rows).subquery("all_units")  # flat: SQLite nests no UNION
    b = both.c
    per_job = (select(b.kind, b.unit).group_by(b.job_id, b.kind, b.unit)
               .having(func.sum(b.count) > 0).subquery("counted"))
    return (select(per_job.c.kind, per_job.c.unit, func.count().label("jobs"))
            .group_by(per_job.c.kind, per_job.c.unit))


def _jobs_units(engine: Engine, job_ids: Sequence[str]) -> list[Any]:
    """Rows (kind, unit, jobs): how many of the jobs ``job_ids`` (any number of nodes
    each) counted some of each unit."""
    if not job_ids:
        return []
    with engine.connect() as connection:
        return list(connection.execute(_jobs_per_unit(_unit_rows(list(job_ids)))).all())


def _unit_rows(job_ids: Select[Any] | list[str]) -> list[Select[Any]]:
    """The ordinary unit rows of ``job_ids`` as (job, kind, unit, count): the raw ones
    after their node's totals boundary, summed, and the totals."""
    raw, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    halves = [recent_rows(JOB_UNITS, [raw.unit], [func.sum(raw.count).label("count")], job_ids,
                          None).where(ordinary_units(raw.unit)),
              totals_rows(JOB_UNIT_TOTALS, [totals.unit, totals.count.label("count")], job_ids,
                          None).where(ordinary_units(totals.unit))]
    out = []
    for index, half in enumerate(halves):
        rows = half.subquery(f"unit_rows_{index}")
        out.append(select(rows.c.job_id, JOBS.c.kind, rows.c.unit, rows.c.count)
                   .join_from(rows, JOBS, JOBS.c.id == rows.c.job_id))
    return out


# What each branch of the one statement of job_pools() is about, its first column.
_SUMS, _RUN, _REGION, _NODE, _LABELS, _NAME, _SOURCE = (
    "sums", "run", "region", "node", "labels", "name", "source")
_NUMBER = null().cast(Double)
_WORD = null().cast(String)


def _branch(kind: str, key: list[Any], words: list[Any], numbers: list[Any]) -> Select[Any]:
    """A row of the one statement: its kind, the pool's key, three words, five numbers
    (NULL where a kind has fewer)."""
    return select(literal(kind, String), *key, *(words + [_WORD] * (3 - len(words))),
                  *(numbers + [_NUMBER] * (5 - len(numbers))))


def job_pools(engine: Engine, where: JobFilter, unit: str | None, now_s: float,
              with_ids: bool = False) -> JobPools:
    """The matching single-node jobs added up per :class:`PoolKey` (see the module's
    docstring), counted per ``unit`` (None: every pool is per run), a running job up
    to its last flush and held up to ``now_s``; with each pool's job ids when
    ``with_ids``.

    One statement (one snapshot, on SQLite too, while a maintain pass sums a day; on
    PostgreSQL two at once over halves of the nodes, sharing one:
    :func:`~joulestat.store.fleet_halves.read_by_node`), its steps MATERIALIZED common
    table expressions each read once. The jobs of the days the store has summed
    (:mod:`joulestat.store.pool_days`) come as those sums' rows; the others, job by job:
    the single-node parts with their node's totals boundary (``parts``), each with its
    count of ``unit`` and so its pool (``keyed``), their energy rows, the raw ones after
    the boundary and the totals, each carrying its part's pool (``sources``), per part
    its energy (``single``). Both kinds of row then go through the same sums
    (``pooled``), each kind of sum a branch of a ``UNION ALL``, its kind in the first
    column and the columns it does not use NULL; a pool's spread is merged from its
    rows' (:class:`Spread`, in Python). A part is single-node when no part of its job is
    on another node, asked of the parts left once the summed days are out (a fleet's
    running jobs, not every part); with the summed days, those parts are read from their
    copies where these hold (:func:`_open_parts`), which are single-node already, and a
    copied part's totals from what its node's pass added up of them (a row per part, a
    few per node and source) where that still holds (:func:`_fresh`), else from its
    copied totals.
    """
    summed = sums_stand_in(where) and not with_ids
    return _added_up(read_by_node(engine, summed, lambda nodes: _pools_statement(
        where, unit, now_s, summed, nodes)), with_ids)


def _pools_statement(where: JobFilter, unit: str | None, now_s: float, summed: bool,
                     nodes: NodeRange) -> Any:
    """:func:`job_pools`' one statement, over the parts on ``nodes`` (the summed days'
    too, when ``summed``)."""
    parts = (_open_parts(where, nodes) if summed else _parts(where)
             ).cte("parts").prefix_with("MATERIALIZED")
    k = parts.c
    units: Any = literal(0.0, Double)
    joined: Any = parts
    if unit is not None:
        counts = _counts(parts, unit, nodes)
        joined = parts.outerjoin(counts, and_(counts.c.job_id == k.job_id,
                                              counts.c.node == k.node))
        units = func.coalesce(counts.c.count, 0.0)
    counted = case((units > 0, 1), else_=0)
    keyed = select(*k, units.label("units"), counted.label("counted")).select_from(joined)
    if summed:  # the open parts are single-node already
        keyed = keyed.add_columns(_flipped(k, unit, counted).label("flipped"))
    else:
        other = JOB_NODES.alias("other_part")
        keyed = keyed.where(~exists().where(other.c.job_id == k.job_id, other.c.node != k.node))
    keyed = keyed.cte("keyed").prefix_with("MATERIALIZED")
    c = keyed.c
    fresh = _fresh(keyed) if summed else None
    # A copied part on a node and kind whose copies' sums hold is read from those sums;
    # every other copied part from its copied totals.
    added_up = (None if fresh is None else
                exists().where(fresh.c.node == c.node, fresh.c.kind == c.kind))
    live_sources = part_energy_rows(
        keyed, [c.job_id, c.node, c.instance_type, c.counted],
        None if fresh is None else _stale(fresh, added_up, nodes), nodes.holds
    ).cte("sources").prefix_with("MATERIALIZED")
    s = live_sources.c
    part_j = s.dynamic_j + s.idle_j
    part_rows: Any = select(s.job_id, s.node, part_j.label("energy_j"),
                            case((s.component == Component.ACCELERATOR, part_j), else_=0.0)
                            .label("accelerator_j"), s.dynamic_j)
    if added_up is not None:
        part_rows = union_all(part_rows, select(
            c.job_id, c.node, c.copied_energy_j, c.copied_accelerator_j, c.copied_dynamic_j
        ).where(c.copied == 1, added_up))
    rows = part_rows.subquery("part_rows")
    energy = (select(rows.c.job_id, rows.c.node, func.sum(rows.c.energy_j).label("energy_j"),
                     func.sum(rows.c.accelerator_j).label("accelerator_j"),
                     func.sum(rows.c.dynamic_j).label("dynamic_j"))
              .group_by(rows.c.job_id, rows.c.node).subquery("energy"))
    energy_j = func.coalesce(energy.c.energy_j, 0.0)
    # Held as joulestat.carbon.held.Held holds a part: to its end, or now while it runs.
    held = func.coalesce(c.ended_s, literal(now_s, Double)) - c.started_s
    single = select(
        c.instance_type, c.counted.label("counted"), c.node, c.region, c.name,
        c.agent_labels,
        literal(1, Integer).label("runs"), energy_j.label("energy_j"),
        func.coalesce(energy.c.accelerator_j, 0.0).label("accelerator_j"),
        func.coalesce(energy.c.dynamic_j, 0.0).label("dynamic_j"),
        case((held > 0, held), else_=0.0).label("held_s"), c.units.label("units"),
        case((c.units > 0, energy_j / c.units), else_=energy_j).label("value_mean"),
        literal(0.0, Double).label("value_m2"), c.created_s.label("first_created_s"),
        c.job_id.label("first_job_id"),
    ).select_from(keyed.outerjoin(energy, and_(energy.c.job_id == c.job_id,
                                               energy.c.node == c.node)))
    sources: Any = select(s.instance_type, s.counted, s.node, s.component, s.source,
                          part_j.label("energy_j"), s.dynamic_j)
    if fresh is not None:
        single = union_all(single, _summed_rows(where, unit, nodes))
        sources = union_all(sources, _copies_sources(fresh, unit),
                            *_moved_sources(keyed, added_up),
                            _summed_sources(where, unit, nodes))
    pooled = single.cte("pooled").prefix_with("MATERIALIZED")
    j = pooled.c
    sourced = sources.subquery("sourced")
    o = sourced.c
    key = [j.instance_type, j.counted]
    branches = [
        _branch(_SUMS, key, [], [func.sum(j.runs), func.sum(j.energy_j),
                                 func.sum(j.accelerator_j), func.sum(j.dynamic_j),
                                 func.sum(j.units)]).group_by(*key),
        _branch(_RUN, key, [j.first_job_id], [j.first_created_s, j.runs, j.value_mean,
                                              j.value_m2]),
        _branch(_REGION, key, [j.region], [func.sum(j.energy_j), func.sum(j.held_s)]
                ).group_by(*key, j.region),
        _branch(_NODE, key, [j.node], [func.min(j.first_created_s)]).group_by(*key, j.node),
        _branch(_LABELS, key, [j.agent_labels], []).group_by(*key, j.agent_labels),
        _branch(_NAME, key, [j.name, j.node, j.region], [func.min(j.first_created_s)])
        .group_by(*key, j.name, j.node, j.region),
        _branch(_SOURCE, [o.instance_type, o.counted], [o.node, o.component, o.source],
                [func.sum(o.energy_j), func.sum(o.dynamic_j)])
        .group_by(o.instance_type, o.counted, o.node, o.component, o.source),
    ]
    return union_all(*branches)


def _flipped(k: Any, unit: str | None, counted: Any) -> Any:
    """1 for a copied part whose pool (``counted``: its count of ``unit`` now, raw rows
    after the boundary included) is not the one its copy's units put it in: it counted
    ``unit`` only after its node's last pass (on a fleet, the jobs that started since).
    Its copied sources are then in its node's sums under the other pool
    (:func:`_moved_sources`)."""
    if unit is None:
        return literal(0, Integer)
    by_copy = case((counted_unit(k.copied_units_key, unit), 1), else_=0)
    return case((and_(k.copied == 1, by_copy != counted), 1), else_=0)


def _fresh(keyed: Any) -> Any:
    """The (node, kind) pairs whose copies' sums (:mod:`joulestat.store.open_parts`)
    hold for this comparison: every copied part they add up is one of ``keyed``'s (none
    was taken out of use since the pass, none left out by the window)."""
    c, kinds = keyed.c, JOB_OPEN_KINDS.c
    copied = (select(c.node, c.kind, func.count().label("parts"))
              .where(c.copied == 1).group_by(c.node, c.kind).subquery("copied_kinds"))
    return (select(kinds.node, kinds.kind)
            .join_from(JOB_OPEN_KINDS, copied, and_(copied.c.node == kinds.node,
                                                    copied.c.kind == kinds.kind,
                                                    copied.c.parts == kinds.parts))
            .cte("fresh").prefix_with("MATERIALIZED"))


def _stale(fresh: Any, added_up: Any, nodes: NodeRange) -> Any:
    """For :func:`~joulestat.store.read_rule.part_energy_rows`: the copied totals
    rows of the parts on a (node, kind) not in ``fresh``, the copy table's rows kept
    to those nodes first (a few, or none, of a fleet's)."""
    kinds = JOB_OPEN_KINDS.c
    stale = select(kinds.node).where(nodes.holds(kinds.node),
                                     ~exists().where(fresh.c.node == kinds.node,
                                                     fresh.c.kind == kinds.kind))
    return lambda copy: and_(copy.c.node.in_(stale), ~added_up)


def _moved_sources(keyed: Any, added_up: Any) -> list[Select[Any]]:
    """The flipped parts' (:func:`_flipped`) copied totals, as the live sources, moved
    out of the pool their node's sums hold them in and into their own: a few rows, where
    taking their node's sums out of use would read all its copied totals."""
    c, e = keyed.c, JOB_OPEN_ENERGY.c
    # The flipped parts first (none with copied energy: nothing to move), then their
    # copied totals: on a fleet, the jobs that started since their node's last pass.
    flipped = (select(c.job_id, c.node, c.instance_type, c.counted)
               .where(c.flipped == 1, c.copied_energy_j > 0, added_up)
               .cte("flipped").prefix_with("MATERIALIZED"))
    f = flipped.c
    moved = (select(f.instance_type, f.counted, f.node, e.component, e.source,
                    (e.dynamic_j + e.idle_j).label("energy_j"), e.dynamic_j)
             .join_from(flipped, JOB_OPEN_ENERGY, and_(e.node == f.node, e.job_id == f.job_id))
             .cte("moved").prefix_with("MATERIALIZED"))
    m = moved.c
    return [select(m.instance_type, m.counted, m.node, m.component, m.source, m.energy_j,
                   m.dynamic_j),
            select(m.instance_type, literal(1, Integer) - m.counted, m.node, m.component,
                   m.source, -m.energy_j, -m.dynamic_j)]


def _copies_sources(fresh: Any, unit: str | None) -> Select[Any]:
    """The copied parts' energy per (node, component, source) of the (node, kind)
    pairs in ``fresh``, added up by their pass, as the live sources."""
    sources = JOB_OPEN_SOURCES.c
    counted = (literal(0, Integer) if unit is None else
               case((counted_unit(sources.units_key, unit), 1), else_=0))
    return (select(sources.instance_type, counted.label("counted"), sources.node,
                   sources.component, sources.source, sources.energy_j, sources.dynamic_j)
            .join_from(JOB_OPEN_SOURCES, fresh, and_(fresh.c.node == sources.node,
                                                     fresh.c.kind == sources.kind)))



def _parts(where: JobFilter) -> Select[Any]:
    """The matching parts, with their node's totals boundary (:func:`job_parts`) and
    what a comparison keeps of them."""
    p, jobs = JOB_NODES.c, JOBS.c
    return (job_parts(None, None)
            .add_columns(p.instance_type, p.region, p.started_s, p.ended_s, jobs.created_s,
                         jobs.name, jobs.agent_labels, jobs.kind)
            .join(JOBS, jobs.id == p.job_id)
            .where(*matching(where)))


def _open_parts(where: JobFilter, nodes: NodeRange) -> Any:
    """The matching single-node parts on ``nodes`` on no summed day in ``where``'s window, as
    :func:`_parts`' columns, ``copied`` and the copy's sums (``copied_energy_j``,
    ``copied_accelerator_j``, ``copied_dynamic_j``, ``copied_units_key``): 1 for the
    parts whose copy (:mod:`joulestat.store.open_parts`) holds with its sums, read from
    it, their totals too; 0 for the others (changed since their node's last pass),
    read from ``job_nodes`` and ``jobs``, which exclude the summed parts by the part's
    end: a single-node job's own (rows.py derives a job's end from its parts'), which
    lets PostgreSQL drop them before joining ``jobs``."""
    p, o, t = JOB_NODES.c, JOB_OPEN_PARTS.c, JOB_OPEN_SUMS.c
    other = JOB_NODES.alias("other_part")
    # A copied part is on no summed day: the pass copies after summing, and a part whose
    # day a later pass sums has ended since, which took its copy out of use.
    copied = (select(o.job_id, o.node, settled_until_ms().label("after_ms"), o.instance_type,
                     o.region, o.started_s, o.ended_s, o.created_s, o.name, o.agent_labels,
                     o.kind, literal(1, Integer).label("copied"),
                     t.energy_j.label("copied_energy_j"),
                     t.accelerator_j.label("copied_accelerator_j"),
                     t.dynamic_j.label("copied_dynamic_j"),
                     t.units_key.label("copied_units_key"))
              .join_from(JOB_OPEN_PARTS, NODES, NODES.c.node == o.node)
              .join(JOB_OPEN_SUMS, and_(t.node == o.node, t.job_id == o.job_id))
              .where(nodes.holds(o.node),
                     *kind_and_window(where, o.kind, o.created_s, o.ended_s)))
    # Which parts are neither summed nor copied, before anything is joined to them: a
    # few (changed since their node's last pass) of 400,000 parts over a fleet's week.
    # Copied means with its sums, which the pass makes with the copy.
    left = (select(p.job_id, p.node)
            .where(nodes.holds(p.node),
                   maybe_unsummed(p.ended_s, where.since_s, where.until_s),
                   ~summed_day_in(p.node, p.ended_s, where.since_s, where.until_s),
                   ~exists().where(t.job_id == p.job_id, t.node == p.node))
            .cte("uncopied").prefix_with("MATERIALIZED"))
    others = (_parts(where).add_columns(
        literal(0, Integer).label("copied"), _NUMBER.label("copied_energy_j"),
        _NUMBER.label("copied_accelerator_j"), _NUMBER.label("copied_dynamic_j"),
        _WORD.label("copied_units_key"))
              .join(left, and_(left.c.job_id == p.job_id, left.c.node == p.node))
              .where(~exists().where(other.c.job_id == p.job_id, other.c.node != p.node)))
    return union_all(copied, others)


def _counted_in(unit: str | None, units_key: Any, row_unit: Any) -> tuple[Any, Any]:
    """For a summed row of ``units_key`` and ``row_unit``: whether it belongs to a
    comparison per ``unit`` (its jobs' row per ``unit``, or their per-run row if they
    did not count it), and whether its pool is the one that counted."""
    if unit is None:
        return row_unit == "", literal(0, Integer)
    counted = counted_unit(units_key, unit)
    return (or_(row_unit == unit, and_(row_unit == "", ~counted)),
            case((row_unit == unit, 1), else_=0))


def _summed_rows(where: JobFilter, unit: str | None, nodes: NodeRange) -> Select[Any]:
    """The summed days' rows on ``nodes``, as ``single``'s columns (:func:`job_pools`)."""
    rows = _summed_in(where, nodes).subquery("summed_sums")
    r = rows.c
    belongs, counted = _counted_in(unit, r.units_key, r.unit)
    return select(r.instance_type, counted.label("counted"), r.node, r.region, r.name,
                  r.agent_labels, r.runs, r.energy_j, r.accelerator_j, r.dynamic_j,
                  r.held_s, r.units, r.value_mean, r.value_m2, r.first_created_s,
                  r.first_job_id).where(belongs)


def _summed_sources(where: JobFilter, unit: str | None, nodes: NodeRange) -> Select[Any]:
    """The summed days' energy per (node, component, source) on ``nodes``, as the live
    sources."""
    sources = JOB_POOL_SOURCES.c
    days = summed_days(where.since_s, where.until_s).subquery("summed_source_days")
    counted = (literal(0, Integer) if unit is None else
               case((counted_unit(sources.units_key, unit), 1), else_=0))
    query = (select(sources.instance_type, counted.label("counted"), sources.node,
                    sources.component, sources.source, sources.energy_j, sources.dynamic_j)
             .join(days, and_(days.c.node == sources.node, days.c.day_s == sources.day_s))
             .where(nodes.holds(sources.node)))
    if where.kind is not None:
        query = query.where(sources.kind == where.kind)
    return query


def _counts(parts: Any, unit: str, nodes: NodeRange) -> Any:
    """Per part of ``parts`` (on ``nodes``): its count of ``unit``, its totals plus its
    raw rows after them (:mod:`joulestat.store.read_rule`)."""
    k = parts.c
    both = part_unit_rows(parts, [k.job_id, k.node], lambda u: u == unit,
                          nodes.holds).subquery("unit_parts")
    return (select(both.c.job_id, both.c.node, func.sum(both.c.count).label("count"))
            .group_by(both.c.job_id, both.c.node).subquery("counts"))


def _added_up(rows: Any, with_ids: bool) -> JobPools:
    """:class:`JobPools` from the statement's rows (a fleet's: one per running job,
    10^5, so a run's row builds no object of its own: they are grouped per pool as they
    come, and their columns taken out in C, :func:`operator.itemgetter`)."""
    result = JobPools({}, {}, defaultdict(Spread), defaultdict(list), defaultdict(dict),
                      defaultdict(dict), defaultdict(list), defaultdict(set), defaultdict(dict))
    nodes: dict[PoolKey, dict[str, float]] = defaultdict(dict)
    run_rows: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for row in rows:
        if row[0] == _RUN:
            run_rows[(row[1], row[2])].append(row)
            continue
        kind, itype, counted, w1, w2, w3, *n = row
        pool = PoolKey(itype, bool(counted))
        if kind == _SUMS:  # a pool's rows of each statement of read_by_node add up
            sums = PoolSums(int(n[0]), *(float(v) for v in n[1:5]))
            result.sums[pool] = sums if pool not in result.sums else result.sums[pool].plus(sums)
        elif kind == _REGION:
            energy_j, held_s = result.regions[pool].get(w1, (0.0, 0.0))
            result.regions[pool][w1] = (energy_j + float(n[0]), held_s + float(n[1]))
        elif kind == _NODE:
            nodes[pool][w1] = float(n[0])
        elif kind == _LABELS:
            result.agent_labels[pool].add(w1)
        elif kind == _NAME:
            result.names[pool][(w1, w2, w3)] = float(n[0])
        else:
            result.sources[pool][(w1, w2, w3)] = (float(n[0]), float(n[1]))
    for (itype, counted), listed in run_rows.items():
        pool = PoolKey(itype, bool(counted))
        result.spread[pool] = Spread.of_parts(map(_RUN_PART, listed))
        starts = list(map(_RUN_START, listed))
        start_s, job_id = min(starts)
        result.first[pool] = (float(start_s), job_id)
        if with_ids:
            result.job_ids[pool] = sorted((float(start_s), job_id)
                                          for start_s, job_id in starts)
    for pool, found_nodes in nodes.items():
        result.nodes[pool] = [node for node, _first in sorted(
            found_nodes.items(), key=lambda item: (item[1], item[0]))]
    return result


# A run row's columns (see _branch): its part (runs, value_mean, value_m2) and its start
# (first_created_s, first_job_id).
_RUN_PART = itemgetter(7, 8, 9)
_RUN_START = itemgetter(6, 3)
