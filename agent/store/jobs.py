"""Reads about jobs: the job records, job lists and details, and which jobs there are.

Three shapes of a job, each for what its readers need and no more:

* :class:`JobRef`: who a job is (id, name, kind, status, start and end, instance
  types): what resolving a reference (:mod:`joulestat.store.job_refs`), a picker or
  ``joulestat compare``'s job list reads, without touching energy;
* :class:`JobSummary` / :class:`JobDetail`: a job's energy per component and its units,
  over all nodes, and (detail) per node (:class:`JobNodePart`);
* :class:`joulestat.store.job_totals.JobTotals`: the lists' totals without the split by
  component.

Energy and units come from :mod:`joulestat.store.job_totals` (settled totals plus the raw
rows after them). Every record with a start and an end inherits
:class:`~joulestat.carbon.held.Held`: the one "ended, or now while running" rule.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.engine import Connection, Engine

from joulestat.carbon.held import Held
from joulestat.store.job_totals import by_component, by_unit, part_energy, part_units
from joulestat.store.model_split import ordinary_units
from joulestat.store.tables import JOB_NODES, JOB_UNITS, JOBS


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

    def energy_j(self, component: str) -> float:
        return self.dynamic_j.get(component, 0.0) + self.idle_j.get(component, 0.0)


@dataclass(frozen=True, slots=True)
class JobDetail(JobSummary):
    """A :class:`JobSummary` plus what each node contributed."""

    per_node: tuple[JobNodePart, ...] = ()


def _summaries(connection: Connection, job_ids: Select[Any] | None) -> list[JobDetail]:
    jobs, parts = JOBS.c, JOB_NODES.c
    meta_query = select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.status,
                        jobs.created_s, jobs.ended_s).order_by(jobs.created_s, jobs.id)
    parts_query = select(parts.job_id, parts.node, parts.instance_type, parts.region,
                         parts.started_s, parts.ended_s, parts.pids).order_by(parts.node)
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
    for job_id, name, kind, labels, status, created_s, ended_s in metas:
        per_node = []
        for part in by_job[job_id]:
            dynamic, idle = by_component(energy, job_id, part.node)
            per_node.append(JobNodePart(
                part.node, part.instance_type, part.region, part.started_s, part.ended_s,
                tuple(json.loads(part.pids)), dynamic, idle,
                sum(dynamic.values()) + sum(idle.values()), by_unit(units, job_id, part.node),
            ))
        dynamic, idle = by_component(energy, job_id)
        result.append(JobDetail(
            job_id, name, kind, json.loads(labels), status, created_s, ended_s,
            tuple((p.node, p.instance_type) for p in per_node), dynamic, idle,
            sum(dynamic.values()) + sum(idle.values()), by_unit(units, job_id),
            tuple(per_node),
        ))
    return result


def _as_summary(detail: JobDetail) -> JobSummary:
    return JobSummary(detail.id, detail.name, detail.kind, detail.labels, detail.status,
                      detail.started_s, detail.ended_s, detail.nodes, detail.dynamic_j,
                      detail.idle_j, detail.total_j, detail.units)


def list_jobs(
    engine: Engine, running: bool | None = None, node: str | None = None
) -> list[JobSummary]:
    """Jobs by start time, with energy and units summed over all their nodes.

    ``running`` keeps only running (True) or ended (False) jobs; ``node`` keeps the
    jobs that ran on that node (their totals still cover every node).
    """
    job_ids = select(JOBS.c.id)
    if running is not None:
        job_ids = job_ids.where(JOBS.c.status == ("running" if running else "ended"))
    if node is not None:
        job_ids = job_ids.where(
            JOBS.c.id.in_(select(JOB_NODES.c.job_id).where(JOB_NODES.c.node == node)))
    with engine.connect() as connection:
        return [_as_summary(d) for d in _summaries(connection, job_ids)]


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
        still_running = select(JOB_NODES.c.job_id).where(JOB_NODES.c.ended_s.is_(None))
        query = query.where(or_(jobs.ended_s.is_(None), jobs.ended_s >= since_s,
                                jobs.id.in_(still_running)))
    with engine.connect() as connection:
        return [str(job_id) for (job_id,) in connection.execute(query)]


def job_units_by_kind(engine: Engine) -> dict[str, list[str]]:
    """Kind -> the units its jobs counted, most used first: the Compare page's choices."""
    # DISTINCT first, then join: five times faster than counting distinct ids per group.
    pairs = (select(JOB_UNITS.c.job_id, JOB_UNITS.c.unit).distinct()
             .where(ordinary_units(JOB_UNITS.c.unit)).subquery())
    query = (select(JOBS.c.kind, pairs.c.unit, func.count())
             .select_from(pairs.join(JOBS, JOBS.c.id == pairs.c.job_id))
             .group_by(JOBS.c.kind, pairs.c.unit))
    found: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
    with engine.connect() as connection:
        for kind, unit, jobs in connection.execute(query):
            found[kind].append((-int(jobs), unit))
    return {kind: [unit for _n, unit in sorted(units)] for kind, units in sorted(found.items())}
