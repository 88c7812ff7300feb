"""The dashboard's reads: a read-only engine, and queries shaped for charts and tables.

The dashboard must never write, so :func:`open_readonly_engine` opens SQLite with a
``mode=ro`` URI (plus ``PRAGMA query_only``) and PostgreSQL with
``default_transaction_read_only=on``; a role with nothing but ``SELECT`` is enough.

Every energy figure follows the rule of :mod:`agent.store.queries`: raw rows after each
node's prune boundary (``nodes.raw_pruned_until_ms``), minute rollups up to it, in one
``UNION ALL`` statement, so nothing is counted twice or missed while the agent prunes.
Series are bucketed in SQL (a week of 1 s ticks is 600,000 rows a component; a chart
needs a few hundred points) and carry each device's covered seconds, so power is
energy over the time actually measured, not over a bucket the job only half filled.

:func:`job_totals` answers what :func:`~agent.store.job_queries.list_jobs` answers for
the job lists, with filters applied in SQL and the energy read from the job totals
tables (one row per job, node and component for the settled past, plus a few minutes
of raw rows), so the Jobs and Compare pages stay fast with tens of thousands of jobs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Select,
    exists,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Engine

# The dashboard reads through this one module (``dq.``): the read-only engine and the
# series queries live in their own modules and are re-exported here.
from agent.store.engine import StoreError  # noqa: F401
from agent.store.job_queries import pruned_last_minute_s as _pruned_last_minute_s
from agent.store.job_totals import part_energy_j, part_units
from agent.store.readonly import StoreMissingError, open_readonly_engine  # noqa: F401
from agent.store.series_queries import (  # noqa: F401
    SeriesPoint,
    choose_bucket_s,
    job_min_bucket_s,
    job_power_series,
    job_unit_series,
    node_power_range,
    node_power_series,
)
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOB_UNITS,
    JOBS,
    MINUTE_ENERGY,
    MINUTE_MS,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What the Jobs and Compare pages ask for; ``None`` means "any".

    A job matches the window when it overlaps ``(since_s, until_s]``.
    """

    kind: str | None = None
    status: str | None = None
    since_s: float | None = None
    until_s: float | None = None
    node: str | None = None
    instance_type: str | None = None
    job_ids: tuple[str, ...] | None = None
    label_key: str | None = None  # jobs carrying this label (any value)


def _job_id_select(where: JobFilter) -> Select[Any]:
    jobs, parts = JOBS.c, JOB_NODES.c
    query = select(jobs.id)
    if where.kind is not None:
        query = query.where(jobs.kind == where.kind)
    if where.status is not None:
        query = query.where(jobs.status == where.status)
    if where.until_s is not None:
        query = query.where(jobs.created_s <= where.until_s)
    if where.since_s is not None:
        query = query.where(or_(jobs.ended_s.is_(None), jobs.ended_s > where.since_s))
    if where.job_ids is not None:
        query = query.where(jobs.id.in_(list(where.job_ids)))
    if where.label_key is not None:
        # labels is JSON text written with sort_keys: '{"concurrency": "8", ...}'. A
        # quoted key followed by ':' cannot occur inside a value, where quotes are
        # escaped; callers still read the parsed labels.
        query = query.where(jobs.labels.contains(f'"{where.label_key}":', autoescape=True))
    if where.node is not None or where.instance_type is not None:
        on_node = select(parts.job_id)
        if where.node is not None:
            on_node = on_node.where(parts.node == where.node)
        if where.instance_type is not None:
            on_node = on_node.where(parts.instance_type == where.instance_type)
        query = query.where(jobs.id.in_(on_node))
    return query


@dataclass(frozen=True, slots=True)
class PartTotals:
    """One node's part in a job: where, when, and the job's energy and units there."""

    node: str
    instance_type: str
    region: str
    started_s: float
    ended_s: float | None
    total_j: float
    units: dict[str, float]


@dataclass(frozen=True, slots=True)
class JobTotals:
    """A job with its totals over all nodes, as the Jobs and Compare pages list it.

    The totals of :class:`~agent.store.job_queries.JobSummary` without the split by
    component, which costs a sort of every energy row; the Job detail page reads that
    split per job with :func:`~agent.store.job_queries.job_detail`.
    """

    id: str
    name: str
    kind: str
    labels: dict[str, str]
    status: str
    started_s: float
    ended_s: float | None
    nodes: tuple[tuple[str, str], ...]  # (node, instance_type), by node
    total_j: float
    units: dict[str, float]
    per_node: tuple[PartTotals, ...]


def job_totals(engine: Engine, where: JobFilter = JobFilter()) -> list[JobTotals]:
    """Matching jobs with per-node parts, energy and units, by start time.

    The same totals as :func:`~agent.store.job_queries.list_jobs` (the same
    :func:`~agent.store.job_totals.part_energy_j` and ``part_units`` reads: settled
    totals plus the raw rows after them), with the job ids chosen in SQL.
    """
    job_ids = _job_id_select(where)
    jobs, parts = JOBS.c, JOB_NODES.c
    meta_query = (select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.status,
                         jobs.created_s, jobs.ended_s)
                  .where(jobs.id.in_(job_ids)).order_by(jobs.created_s, jobs.id))
    parts_query = (select(parts.job_id, parts.node, parts.instance_type, parts.region,
                          parts.started_s, parts.ended_s)
                   .where(parts.job_id.in_(job_ids)).order_by(parts.job_id, parts.node))
    with engine.connect() as connection:
        metas = connection.execute(meta_query).all()
        part_rows = connection.execute(parts_query).all()
        energy = part_energy_j(connection, job_ids)
        unit_rows = part_units(connection, job_ids, None)
    return _assemble(metas, part_rows, energy, unit_rows)


def _sorted_units(counts: dict[str, float]) -> dict[str, float]:
    return counts if len(counts) < 2 else dict(sorted(counts.items()))


def _assemble(metas: Any, part_rows: Any, energy: dict[tuple[str, str], float],
              unit_rows: dict[str, dict[tuple[str, str], float]]) -> list[JobTotals]:
    """JobTotals from the rows; one pass each, single-node jobs (most) without merging,
    as this runs for every job on the Jobs and Compare pages."""
    units: dict[tuple[str, str], dict[str, float]] = {}
    for job_id, per_job in unit_rows.items():
        for (node, unit), count in per_job.items():
            units.setdefault((job_id, node), {})[unit] = count
    by_job: defaultdict[str, list[PartTotals]] = defaultdict(list)
    for job_id, node, instance_type, region, started_s, ended_s in part_rows:
        key = (job_id, node)
        by_job[job_id].append(PartTotals(node, instance_type, region, started_s, ended_s,
                                         energy.get(key, 0.0),
                                         _sorted_units(units.get(key, {}))))
    result = []
    no_parts: list[PartTotals] = []
    for job_id, name, kind, labels, status, created_s, ended_s in metas:
        node_parts = by_job.get(job_id, no_parts)
        if len(node_parts) == 1:
            job_units = dict(node_parts[0].units)
        else:
            merged: defaultdict[str, float] = defaultdict(float)
            for part in node_parts:
                for unit, count in part.units.items():
                    merged[unit] += count
            job_units = _sorted_units(dict(merged))
        result.append(JobTotals(
            job_id, name, kind, json.loads(labels) if labels != "{}" else {}, status,
            created_s, ended_s, tuple((p.node, p.instance_type) for p in node_parts),
            sum(p.total_j for p in node_parts), job_units, tuple(node_parts),
        ))
    return result


@dataclass(frozen=True, slots=True)
class JobChoice:
    """Enough to list a job in a picker ("name · started · instance type"), without
    reading its energy."""

    id: str
    name: str
    kind: str
    status: str
    started_s: float
    instance_types: tuple[str, ...] = ()


def job_choices(engine: Engine, limit: int = 2000) -> list[JobChoice]:
    """The newest ``limit`` jobs, newest first, with the instance types they ran on."""
    jobs, parts = JOBS.c, JOB_NODES.c
    newest = (select(jobs.id, jobs.name, jobs.kind, jobs.status, jobs.created_s)
              .order_by(jobs.created_s.desc(), jobs.id).limit(limit))
    with engine.connect() as connection:
        rows = connection.execute(newest).all()
        ids = newest.with_only_columns(jobs.id).subquery()
        types: defaultdict[str, set[str]] = defaultdict(set)
        for job_id, itype in connection.execute(
                select(parts.job_id, parts.instance_type).where(parts.job_id.in_(
                    select(ids.c.id)))):
            types[job_id].add(itype)
    return [JobChoice(*row, tuple(sorted(types.get(row[0], ())))) for row in rows]


def imported_nodes(engine: Engine) -> set[str]:
    """Nodes that exist only through ``joulestat import``: no agent ever registered
    their devices, and their rows carry an import device. They hold exported snapshots,
    not live readings, so the Overview never calls them reporting. (The row checks are
    per node, a seek on the energy tables' keys, and only for nodes without devices.)"""
    nodes, devices, ticks, minutes = NODES.c, NODE_DEVICES.c, TICK_ENERGY.c, MINUTE_ENERGY.c
    has_agent = select(devices.node).distinct()
    query = select(nodes.node).where(
        nodes.node.not_in(has_agent),
        or_(exists().where(ticks.node == nodes.node, ticks.device.like("import:%")),
            exists().where(minutes.node == nodes.node, minutes.device.like("import:%"))))
    with engine.connect() as connection:
        return {str(node) for (node,) in connection.execute(query)}


def job_units_by_kind(engine: Engine) -> dict[str, list[str]]:
    """Kind -> the units its jobs counted, most used first: the Compare page's choices."""
    # DISTINCT first, then join: five times faster than counting distinct ids per group.
    pairs = select(JOB_UNITS.c.job_id, JOB_UNITS.c.unit).distinct().subquery()
    query = (select(JOBS.c.kind, pairs.c.unit, func.count())
             .select_from(pairs.join(JOBS, JOBS.c.id == pairs.c.job_id))
             .group_by(JOBS.c.kind, pairs.c.unit))
    found: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
    with engine.connect() as connection:
        for kind, unit, jobs in connection.execute(query):
            found[kind].append((-int(jobs), unit))
    return {kind: [unit for _n, unit in sorted(units)] for kind, units in sorted(found.items())}


def count_jobs(engine: Engine, running: bool | None = None) -> int:
    query = select(func.count()).select_from(JOBS)
    if running is not None:
        query = query.where(JOBS.c.status == ("running" if running else "ended"))
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


# -- provenance -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceEnergy:
    """Energy of one node's component from one provenance source (``rapl``, ``model:…``)."""

    node: str
    component: str
    source: str
    energy_j: float


def _sum_union(engine: Engine, raw: Select[Any], rolled: Select[Any]
               ) -> defaultdict[tuple[str, str, str], float]:
    """Run raw-rows UNION ALL rollups (each ``(node, component, key, value)``) and add up
    the two halves per key."""
    totals: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    with engine.connect() as connection:
        for node, component, key, value in connection.execute(union_all(raw, rolled)):
            totals[(node, component, key)] += float(value)
    return totals


def _node_window_sums(engine: Engine, since_s: float, until_s: float, key: str,
                      raw_value: Any, rolled_value: Any
                      ) -> defaultdict[tuple[str, str, str], float]:
    """Per (node, component, ``key`` column): ``raw_value`` summed over raw ticks after
    each node's prune boundary and ``rolled_value`` over minute rollups up to it, both
    within ``(since_s, until_s]``."""
    since_ms, until_ms = round(since_s * 1000), round(until_s * 1000)
    ticks, minutes, nodes = TICK_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw = (select(ticks.node, ticks.component, ticks[key], func.sum(raw_value))
           .select_from(TICK_ENERGY.join(NODES, nodes.node == ticks.node))
           .where(ticks.t_end_ms > since_ms, ticks.t_end_ms <= until_ms,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      ticks.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(ticks.node, ticks.component, ticks[key]))
    rolled = (select(minutes.node, minutes.component, minutes[key], func.sum(rolled_value))
              .select_from(MINUTE_ENERGY.join(NODES, nodes.node == minutes.node))
              .where(minutes.minute_start_s > (since_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= (until_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(minutes.node, minutes.component, minutes[key]))
    return _sum_union(engine, raw, rolled)


def energy_by_source(engine: Engine, since_s: float, until_s: float) -> list[SourceEnergy]:
    """Node energy over ``(since_s, until_s]`` per node, component and source.

    Minute rollups name a minute whose source changed ``a+b``; callers decide how to
    classify those.
    """
    totals = _node_window_sums(engine, since_s, until_s, "source",
                               TICK_ENERGY.c.energy_j, MINUTE_ENERGY.c.energy_j)
    return [SourceEnergy(n, c, s, j) for (n, c, s), j in sorted(totals.items())]


def node_covered_s(engine: Engine, since_s: float, until_s: float) -> dict[str, float]:
    """Seconds each node reported in ``(since_s, until_s]``: the time its best-covered
    device has ticks for (a node is held, and billed, while its agent runs)."""
    ticks = TICK_ENERGY.c
    per_device = _node_window_sums(
        engine, since_s, until_s, "device",
        (ticks.t_end_ms - ticks.t_start_ms) / literal_column("1000.0"),
        MINUTE_ENERGY.c.covered_s)
    covered: dict[str, float] = {}
    for (node, _component, _device), seconds in per_device.items():
        covered[node] = max(covered.get(node, 0.0), seconds)
    return covered


def job_energy_by_source(engine: Engine, job_id: str) -> list[SourceEnergy]:
    """A job's energy per node, component and source; rolled minutes take the node's
    minute source, as job rollups keep none of their own."""
    shares, job_minutes, minutes, nodes = (JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, MINUTE_ENERGY.c,
                                           NODES.c)
    raw = (select(shares.node, shares.component, shares.source,
                  func.sum(shares.dynamic_j + shares.idle_j))
           .select_from(JOB_ENERGY.join(NODES, nodes.node == shares.node))
           .where(shares.job_id == job_id,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      shares.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(shares.node, shares.component, shares.source))
    joined = JOB_MINUTE_ENERGY.join(NODES, nodes.node == job_minutes.node).join(
        MINUTE_ENERGY, (minutes.node == job_minutes.node)
        & (minutes.minute_start_s == job_minutes.minute_start_s)
        & (minutes.component == job_minutes.component)
        & (minutes.device == job_minutes.device))
    rolled = (select(job_minutes.node, job_minutes.component, minutes.source,
                     func.sum(job_minutes.dynamic_j + job_minutes.idle_j))
              .select_from(joined)
              .where(job_minutes.job_id == job_id,
                     job_minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(job_minutes.node, job_minutes.component, minutes.source))
    totals = _sum_union(engine, raw, rolled)
    return [SourceEnergy(n, c, s, j) for (n, c, s), j in sorted(totals.items())]
