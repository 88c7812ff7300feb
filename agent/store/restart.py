"""What the agent reads back when it starts: its running jobs and its last checkpoint.

A module of its own so that the agent's path stays light: it imports Core table clauses
and :mod:`joulestat.store.job_totals` only (no ORM, no Alembic, none of the dashboard's or
reports' reads), and runs within the agent's memory budget
(``test_agent_path_imports_neither_alembic_nor_the_orm``). Both reads raise
:class:`~joulestat.store.engine.StoreError` when the store cannot be read, so a restart can
tell "nothing saved" from "store away".
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from joulestat.attribution.registry import Job
from joulestat.store.engine import StoreError, describe_error, redact_url
from joulestat.store.job_totals import by_component, by_unit, part_energy, part_units
from joulestat.store.tables import JOB_NODES, JOBS, NODE_CHECKPOINTS

log = logging.getLogger(__name__)


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns: the state a node saved, and when."""

    saved_s: float
    boot_id: str
    state: dict[str, Any]


def load_running_jobs(engine: Engine, node: str) -> list[Job]:
    """This node's running jobs as registry :class:`Job` objects, for a restart.

    Energy and units are what ``node`` recorded (a :class:`Job` holds this node's
    view); pids and start are this node's too. Raises
    :class:`~joulestat.store.engine.StoreError` when the store cannot be read.
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
        dynamic, idle = by_component(energy, job_id, node)
        result.append(Job(
            id=job_id, name=name, kind=kind, labels=json.loads(labels),
            pids=set(json.loads(pids)), started_s=started_s, origin=origin, ended_s=None,
            units=by_unit(units, job_id, node), dynamic_j=dynamic, idle_j=idle,
        ))
    return result


def load_checkpoint(engine: Engine, node: str) -> Checkpoint | None:
    """The checkpoint ``node`` saved last, or None (never saved, or unreadable state).

    Raises :class:`~joulestat.store.engine.StoreError` when the database cannot be read,
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
