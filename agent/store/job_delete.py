"""Deleting jobs (``joulestat jobs delete``): every row of a job, in one transaction,
with the node's energy kept whole.

A job's rows are of two kinds, and go two ways:

* **what the job is and counted** (``jobs``, ``job_nodes``, ``job_units``,
  ``job_unit_totals``) is deleted;
* **the job's shares of its nodes' energy** (``job_energy`` per tick,
  ``job_minute_energy`` per minute, ``job_energy_totals`` per node and component) move
  into the unattributed remainder (``job_id = ''``) of the same node, tick or minute,
  component and device, added to the remainder row already there (or as a new one).
  The node's own rows (``tick_energy``, ``minute_energy``) are never touched, so the
  node's energy is what was measured, and jobs + unattributed = node (the identity
  :func:`joulestat.store.nodes.unattributed_check` reads) still holds on every tick and
  minute: the energy was used, only who used it is forgotten. The remainder's totals
  get the job's totals, so they stay the sums of its rows up to each node's
  ``totals_until_ms`` (:mod:`joulestat.store.maintenance`).

**Imported parts** (:mod:`joulestat.store.import_writer`) are the exception: a job
measured elsewhere brought its own node rows (device ``import:<job id>``) that no agent
measured here, and a later import of the same file rewrites them; so the part's node
rows go with it, no remainder is left (jobs + unattributed = node holds with both sides
gone), and a node the import created that then holds nothing is deleted too. A part
holds either measured or imported rows: an import never writes a part that the store
holds as measured data.

The transaction's first statement writes (a no-op update of the jobs' rows): SQLite
then holds the write lock from the first read on (its driver would otherwise read
outside the transaction), and PostgreSQL locks the jobs' rows, then their nodes' rows
(``FOR UPDATE``, as a maintain pass and an import do), so that no totals boundary moves
and no import rewrites a part while its rows are moved. Jobs are deleted all or
nothing: an id not in the store, or a running job without ``force``, deletes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, delete, exists, func, literal_column, or_, select, update
from sqlalchemy.engine import Connection, Engine

from joulestat.store.engine import dialect_insert
from joulestat.store.import_writer import IMPORT_DEVICE_PREFIX
from joulestat.store.jobs import part_energy_j
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
    JOB_MINUTE_UNITS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    JOBS,
    MINUTE_ENERGY,
    NODE_CHECKPOINTS,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
)

# The tables holding a job's shares, their key columns (job_id first), and the columns
# added into the remainder's row (the others keep the remainder's values).
_SHARE_TABLES: tuple[tuple[Any, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    (JOB_ENERGY, ("job_id", "node", "t_end_ms", "component", "device"),
     ("t_start_ms", "source"), ("dynamic_j", "idle_j")),
    (JOB_MINUTE_ENERGY, ("job_id", "node", "minute_start_s", "component", "device"),
     (), ("dynamic_j", "idle_j")),
    (JOB_ENERGY_TOTALS, ("job_id", "node", "component", "source"), (),
     ("dynamic_j", "idle_j")),
)
# Every table with rows of a job, in the order they are deleted (children first).
JOB_TABLES = (JOB_ENERGY, JOB_MINUTE_ENERGY, JOB_ENERGY_TOTALS, JOB_UNITS, JOB_MINUTE_UNITS,
              JOB_UNIT_TOTALS, JOB_NODES, JOBS)
# The node tables an imported part wrote.
_IMPORTED_NODE_TABLES = (TICK_ENERGY, MINUTE_ENERGY)


class JobsNotDeleted(ValueError):
    """Nothing was deleted: ``missing`` ids are not in the store, or ``running`` jobs
    (id, name) were given without ``force``."""

    def __init__(self, message: str, missing: tuple[str, ...] = (),
                 running: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.missing, self.running = missing, running


@dataclass(frozen=True, slots=True)
class DeletedJob:
    """What deleting one job did.

    ``rows``: rows removed per table (an imported part's node rows included; rows moved
    into the remainder count as removed from the job's table). ``unattributed_j``: the
    job's energy now in its nodes' unattributed remainder; ``removed_j``: the energy of
    imported parts, gone with their node rows.
    """

    id: str
    name: str
    kind: str
    status: str
    rows: dict[str, int]
    unattributed_j: float
    removed_j: float

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def delete_jobs(engine: Engine, job_ids: Sequence[str], force: bool = False
                ) -> list[DeletedJob]:
    """Delete the jobs ``job_ids`` (exact ids) and all their rows in one transaction (see
    the module doc); what was done per job, in the order given.

    Raises :class:`JobsNotDeleted`, having changed nothing, when an id is not in the
    store or (without ``force``) a job is still running.
    """
    ids = sorted(set(job_ids))  # one lock order, as the agent's writer
    insert = dialect_insert(engine)
    with engine.begin() as connection:
        # A write first: the transaction (and SQLite's write lock) starts here.
        connection.execute(update(JOBS).where(JOBS.c.id.in_(ids))
                           .values(status=JOBS.c.status))
        found = {row.id: row for row in connection.execute(
            select(JOBS.c.id, JOBS.c.name, JOBS.c.kind, JOBS.c.status)
            .where(JOBS.c.id.in_(ids)))}
        _check(ids, found, force)
        _lock_nodes(connection, ids)
        energy = part_energy_j(connection, select(JOBS.c.id).where(JOBS.c.id.in_(ids)))
        done = {}
        for job_id in ids:
            row = found[job_id]
            imported = _imported_nodes(connection, job_id)
            parts = {node: total_j for (j, node), (total_j, *_parts) in energy.items()
                     if j == job_id}
            rows = _delete_job(connection, insert, job_id, imported)
            done[job_id] = DeletedJob(
                job_id, str(row.name), str(row.kind), str(row.status), rows,
                sum(j for node, j in parts.items() if node not in imported),
                sum(j for node, j in parts.items() if node in imported))
    return [done[job_id] for job_id in dict.fromkeys(job_ids)]


def _check(ids: list[str], found: dict[str, Any], force: bool) -> None:
    missing = tuple(job_id for job_id in ids if job_id not in found)
    if missing:
        raise JobsNotDeleted("no job with id " + ", ".join(repr(i) for i in missing)
                             + " in the store; nothing was deleted", missing=missing)
    running = tuple((job_id, str(found[job_id].name)) for job_id in ids
                    if found[job_id].status == "running")
    if running and not force:
        raise JobsNotDeleted(
            "still running: " + ", ".join(f"{name} ({job_id})" for job_id, name in running)
            + "; nothing was deleted", running=running)


def _lock_nodes(connection: Connection, ids: list[str]) -> None:
    """Lock the rows of every node holding a row of the jobs (PostgreSQL; SQLite holds
    its one write lock already), in node order, as a maintain pass locks its node."""
    nodes: set[str] = set()
    for table in (JOB_NODES, JOB_ENERGY, JOB_MINUTE_ENERGY, JOB_ENERGY_TOTALS, JOB_UNITS,
                  JOB_MINUTE_UNITS, JOB_UNIT_TOTALS):
        nodes.update(connection.execute(
            select(table.c.node).distinct().where(table.c.job_id.in_(ids))).scalars())
    if nodes:
        connection.execute(select(NODES.c.node).where(NODES.c.node.in_(sorted(nodes)))
                           .order_by(NODES.c.node).with_for_update()).all()


def _imported_nodes(connection: Connection, job_id: str) -> set[str]:
    """The nodes where ``job_id``'s part was imported (its rows' device says so)."""
    device = IMPORT_DEVICE_PREFIX + job_id
    nodes: set[str] = set()
    for table in (JOB_ENERGY, JOB_MINUTE_ENERGY):
        nodes.update(connection.execute(
            select(table.c.node).distinct()
            .where(table.c.job_id == job_id, table.c.device == device)).scalars())
    return nodes


def _to_remainder(connection: Connection, insert: Any, table: Any, keys: tuple[str, ...],
                  kept: tuple[str, ...], summed: tuple[str, ...], job_id: str,
                  imported: set[str]) -> None:
    """Add ``job_id``'s rows of ``table`` (but those of imported parts) into the
    unattributed rows of the same key, creating those that do not exist."""
    if table is JOB_MINUTE_ENERGY:  # no unique key to upsert on (PostgreSQL)
        _merge_without_key(connection, table, keys, summed, job_id, imported)
        return
    columns = table.c
    names = [*keys, *kept, *summed]
    source = select(literal_column(f"'{UNATTRIBUTED}'", String).label("job_id"),
                    *(columns[name] for name in names[1:]))
    source = source.where(columns.job_id == job_id)
    if imported:
        source = source.where(columns.node.not_in(sorted(imported)))
    statement = insert(table).from_select(names, source)
    statement = statement.on_conflict_do_update(
        index_elements=list(keys),
        set_={name: columns[name] + statement.excluded[name] for name in summed})
    connection.execute(statement)


def _merge_without_key(connection: Connection, table: Any, keys: tuple[str, ...],
                       summed: tuple[str, ...], job_id: str, imported: set[str]) -> None:
    """What the upsert in :func:`_to_remainder` does, for a table without a unique key
    (``job_minute_energy`` on PostgreSQL, see agent/store/schema.py): the job's rows,
    summed per key, are added into the remainder rows of the same key (an UPDATE joined
    to those sums, so one pass over each side whatever the job's length), then the sums
    no remainder row had are inserted as remainder rows."""
    rows = table.alias("shares").c
    picked = [rows.job_id == job_id]
    if imported:
        picked.append(rows.node.not_in(sorted(imported)))
    job = (select(*(rows[k] for k in keys[1:]), *(func.sum(rows[n]).label(n) for n in summed))
           .where(*picked).group_by(*(rows[k] for k in keys[1:])).subquery("job"))
    columns = table.c
    connection.execute(
        update(table)
        .where(columns.job_id == UNATTRIBUTED, *(columns[k] == job.c[k] for k in keys[1:]))
        .values({name: columns[name] + job.c[name] for name in summed}))
    remainder = table.alias("remainder").c
    had_one = exists().where(remainder.job_id == UNATTRIBUTED,
                             *(remainder[k] == job.c[k] for k in keys[1:]))
    connection.execute(table.insert().from_select(
        [*keys, *summed],
        select(literal_column(f"'{UNATTRIBUTED}'", String).label("job_id"),
               *(job.c[k] for k in keys[1:]), *(job.c[n] for n in summed))
        .where(~had_one)))


def _delete_job(connection: Connection, insert: Any, job_id: str,
                imported: set[str]) -> dict[str, int]:
    """Move ``job_id``'s shares to the remainder, then delete its rows (and its imported
    parts' node rows); rows removed per table."""
    for table, keys, kept, summed in _SHARE_TABLES:
        _to_remainder(connection, insert, table, keys, kept, summed, job_id, imported)
    rows: dict[str, int] = {}
    for table in JOB_TABLES:
        key = table.c.id if table is JOBS else table.c.job_id
        rows[table.name] = max(connection.execute(delete(table).where(key == job_id))
                               .rowcount, 0)
    device = IMPORT_DEVICE_PREFIX + job_id
    for table in _IMPORTED_NODE_TABLES:
        rows[table.name] = sum(
            max(connection.execute(delete(table).where(table.c.node == node,
                                                       table.c.device == device)).rowcount, 0)
            for node in sorted(imported))
    rows[NODES.name] = _delete_empty_nodes(connection, imported)
    return {name: count for name, count in rows.items() if count}


def _delete_empty_nodes(connection: Connection, nodes: set[str]) -> int:
    """Delete the nodes of imported parts that hold nothing any more (no row of any
    table names them, and no writer holds them): what the import created."""
    deleted = 0
    for node in sorted(nodes):
        holders = [exists().where(table.c.node == node) for table in (
            TICK_ENERGY, MINUTE_ENERGY, JOB_ENERGY, JOB_MINUTE_ENERGY, JOB_ENERGY_TOTALS,
            JOB_UNITS, JOB_MINUTE_UNITS, JOB_UNIT_TOTALS, JOB_NODES, NODE_DEVICES,
            NODE_CHECKPOINTS)]
        deleted += max(connection.execute(
            delete(NODES).where(NODES.c.node == node, NODES.c.writer_id.is_(None),
                                ~or_(*holders))).rowcount, 0)
    return deleted
