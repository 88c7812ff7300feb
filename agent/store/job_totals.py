"""Per-job totals: what each (job, node) part used and counted, and the job lists built
on them.

A job's energy per component and its unit counts are ``job_energy_totals`` and
``job_unit_totals`` (each node's settled past, one row per job, node and component or
unit; see :mod:`joulestat.store.rollup`) plus the raw rows after that node's
``nodes.totals_until_ms`` (:func:`joulestat.store.boundary.settled_until_ms`), in one
``UNION ALL`` statement: one row per part for the past and a few minutes of raw rows for
the present, whatever the retention. The unattributed ``''`` rows never count toward a
job.

:func:`job_totals` lists jobs with those totals (filters applied in SQL, no split by
component), so the Jobs and Compare pages stay fast with tens of thousands of jobs;
:func:`joulestat.store.jobs.job_detail` adds the split per component for one job.

Core table clauses only: :func:`part_energy` and :func:`part_units` also run in the
agent at start-up (:mod:`joulestat.store.restart`), within its memory budget.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, case, func, or_, select, union_all
from sqlalchemy.engine import Connection, Engine

from joulestat.carbon.held import Held
from joulestat.devices.sensor import ACCELERATOR_COMPONENT
from joulestat.store.boundary import settled_until_ms
from joulestat.store.model_split import ordinary_units
from joulestat.store.tables import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    NODES,
    UNATTRIBUTED,
)

# job_id -> (node, component) -> [dynamic_j, idle_j]; job_id -> (node, unit) -> count.
# Keyed by job first: a list of ten thousand jobs looks each one up, never scans.
Energy = dict[str, dict[tuple[str, str], list[float]]]
Units = dict[str, dict[tuple[str, str], float]]


def _recent_rows(table: Any, keys: list[Any], sums: list[Any], job_ids: Select[Any] | None,
                 node: str | None) -> Select[Any]:
    """The raw rows of ``table`` that each (job, node) part has after its node's totals
    boundary: ``sums`` per job, node and ``keys``.

    The parts are a MATERIALIZED common table expression so that SQLite (which keeps no
    statistics) loops over them and seeks each part's few recent rows by primary key;
    as a plain join it moves the job filter onto ``table`` and walks every raw row of
    the wanted jobs, the whole retention.
    """
    parts = (select(JOB_NODES.c.job_id, JOB_NODES.c.node,
                    settled_until_ms().label("after_ms"))
             .select_from(JOB_NODES.join(NODES, NODES.c.node == JOB_NODES.c.node)))
    if job_ids is not None:
        parts = parts.where(JOB_NODES.c.job_id.in_(job_ids))
    if node is not None:
        parts = parts.where(JOB_NODES.c.node == node)
    cte = parts.cte("parts").prefix_with("MATERIALIZED")
    rows = table.c
    return (select(rows.job_id, rows.node, *keys, *sums)
            .select_from(cte.join(table, and_(rows.job_id == cte.c.job_id,
                                              rows.node == cte.c.node,
                                              rows.t_end_ms > cte.c.after_ms)))
            .group_by(rows.job_id, rows.node, *keys))


def _totals(table: Any, columns: list[Any], job_ids: Select[Any] | None,
            node: str | None) -> Select[Any]:
    """``columns`` of the totals ``table`` for the wanted jobs (and node); without a job
    filter, every job but the unattributed remainder (``jobs`` never holds it)."""
    query = select(table.c.job_id, table.c.node, *columns)
    query = query.where(table.c.job_id != UNATTRIBUTED if job_ids is None
                        else table.c.job_id.in_(job_ids))
    if node is not None:
        query = query.where(table.c.node == node)
    return query


def part_energy(
    connection: Connection, job_ids: Select[Any] | None, node: str | None
) -> Energy:
    """Per (job, node, component): the job totals plus the raw shares after them."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    query = union_all(
        _recent_rows(JOB_ENERGY, [raw.component],
                     [func.sum(raw.dynamic_j), func.sum(raw.idle_j)], job_ids, node),
        _totals(JOB_ENERGY_TOTALS, [totals.component, totals.dynamic_j, totals.idle_j],
                job_ids, node))
    energy: Energy = defaultdict(dict)
    for job_id, row_node, component, dynamic_j, idle_j in connection.execute(query):
        total = energy[job_id].setdefault((row_node, component), [0.0, 0.0])
        total[0] += float(dynamic_j)
        total[1] += float(idle_j)
    return energy


def part_energy_j(connection: Connection, job_ids: Select[Any]
                  ) -> dict[tuple[str, str], tuple[float, float]]:
    """Per (job, node): joules over all components and joules of the accelerators, dynamic
    and idle (what job lists show, and what Compare's accelerator energy per unit divides:
    a sum more in the same pass, not the split by component of :func:`part_energy`)."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c

    def sums(rows: Any) -> list[Any]:
        energy = rows.dynamic_j + rows.idle_j
        return [func.sum(energy),
                func.sum(case((rows.component == ACCELERATOR_COMPONENT, energy), else_=0.0))]

    query = union_all(
        _recent_rows(JOB_ENERGY, [], sums(raw), job_ids, None),
        _totals(JOB_ENERGY_TOTALS, sums(totals), job_ids, None)
        .group_by(totals.job_id, totals.node))
    energy: defaultdict[tuple[str, str], tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    for job_id, node, energy_j, accelerator_j in connection.execute(query):
        total_j, acc_j = energy[(job_id, node)]
        energy[(job_id, node)] = (total_j + float(energy_j), acc_j + float(accelerator_j))
    return energy


def part_units(connection: Connection, job_ids: Select[Any] | None, node: str | None) -> Units:
    """Per (job, node, unit): the unit totals plus the raw counts after them; plain
    units only (per-model keys are :mod:`joulestat.store.model_split`'s)."""
    units, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    query = union_all(
        _recent_rows(JOB_UNITS, [units.unit], [func.sum(units.count)], job_ids, node)
        .where(ordinary_units(units.unit)),
        _totals(JOB_UNIT_TOTALS, [totals.unit, totals.count], job_ids, node)
        .where(ordinary_units(totals.unit)))
    counts: Units = defaultdict(dict)
    for job_id, row_node, unit, count in connection.execute(query):
        per_job = counts[job_id]
        per_job[(row_node, unit)] = per_job.get((row_node, unit), 0.0) + float(count)
    return counts


def by_component(energy: Energy, job_id: str, node: str | None = None) -> tuple[
        dict[str, float], dict[str, float]]:
    """(dynamic, idle) joules per component of ``job_id`` (on ``node``, or all nodes)."""
    dynamic: defaultdict[str, float] = defaultdict(float)
    idle: defaultdict[str, float] = defaultdict(float)
    for (n, component), (d, i) in energy.get(job_id, {}).items():
        if node is None or n == node:
            dynamic[component] += d
            idle[component] += i
    return dict(sorted(dynamic.items())), dict(sorted(idle.items()))


def by_unit(units: Units, job_id: str, node: str | None = None) -> dict[str, float]:
    """Counts per unit of ``job_id`` (on ``node``, or all nodes)."""
    totals: defaultdict[str, float] = defaultdict(float)
    for (n, unit), count in units.get(job_id, {}).items():
        if node is None or n == node:
            totals[unit] += count
    return dict(sorted(totals.items()))


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
class PartTotals(Held):
    """One node's part in a job: where, when, and the job's energy and units there."""

    node: str
    instance_type: str
    region: str
    started_s: float
    ended_s: float | None
    total_j: float
    units: dict[str, float]
    accelerator_j: float = 0.0  # the part of total_j on accelerators


@dataclass(frozen=True, slots=True)
class JobTotals(Held):
    """A job with its totals over all nodes, as the Jobs and Compare pages list it.

    The totals of :class:`~joulestat.store.jobs.JobSummary` without the split by
    component, which costs a sort of every energy row; the Job detail page reads that
    split per job with :func:`~joulestat.store.jobs.job_detail`.
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
    accelerator_j: float = 0.0  # the part of total_j on accelerators, all nodes


def job_totals(engine: Engine, where: JobFilter = JobFilter()) -> list[JobTotals]:
    """Matching jobs with per-node parts, energy and units, by start time.

    The same totals as :func:`~joulestat.store.jobs.list_jobs` (the same
    :func:`part_energy_j` and :func:`part_units` reads: settled totals plus the raw
    rows after them), with the job ids chosen in SQL.
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


def _assemble(metas: Any, part_rows: Any,
              energy: dict[tuple[str, str], tuple[float, float]],
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
        total_j, accelerator_j = energy.get(key, (0.0, 0.0))
        by_job[job_id].append(PartTotals(node, instance_type, region, started_s, ended_s,
                                         total_j, _sorted_units(units.get(key, {})),
                                         accelerator_j))
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
            sum(p.accelerator_j for p in node_parts),
        ))
    return result
