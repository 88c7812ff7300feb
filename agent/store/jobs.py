"""Reads about jobs: the job records, their totals, job lists and details.

Three shapes of a job, each for what its readers need and no more:

* :class:`JobRef`: who a job is (id, name, kind, status, start and end, instance
  types): what resolving a reference, a picker or ``joulestat compare``'s job list
  reads, without touching energy;
* :class:`JobSummary` / :class:`JobDetail`: a job's energy per component and its units,
  over all nodes, and (detail) per node (:class:`JobNodePart`);
* :class:`JobTotals`: the lists' totals without the split by component.

The last two carry the user's ``labels`` and, apart, the job's ``agent_labels``: what
joulestat recorded about how it measured it (``cpu_source``, ``idle_policy``; read the
policy with :func:`joulestat.attribution.agent_labels.idle_policy_of`). Lists, filters
and groupings by label see the user's labels only.

**Totals.** A job's energy per component and its unit counts are ``job_energy_totals``
and ``job_unit_totals`` (each node's settled past, one row per job, node and component
or unit; see :mod:`joulestat.store.maintenance`) plus the raw rows after that node's
``nodes.totals_until_ms`` (:func:`joulestat.store.read_rule.settled_until_ms`), in one
``UNION ALL`` statement: one row per part for the past and a few minutes of raw rows for
the present, whatever the retention. The unattributed ``''`` rows never count toward a
job. :func:`job_totals` lists jobs with those totals (filters applied in SQL, no split
by component), so the Jobs and Compare pages stay fast with tens of thousands of jobs;
:func:`job_detail` adds the split per component for one job. :func:`part_energy` and
:func:`part_units` also run in the agent at start-up
(:mod:`joulestat.store.durability`), within its memory budget: Core table clauses only.
Every record with a start and an end inherits :class:`~joulestat.carbon.held.Held`:
the one "ended, or now while running" rule.

What job a user means (an id, a unique id prefix or a name) is resolved in
:mod:`joulestat.store.job_refs`, on the :class:`JobRef` records read here.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, or_, select, union_all
from sqlalchemy.engine import Connection, Engine

from joulestat.carbon.held import Held
from joulestat.core.serving_trace import ServingTrace, trace_from_json
from joulestat.core.tick import Component
from joulestat.store.model_split import ordinary_units
from joulestat.store.read_rule import recent_rows, totals_rows
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    one_of,
)

log = logging.getLogger(__name__)

# -- Per-job totals --------------------------------------------------------------------

# job_id -> (node, component) -> [dynamic_j, idle_j]; job_id -> (node, unit) -> count.
# Keyed by job first: a list of ten thousand jobs looks each one up, never scans.
Energy = dict[str, dict[tuple[str, str], list[float]]]
Units = dict[str, dict[tuple[str, str], float]]


def part_energy(
    connection: Connection, job_ids: Select[Any] | None, node: str | None
) -> Energy:
    """Per (job, node, component): the job totals plus the raw shares after them."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    query = union_all(
        recent_rows(JOB_ENERGY, [raw.component],
                     [func.sum(raw.dynamic_j), func.sum(raw.idle_j)], job_ids, node),
        totals_rows(JOB_ENERGY_TOTALS, [totals.component, totals.dynamic_j, totals.idle_j],
                job_ids, node))
    energy: Energy = defaultdict(dict)
    for job_id, row_node, component, dynamic_j, idle_j in connection.execute(query):
        total = energy[job_id].setdefault((row_node, component), [0.0, 0.0])
        total[0] += float(dynamic_j)
        total[1] += float(idle_j)
    return energy


def part_energy_by_source(connection: Connection, job_ids: Sequence[str], node: str | None
                          ) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """Per (job, node, component, source): (dynamic, idle) joules, the job totals (kept
    by source) plus the raw shares after them: what a figure's provenance and bounds
    are made of, read like the job lists' energy, never through the job minutes."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    wanted = list(job_ids)
    query = union_all(
        recent_rows(JOB_ENERGY, [raw.component, raw.source],
                     [func.sum(raw.dynamic_j), func.sum(raw.idle_j)], wanted, node),
        totals_rows(JOB_ENERGY_TOTALS, [totals.component, totals.source, totals.dynamic_j,
                                    totals.idle_j], wanted, node))
    found: defaultdict[tuple[str, str, str, str], tuple[float, float]] = defaultdict(
        lambda: (0.0, 0.0))
    for job_id, row_node, component, source, dynamic_j, idle_j in connection.execute(query):
        key = (str(job_id), str(row_node), str(component), str(source))
        before = found[key]
        found[key] = (before[0] + float(dynamic_j or 0.0), before[1] + float(idle_j or 0.0))
    return dict(found)


def part_energy_j(connection: Connection, job_ids: Select[Any]
                  ) -> dict[tuple[str, str], tuple[float, float, float]]:
    """Per (job, node): joules over all components, joules of the accelerators (dynamic
    and idle), and joules above idle over all components: what job lists show, what
    Compare's accelerator and dynamic energy per unit divide (sums more in the same
    pass, not the split by component of :func:`part_energy`)."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c

    def sums(rows: Any) -> list[Any]:
        energy = rows.dynamic_j + rows.idle_j
        return [func.sum(energy),
                func.sum(case((rows.component == Component.ACCELERATOR, energy), else_=0.0)),
                func.sum(rows.dynamic_j)]

    query = union_all(
        recent_rows(JOB_ENERGY, [], sums(raw), job_ids, None),
        totals_rows(JOB_ENERGY_TOTALS, sums(totals), job_ids, None)
        .group_by(totals.job_id, totals.node))
    energy: defaultdict[tuple[str, str], tuple[float, float, float]] = defaultdict(
        lambda: (0.0, 0.0, 0.0))
    for job_id, node, energy_j, accelerator_j, dynamic_j in connection.execute(query):
        total_j, acc_j, dyn_j = energy[(job_id, node)]
        energy[(job_id, node)] = (total_j + float(energy_j), acc_j + float(accelerator_j),
                                  dyn_j + float(dynamic_j))
    return energy


def part_units(connection: Connection, job_ids: Select[Any] | None, node: str | None
               ) -> Units:
    """Per (job, node, unit): the unit totals plus the raw counts after them; plain
    units only (per-model keys are :mod:`joulestat.store.model_split`'s)."""
    units, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    query = union_all(
        recent_rows(JOB_UNITS, [units.unit], [func.sum(units.count)], job_ids, node)
        .where(ordinary_units(units.unit)),
        totals_rows(JOB_UNIT_TOTALS, [totals.unit, totals.count], job_ids, node)
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
    # Only the newest this many of the jobs that match (by start; still listed by start):
    # a page that lists a fleet's week of jobs reads a page of them, not 10^5.
    newest: int | None = None

    def __post_init__(self) -> None:
        if self.newest is not None and self.newest < 1:
            raise ValueError(f"newest must be a number of jobs >= 1, got {self.newest!r}")


def job_id_select(where: JobFilter) -> Select[Any]:
    jobs = JOBS.c
    query = select(jobs.id)
    if where.newest is None:
        return query.where(*matching(where))
    return (query.where(*matching(replace(where, newest=None)))
            .order_by(jobs.created_s.desc(), jobs.id).limit(where.newest))


def kind_and_window(where: JobFilter, kind: Any, created_s: Any, ended_s: Any
                    ) -> list[ColumnElement[bool]]:
    """``where``'s kind and window as conditions on a job's ``kind``, ``created_s`` and
    ``ended_s`` columns, of ``jobs`` (:func:`matching`) or of a copy of its row
    (:mod:`joulestat.store.open_parts`): a job overlaps ``(since_s, until_s]``."""
    found: list[ColumnElement[bool]] = []
    if where.kind is not None:
        found.append(kind == where.kind)
    if where.until_s is not None:
        found.append(created_s <= where.until_s)
    if where.since_s is not None:
        found.append(or_(ended_s.is_(None), ended_s > where.since_s))
    return found


def matching(where: JobFilter) -> list[ColumnElement[bool]]:
    """``where`` as conditions on the ``jobs`` row, for a statement that joins it
    anyway: :func:`job_id_select`'s, without a second read of ``jobs``. Every filter
    but ``newest`` (an order and a limit: use :func:`job_id_select`)."""
    if where.newest is not None:
        return [JOBS.c.id.in_(job_id_select(where))]
    jobs, parts = JOBS.c, JOB_NODES.c
    found = kind_and_window(where, jobs.kind, jobs.created_s, jobs.ended_s)
    if where.status is not None:
        found.append(jobs.status == where.status)
    if where.job_ids is not None:
        found.append(one_of(jobs.id, list(where.job_ids)))
    if where.label_key is not None:  # callers still read the parsed labels
        found.append(has_label(jobs.labels, where.label_key, None))
    if where.node is not None or where.instance_type is not None:
        on_node = select(parts.job_id)
        if where.node is not None:
            on_node = on_node.where(parts.node == where.node)
        if where.instance_type is not None:
            on_node = on_node.where(parts.instance_type == where.instance_type)
        found.append(jobs.id.in_(on_node))
    return found


def count_matching(engine: Engine, where: JobFilter) -> int:
    """How many jobs match ``where`` (all of them, whatever its ``newest``): what a page
    that shows the newest few says it left out."""
    query = select(func.count()).select_from(
        job_id_select(replace(where, newest=None)).subquery())
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


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
    dynamic_j: float = 0.0  # the part of total_j above idle


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
    # What joulestat recorded about how it measured the job (cpu_source, idle_policy),
    # never among ``labels``: joulestat.attribution.agent_labels (idle_policy_of).
    agent_labels: dict[str, str] = field(default_factory=dict)
    dynamic_j: float = 0.0  # the part of total_j above idle, all nodes


def job_totals(engine: Engine, where: JobFilter = JobFilter()) -> list[JobTotals]:
    """Matching jobs with per-node parts, energy and units, by start time.

    The same totals as :func:`~joulestat.store.jobs.list_jobs` (the same
    :func:`part_energy_j` and :func:`part_units` reads: settled totals plus the raw
    rows after them), with the job ids chosen in SQL.
    """
    job_ids = job_id_select(where)
    jobs, parts = JOBS.c, JOB_NODES.c
    meta_query = (select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.status,
                         jobs.created_s, jobs.ended_s, jobs.agent_labels)
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


def _json_map(text: str) -> dict[str, str]:
    """A stored JSON object of labels; most are empty, and those need no parse."""
    return json.loads(text) if text != "{}" else {}


def _assemble(metas: Any, part_rows: Any,
              energy: dict[tuple[str, str], tuple[float, float, float]],
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
        total_j, accelerator_j, dynamic_j = energy.get(key, (0.0, 0.0, 0.0))
        by_job[job_id].append(PartTotals(node, instance_type, region, started_s, ended_s,
                                         total_j, _sorted_units(units.get(key, {})),
                                         accelerator_j, dynamic_j))
    result = []
    no_parts: list[PartTotals] = []
    for job_id, name, kind, labels, status, created_s, ended_s, agent_labels in metas:
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
            job_id, name, kind, _json_map(labels), status,
            created_s, ended_s, tuple((p.node, p.instance_type) for p in node_parts),
            sum(p.total_j for p in node_parts), job_units, tuple(node_parts),
            sum(p.accelerator_j for p in node_parts), agent_labels=_json_map(agent_labels),
            dynamic_j=sum(p.dynamic_j for p in node_parts),
        ))
    return result


# -- Reads about jobs ------------------------------------------------------------------

class UnknownJobError(KeyError):
    """No job with this id in the store. A KeyError, with a readable message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


def started_text(started_s: float) -> str:
    """A start time as ``joulestat jobs`` prints it (local time, to the second)."""
    return datetime.fromtimestamp(started_s).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True, slots=True)
class JobRef(Held):
    """A stored job's identity: enough to resolve what a user named, list it or offer it
    in a picker ("name · started · instance type"), without reading its energy.
    ``instance_types`` is filled only by the reads that say so (:func:`job_choices`)."""

    id: str
    name: str
    kind: str
    status: str
    started_s: float
    ended_s: float | None = None
    instance_types: tuple[str, ...] = ()

    def line(self) -> str:
        """``id  name  start`` (local time, as ``joulestat jobs`` prints it)."""
        return f"{self.id}  {self.name}  started {started_text(self.started_s)}"


def ref_columns() -> Select[Any]:
    """The columns of a :class:`JobRef`, by start time (then id), for :func:`refs_of`."""
    jobs = JOBS.c
    return select(jobs.id, jobs.name, jobs.kind, jobs.status, jobs.created_s,
                  jobs.ended_s).order_by(jobs.created_s, jobs.id)


def refs_of(connection: Connection, query: Select[Any]) -> list[JobRef]:
    """:class:`JobRef` records of the rows of ``query`` (built on :func:`ref_columns`)."""
    return [JobRef(str(i), str(n), str(k), str(s), float(c),
                   None if e is None else float(e))
            for i, n, k, s, c, e in connection.execute(query)]


def job_refs(engine: Engine, kind: str | None = None) -> list[JobRef]:
    """Jobs by start time (then id): all, or those of ``kind``. (Jobs a user named are
    resolved by :func:`joulestat.store.job_refs.resolve_job`.)"""
    query = ref_columns()
    if kind is not None:
        query = query.where(JOBS.c.kind == kind)
    with engine.connect() as connection:
        return refs_of(connection, query)


def job_choices(engine: Engine, limit: int = 2000) -> list[JobRef]:
    """The newest ``limit`` jobs, newest first, with the instance types they ran on."""
    jobs, parts = JOBS.c, JOB_NODES.c
    newest = ref_columns().order_by(None).order_by(jobs.created_s.desc(), jobs.id).limit(limit)
    with engine.connect() as connection:
        found = refs_of(connection, newest)
        ids = newest.with_only_columns(jobs.id).subquery()
        types: defaultdict[str, set[str]] = defaultdict(set)
        for job_id, itype in connection.execute(
                select(parts.job_id, parts.instance_type).where(parts.job_id.in_(
                    select(ids.c.id)))):
            types[job_id].add(itype)
    return [JobRef(r.id, r.name, r.kind, r.status, r.started_s, r.ended_s,
                   tuple(sorted(types.get(r.id, ())))) for r in found]


@dataclass(frozen=True, slots=True)
class JobNodePart(Held):
    """One node's part in a job: where it ran and what it used there."""

    node: str
    instance_type: str
    region: str
    started_s: float
    ended_s: float | None
    pids: tuple[int, ...]
    dynamic_j: dict[str, float]  # per component
    idle_j: dict[str, float]
    total_j: float
    units: dict[str, float]
    # A serving job's latency histograms here, per model and kind
    # (joulestat.host.serving_metrics reads them): {} for any other job.
    latency: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobSummary(Held):
    """A job across all its nodes. ``started_s`` is the earliest start of any node."""

    id: str
    name: str
    kind: str
    labels: dict[str, str]
    status: str  # running | ended
    started_s: float
    ended_s: float | None
    nodes: tuple[tuple[str, str], ...]  # (node, instance_type), by node
    dynamic_j: dict[str, float]  # per component
    idle_j: dict[str, float]
    total_j: float
    units: dict[str, float]
    # What joulestat recorded about how it measured the job (cpu_source, idle_policy),
    # never among ``labels``: joulestat.attribution.agent_labels (idle_policy_of).
    agent_labels: dict[str, str] = field(default_factory=dict)

    def energy_j(self, component: str) -> float:
        return self.dynamic_j.get(component, 0.0) + self.idle_j.get(component, 0.0)


@dataclass(frozen=True, slots=True)
class JobDetail(JobSummary):
    """A :class:`JobSummary` plus what each node contributed."""

    per_node: tuple[JobNodePart, ...] = ()


def _summaries(connection: Connection, job_ids: Select[Any] | None) -> list[JobDetail]:
    jobs, parts = JOBS.c, JOB_NODES.c
    meta_query = select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.status,
                        jobs.created_s, jobs.ended_s, jobs.agent_labels
                        ).order_by(jobs.created_s, jobs.id)
    parts_query = select(parts.job_id, parts.node, parts.instance_type, parts.region,
                         parts.started_s, parts.ended_s, parts.pids, parts.latency
                         ).order_by(parts.node)
    if job_ids is not None:
        meta_query = meta_query.where(jobs.id.in_(job_ids))
        parts_query = parts_query.where(parts.job_id.in_(job_ids))
    metas = connection.execute(meta_query).all()
    by_job: defaultdict[str, list[Any]] = defaultdict(list)
    for row in connection.execute(parts_query):
        by_job[row.job_id].append(row)
    energy = part_energy(connection, job_ids, None)
    units = part_units(connection, job_ids, None)
    result = []
    for job_id, name, kind, labels, status, created_s, ended_s, agent_labels in metas:
        per_node = []
        for part in by_job[job_id]:
            dynamic, idle = by_component(energy, job_id, part.node)
            per_node.append(JobNodePart(
                part.node, part.instance_type, part.region, part.started_s, part.ended_s,
                tuple(json.loads(part.pids)), dynamic, idle,
                sum(dynamic.values()) + sum(idle.values()), by_unit(units, job_id, part.node),
                json.loads(part.latency) if part.latency else {},
            ))
        dynamic, idle = by_component(energy, job_id)
        result.append(JobDetail(
            job_id, name, kind, json.loads(labels), status, created_s, ended_s,
            tuple((p.node, p.instance_type) for p in per_node), dynamic, idle,
            sum(dynamic.values()) + sum(idle.values()), by_unit(units, job_id),
            agent_labels=_json_map(agent_labels), per_node=tuple(per_node),
        ))
    return result


def _as_summary(detail: JobDetail) -> JobSummary:
    return JobSummary(detail.id, detail.name, detail.kind, detail.labels, detail.status,
                      detail.started_s, detail.ended_s, detail.nodes, detail.dynamic_j,
                      detail.idle_j, detail.total_j, detail.units, detail.agent_labels)


def list_jobs(
    engine: Engine, running: bool | None = None, node: str | None = None, *,
    name: str | None = None, kind: str | None = None, since_s: float | None = None,
    limit: int | None = None, labels: Sequence[tuple[str, str | None]] = (),
) -> list[JobSummary]:
    """Jobs by start time, with energy and units summed over all their nodes.

    ``running`` keeps only running (True) or ended (False) jobs; ``node`` keeps the
    jobs that ran on that node (their totals still cover every node); ``name`` (exact)
    and ``kind`` keep the jobs so named or of that kind; ``since_s`` keeps the jobs that
    ran at some point after it (:func:`job_ids_active_since`'s rule); ``labels`` keeps
    the jobs with every (key, value) label given (value None: the key, any value);
    ``limit`` keeps the newest ``limit`` of those that match (still listed by start
    time). Every filter is a clause of one id query, so only the matching jobs are read.
    """
    jobs = JOBS.c
    job_ids = select(jobs.id)
    if running is not None:
        job_ids = job_ids.where(jobs.status == ("running" if running else "ended"))
    if node is not None:
        job_ids = job_ids.where(
            jobs.id.in_(select(JOB_NODES.c.job_id).where(JOB_NODES.c.node == node)))
    if name is not None:
        job_ids = job_ids.where(jobs.name == name)
    if kind is not None:
        job_ids = job_ids.where(jobs.kind == kind)
    if since_s is not None:
        job_ids = job_ids.where(_ran_since(since_s))
    for key, value in labels:
        job_ids = job_ids.where(has_label(jobs.labels, key, value))
    if limit is not None:
        # Newest first, ties by id as a newest-first list shows them.
        job_ids = job_ids.order_by(jobs.created_s.desc(), jobs.id).limit(limit)
    with engine.connect() as connection:
        return [_as_summary(d) for d in _summaries(connection, job_ids)]


def has_label(column: Any, key: str, value: str | None) -> ColumnElement[bool]:
    """SQL: the JSON ``labels`` ``column`` holds the label ``key`` (with ``value``; None:
    any). The column is JSON with sorted keys, compact (``{"threads":"2"}``, the
    writer's) or spaced (``{"threads": "2"}``, an import's), so the text sought is
    ``"threads":"2"`` or ``"threads": "2"`` (closing quote included: not ``"20"``), or
    ``"threads":`` for the key alone. A quote or a backslash inside a key or value is
    escaped in the column, never bare, so the text cannot match across labels; callers
    that need more read the parsed labels."""
    text = json.dumps(key) + ":"
    if value is None:
        return column.contains(text, autoescape=True)
    return or_(*(column.contains(f"{text}{gap}{json.dumps(value)}", autoescape=True)
                 for gap in ("", " ")))


def job_detail(engine: Engine, job_id: str) -> JobDetail:
    """One job with its per-node breakdown; :class:`UnknownJobError` if not stored."""
    with engine.connect() as connection:
        found = _summaries(connection, select(JOBS.c.id).where(JOBS.c.id == job_id))
    if not found:
        raise UnknownJobError(f"no job with id {job_id!r} in the store")
    return found[0]


def count_jobs(engine: Engine, running: bool | None = None) -> int:
    query = select(func.count()).select_from(JOBS)
    if running is not None:
        query = query.where(JOBS.c.status == ("running" if running else "ended"))
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def job_ids_active_since(engine: Engine, since_s: float | None = None) -> list[str]:
    """Ids of the jobs that ran at some point after ``since_s`` (epoch seconds): still
    running, or ended after it. All jobs when ``since_s`` is None. By start time."""
    jobs = JOBS.c
    query = select(jobs.id).order_by(jobs.created_s, jobs.id)
    if since_s is not None:
        query = query.where(_ran_since(since_s))
    with engine.connect() as connection:
        return [str(job_id) for (job_id,) in connection.execute(query)]


def _ran_since(since_s: float) -> ColumnElement[bool]:
    """A job that ran at some point after ``since_s``: still running (on any node), or
    ended at or after it."""
    jobs = JOBS.c
    still_running = select(JOB_NODES.c.job_id).where(JOB_NODES.c.ended_s.is_(None))
    return or_(jobs.ended_s.is_(None), jobs.ended_s >= since_s, jobs.id.in_(still_running))


def label_key_counts(engine: Engine, kind: str | None = None) -> dict[str, int]:
    """Per label key, how many jobs (of ``kind``) carry it: the labels of a fleet's jobs
    are a few distinct JSON texts, so they are grouped in SQL and each parsed once."""
    query = select(JOBS.c.labels, func.count()).group_by(JOBS.c.labels)
    if kind is not None:
        query = query.where(JOBS.c.kind == kind)
    counts: defaultdict[str, int] = defaultdict(int)
    with engine.connect() as connection:
        for labels, jobs in connection.execute(query):
            for key in _json_map(labels):
                counts[key] += int(jobs)
    return dict(counts)


def stored_serving_trace(text: str | None) -> ServingTrace | None:
    """A ``job_nodes.serving_trace`` read back; None where there is none, or where it
    cannot be read (said: the job's steady-state figures are then left out, its whole-job
    figures stay)."""
    if not text:
        return None
    try:
        return trace_from_json(json.loads(text))
    except ValueError as exc:  # json's errors are ValueErrors too
        log.warning("a stored serving trace cannot be read (%s): its steady-state figures "
                    "are left out", exc)
        return None


def job_serving_traces(engine: Engine, job_ids: Sequence[str]
                       ) -> dict[str, list[ServingTrace]]:
    """The serving traces of ``job_ids``, one per node part that holds one."""
    found: dict[str, list[ServingTrace]] = defaultdict(list)
    if not job_ids:
        return found
    parts = JOB_NODES.c
    query = (select(parts.job_id, parts.serving_trace)
             .where(one_of(parts.job_id, list(job_ids)), parts.serving_trace.is_not(None))
             .order_by(parts.job_id, parts.node))
    with engine.connect() as connection:
        for job_id, text in connection.execute(query):
            trace = stored_serving_trace(text)
            if trace is not None:
                found[job_id].append(trace)
    return found


def job_node_latency(engine: Engine, job_ids: Sequence[str]
                     ) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(job id, latency) of each node part of ``job_ids`` that holds a serving job's
    latency histograms (the JSON of ``JobNodePart.latency``)."""
    if not job_ids:
        return []
    parts = JOB_NODES.c
    query = (select(parts.job_id, parts.latency)
             .where(one_of(parts.job_id, list(job_ids)), parts.latency.is_not(None)))
    with engine.connect() as connection:
        return [(job_id, json.loads(text)) for job_id, text in connection.execute(query)]
