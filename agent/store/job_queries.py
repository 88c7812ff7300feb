"""Reads of per-job energy: job lists and details, series, restart state, conservation.

A job's totals (energy per component, units) come from :mod:`agent.store.job_totals`.
Series over time come from raw ``job_energy`` rows after each node's prune boundary
(``nodes.raw_pruned_until_ms``) and ``job_minute_energy`` rollups up to it (the rule of
:mod:`agent.store.queries`, applied per node because every node prunes on its own
schedule). The unattributed ``''`` rows never count toward a job.

Core table clauses only (no ORM import): :func:`load_running_jobs` and
:func:`load_checkpoint` run in the agent at start-up, within its memory budget.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Select,
    and_,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from agent.jobs.registry import Job
from agent.store.engine import StoreError, describe_error, redact_url
from agent.store.job_totals import Energy, Units, part_energy, part_units
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOBS,
    MINUTE_ENERGY,
    NODE_CHECKPOINTS,
    NODES,
    TICK_ENERGY,
)

log = logging.getLogger(__name__)

MINUTE_S = 60


class UnknownJobError(KeyError):
    """No job with this id in the store. A KeyError, with a readable message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns: the state a node saved, and when."""

    saved_s: float
    boot_id: str
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobNodePart:
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
class JobSummary:
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


def pruned_last_minute_s() -> Any:
    """``minute_start_s`` of the last pruned minute of the joined node (exact division:
    the boundary is minute-aligned)."""
    return (NODES.c.raw_pruned_until_ms - literal_column("60000")).op(
        "/", precedence=8, return_type=BigInteger)(literal_column("1000"))


def _by_component(energy: Energy, job_id: str, node: str | None = None) -> tuple[
        dict[str, float], dict[str, float]]:
    dynamic: defaultdict[str, float] = defaultdict(float)
    idle: defaultdict[str, float] = defaultdict(float)
    for (n, component), (d, i) in energy.get(job_id, {}).items():
        if node is None or n == node:
            dynamic[component] += d
            idle[component] += i
    return dict(sorted(dynamic.items())), dict(sorted(idle.items()))


def _by_unit(units: Units, job_id: str, node: str | None = None) -> dict[str, float]:
    totals: defaultdict[str, float] = defaultdict(float)
    for (n, unit), count in units.get(job_id, {}).items():
        if node is None or n == node:
            totals[unit] += count
    return dict(sorted(totals.items()))


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
            dynamic, idle = _by_component(energy, job_id, part.node)
            per_node.append(JobNodePart(
                part.node, part.instance_type, part.region, part.started_s, part.ended_s,
                tuple(json.loads(part.pids)), dynamic, idle,
                sum(dynamic.values()) + sum(idle.values()), _by_unit(units, job_id, part.node),
            ))
        dynamic, idle = _by_component(energy, job_id)
        result.append(JobDetail(
            job_id, name, kind, json.loads(labels), status, created_s, ended_s,
            tuple((p.node, p.instance_type) for p in per_node), dynamic, idle,
            sum(dynamic.values()) + sum(idle.values()), _by_unit(units, job_id),
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


def load_running_jobs(engine: Engine, node: str) -> list[Job]:
    """This node's running jobs as registry :class:`Job` objects, for a restart.

    Energy and units are what ``node`` recorded (a :class:`Job` holds this node's
    view); pids and start are this node's too. Raises
    :class:`~agent.store.engine.StoreError` when the store cannot be read.
    """
    jobs, parts = JOBS.c, JOB_NODES.c
    query = (
        select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.origin, parts.pids,
               parts.started_s)
        .select_from(JOBS.join(JOB_NODES, parts.job_id == jobs.id))
        .where(parts.node == node, parts.ended_s.is_(None))
        .order_by(parts.started_s, jobs.id)
    )
    job_ids = select(parts.job_id).where(parts.node == node, parts.ended_s.is_(None))
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).all()
            energy = part_energy(connection, job_ids, node)
            units = part_units(connection, job_ids, node)
    except SQLAlchemyError as exc:
        raise StoreError(f"{redact_url(engine.url)}: cannot load the running jobs of node "
                         f"{node!r}: {describe_error(exc)}") from exc
    result = []
    for job_id, name, kind, labels, origin, pids, started_s in rows:
        dynamic, idle = _by_component(energy, job_id, node)
        result.append(Job(
            id=job_id, name=name, kind=kind, labels=json.loads(labels),
            pids=set(json.loads(pids)), started_s=started_s, origin=origin, ended_s=None,
            units=_by_unit(units, job_id, node), dynamic_j=dynamic, idle_j=idle,
        ))
    return result


def job_energy_series(
    engine: Engine, job_id: str, node: str | None = None
) -> list[tuple[float, str, float, float]]:
    """``(t_end_s, component, dynamic_j, idle_j)`` in time order, summed over devices
    (and nodes unless ``node`` is given): per tick where raw rows remain, per minute
    (at the minute's end) where they were pruned."""
    raw, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    raw_query = (
        select(raw.t_end_ms, raw.component, func.sum(raw.dynamic_j), func.sum(raw.idle_j))
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.job_id == job_id,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms))
        .group_by(raw.t_end_ms, raw.component)
    )
    minute_end_ms = (rolled.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_query = (
        select(minute_end_ms, rolled.component, func.sum(rolled.dynamic_j),
               func.sum(rolled.idle_j))
        .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= pruned_last_minute_s())
        .group_by(minute_end_ms, rolled.component)
    )
    if node is not None:
        raw_query = raw_query.where(raw.node == node)
        rolled_query = rolled_query.where(rolled.node == node)
    series: defaultdict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    with engine.connect() as connection:
        for t_end_ms, component, dynamic_j, idle_j in connection.execute(
            union_all(raw_query, rolled_query)
        ):
            point = series[(int(t_end_ms), component)]
            point[0] += float(dynamic_j)
            point[1] += float(idle_j)
    return [(t / 1000, c, d, i) for (t, c), (d, i) in sorted(series.items())]


def unattributed_check(engine: Engine, node: str) -> list[tuple[int, str, str, float, float]]:
    """``(t_end_ms, component, device, node_j, sum_j)`` for every stored entry of ``node``.

    ``sum_j`` is the sum of its job rows, the unattributed ``''`` row included, so the
    conservation identity is ``node_j == sum_j`` (to float rounding) wherever shares
    were written. Raw ticks after the prune boundary; before it, minute rollups
    (``t_end_ms`` at the minute's end).
    """
    ticks, shares, nodes = TICK_ENERGY.c, JOB_ENERGY.c, NODES.c
    minutes, job_minutes = MINUTE_ENERGY.c, JOB_MINUTE_ENERGY.c
    pruned_ms = select(nodes.raw_pruned_until_ms).where(nodes.node == node).scalar_subquery()
    raw_query = (
        select(ticks.t_end_ms, ticks.component, ticks.device, ticks.energy_j,
               func.coalesce(func.sum(shares.dynamic_j + shares.idle_j), 0.0))
        .select_from(TICK_ENERGY.outerjoin(JOB_ENERGY, and_(
            shares.node == ticks.node, shares.t_end_ms == ticks.t_end_ms,
            shares.component == ticks.component, shares.device == ticks.device)))
        .where(ticks.node == node,
               or_(pruned_ms.is_(None), ticks.t_end_ms > pruned_ms))
        .group_by(ticks.t_end_ms, ticks.component, ticks.device, ticks.energy_j)
    )
    minute_end_ms = (minutes.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_query = (
        select(minute_end_ms, minutes.component, minutes.device, minutes.energy_j,
               func.coalesce(func.sum(job_minutes.dynamic_j + job_minutes.idle_j), 0.0))
        .select_from(MINUTE_ENERGY.outerjoin(JOB_MINUTE_ENERGY, and_(
            job_minutes.node == minutes.node,
            job_minutes.minute_start_s == minutes.minute_start_s,
            job_minutes.component == minutes.component,
            job_minutes.device == minutes.device)))
        .where(minutes.node == node, minute_end_ms <= pruned_ms)
        .group_by(minutes.minute_start_s, minutes.component, minutes.device,
                  minutes.energy_j)
    )
    with engine.connect() as connection:
        rows = connection.execute(union_all(raw_query, rolled_query)).all()
    return sorted((int(t), c, d, float(node_j), float(sum_j))
                  for t, c, d, node_j, sum_j in rows)


def load_checkpoint(engine: Engine, node: str) -> Checkpoint | None:
    """The checkpoint ``node`` saved last, or None (never saved, or unreadable state).

    Raises :class:`~agent.store.engine.StoreError` when the database cannot be read,
    so a restart can tell "no checkpoint" from "store away".
    """
    query = select(NODE_CHECKPOINTS.c.saved_s, NODE_CHECKPOINTS.c.boot_id,
                   NODE_CHECKPOINTS.c.state).where(NODE_CHECKPOINTS.c.node == node)
    try:
        with engine.connect() as connection:
            row = connection.execute(query).first()
    except SQLAlchemyError as exc:
        raise StoreError(f"{redact_url(engine.url)}: cannot read the checkpoint of node "
                         f"{node!r}: {describe_error(exc)}") from exc
    if row is None:
        return None
    saved_s, boot_id, text = row
    try:
        state = json.loads(text)
    except ValueError as exc:
        log.warning("checkpoint of node %r is not valid JSON (%s); ignoring it", node, exc)
        return None
    if not isinstance(state, dict):
        log.warning("checkpoint of node %r is not a JSON object; ignoring it", node)
        return None
    return Checkpoint(float(saved_s), str(boot_id), state)
