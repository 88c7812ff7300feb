"""Job metadata and the agent's checkpoint on their way to the store.

:class:`~joulestat.store.writer.StoreWriter` keeps a :class:`PendingJobs` next to its row
buffer (ticks, shares, unit counts: :mod:`joulestat.store.buffer`) and writes both in one
transaction (:func:`write_pending`), so a crash or a lost connection never leaves a
half-written flush behind. Everything here is upserted, so a retried flush whose
commit did reach the server changes nothing:

* ``jobs`` is one row per job id whichever node reports it. The first report fixes
  name, kind and origin (the registry refuses a different name or kind under one id);
  ``created_s`` keeps the earliest start and labels are merged key by key, in SQL
  (``json_patch`` / ``jsonb ||``), so two agents saving the same job at once cannot
  lose each other's labels. ``status`` and ``ended_s`` are then derived from all of
  the job's ``job_nodes`` rows: a multi-node job runs while any node runs it. The
  ``jobs`` upsert comes first and locks the row on PostgreSQL, so two nodes ending
  the job at the same moment see each other's ``job_nodes`` rows.
* ``node_checkpoints`` keeps the latest state saved. It is JSON-encoded at flush, not
  at save: the agent saves one every tick and keeps only the last, so encoding each
  would cost more than the rest of the tick. The caller hands over a fresh object it
  no longer mutates; a state that cannot be encoded is logged and skipped, and the
  rows of that flush are written all the same.

Core table clauses only (no ORM): this runs in the agent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, exists, func, literal_column, select, update
from sqlalchemy.engine import Connection

from joulestat.store.tables import JOB_NODES, JOBS, NODE_CHECKPOINTS

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.registry import Job
    from joulestat.host.identity import NodeInfo


class PendingJobs:
    """Job rows and a checkpoint waiting for the next flush; the latest save wins.

    Not thread-safe on its own: the writer calls it under its buffer lock.
    """

    __slots__ = ("jobs", "checkpoint")

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self.checkpoint: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return bool(self.jobs or self.checkpoint is not None)

    def save_job(self, job: Job, node: NodeInfo) -> None:
        """Snapshot ``job`` as this node sees it; a later save of the same id replaces it."""
        self.jobs[job.id] = (
            {"id": job.id, "name": job.name, "kind": job.kind,
             "labels": json.dumps(dict(job.labels), sort_keys=True), "origin": job.origin,
             "created_s": float(job.started_s), "ended_s": job.ended_s,
             "status": job.status},
            {"job_id": job.id, "node": node.node, "instance_type": node.instance_type,
             "region": node.region, "started_s": float(job.started_s),
             "ended_s": job.ended_s, "pids": json.dumps(sorted(list(job.pids)))},
        )

    def save_checkpoint(self, state: Mapping[str, Any], boot_id: str, saved_s: float) -> None:
        self.checkpoint = {"saved_s": float(saved_s), "boot_id": str(boot_id), "state": state}

    def merge_back(self, older: PendingJobs) -> None:
        """Put a batch that failed to write back; what was saved since it wins."""
        jobs = dict(older.jobs)
        jobs.update(self.jobs)
        self.jobs = jobs
        if self.checkpoint is None:
            self.checkpoint = older.checkpoint


def write_pending(connection: Connection, insert: Any, pending: PendingJobs, node: str) -> None:
    """Write ``pending`` in the caller's transaction."""
    if pending.jobs:
        ids = sorted(pending.jobs)  # one lock order for every agent: no deadlocks
        connection.execute(_jobs_upsert(insert, connection.dialect.name),
                           [pending.jobs[i][0] for i in ids])
        connection.execute(_job_nodes_upsert(insert), [pending.jobs[i][1] for i in ids])
        connection.execute(_status_update(ids))
    checkpoint = _encoded(pending.checkpoint)
    if checkpoint is not None:
        # Values as parameters, not .values(...) literals: the statement then compiles
        # once and is cached; literal coercion of the state text cost ~1 ms a flush.
        statement = insert(NODE_CHECKPOINTS)
        statement = statement.on_conflict_do_update(
            index_elements=["node"],
            set_={name: statement.excluded[name] for name in ("saved_s", "boot_id", "state")},
        )
        connection.execute(statement, {"node": node, **checkpoint})


def _encoded(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    if checkpoint is None or isinstance(checkpoint["state"], str):
        return checkpoint
    try:
        state = json.dumps(checkpoint["state"], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        log.error("checkpoint cannot be stored as JSON (%s); skipping it", exc)
        return None
    return {**checkpoint, "state": state}


def _jobs_upsert(insert: Any, dialect: str) -> Any:
    statement = insert(JOBS)
    excluded = statement.excluded
    if dialect == "postgresql":
        labels: Any = literal_column("(jobs.labels::jsonb || excluded.labels::jsonb)::text")
    else:
        labels = func.json_patch(JOBS.c.labels, excluded.labels)
    return statement.on_conflict_do_update(
        index_elements=["id"],
        set_={
            "labels": labels,
            "created_s": case((excluded.created_s < JOBS.c.created_s, excluded.created_s),
                              else_=JOBS.c.created_s),
        },
    )


def _job_nodes_upsert(insert: Any) -> Any:
    statement = insert(JOB_NODES)
    return statement.on_conflict_do_update(
        index_elements=["job_id", "node"],
        set_={name: statement.excluded[name] for name in (
            "instance_type", "region", "started_s", "ended_s", "pids")},
    )


def _status_update(ids: list[str]) -> Any:
    """``running`` while any node of the job runs it, else ``ended`` at the last end."""
    nodes = JOB_NODES.c
    running = exists().where(nodes.job_id == JOBS.c.id, nodes.ended_s.is_(None))
    last_end = select(func.max(nodes.ended_s)).where(nodes.job_id == JOBS.c.id)
    return (
        update(JOBS)
        .where(JOBS.c.id.in_(ids))
        .values(status=case((running, "running"), else_="ended"),
                ended_s=case((running, None), else_=last_end.scalar_subquery()))
    )
