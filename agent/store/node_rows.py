"""The SQL of a node's writer: its node and device rows, and its batches of tick, share
and unit rows. Kept apart from :mod:`joulestat.store.writer`, which decides when and what to
write (buffering, spool, lease, retries); this module only says how.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection, Engine

from joulestat.devices.sensor import DeviceInfo
from joulestat.host.identity import NodeInfo
from joulestat.store.buffer import SHARE_COLUMNS, TICK_COLUMNS, UNIT_COLUMNS, RowBuffer
from joulestat.store.tables import (
    JOB_ENERGY,
    JOB_UNITS,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
)

# Column types for PostgreSQL's unnest() arrays, by SQLAlchemy type name.
_PG_ARRAY_TYPES = {"BigInteger": "bigint", "Integer": "integer", "String": "text",
                   "Double": "double precision", "Float": "double precision"}


@dataclass(frozen=True)
class Statements:
    """The tick, share and unit inserts of one dialect.

    ``columnar``: each statement takes a batch as one list per column (PostgreSQL's
    ``unnest``), not a row per execution."""

    sql: tuple[str, str, str]
    columnar: bool = False


def insert_statements(engine: Engine) -> Statements:
    """``INSERT ... ON CONFLICT DO NOTHING`` for ticks, shares and units. A row written
    twice, by a retried batch or a replayed spool, is stored once (SQLite >= 3.24,
    PostgreSQL).

    SQLite gets one row per execution in the driver's placeholder style: the rows are
    tuples already (see RowBuffer.params), and SQLAlchemy's per-row parameter work was
    half a flush's CPU. PostgreSQL gets one statement per batch, ``INSERT ... SELECT *
    FROM unnest(column arrays)``: executing a statement per row cost the server about
    60 us a row, most of a fleet's database CPU (benchmarks/ingest.py)."""
    tables = ((TICK_ENERGY, TICK_COLUMNS), (JOB_ENERGY, SHARE_COLUMNS),
              (JOB_UNITS, UNIT_COLUMNS))
    if engine.dialect.name == "postgresql":
        def columnar(table: Table, columns: Sequence[str]) -> str:
            arrays = ", ".join(
                f"%s::{_PG_ARRAY_TYPES[type(table.c[name].type).__name__]}[]"
                for name in columns)
            return (f"INSERT INTO {table.name} ({', '.join(columns)}) "
                    f"SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING")

        tick, share, unit = (columnar(table, columns) for table, columns in tables)
        return Statements((tick, share, unit), columnar=True)
    mark = "?" if engine.dialect.paramstyle == "qmark" else "%s"

    def sql(table: Table, columns: Sequence[str]) -> str:
        return (f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES "
                f"({', '.join([mark] * len(columns))}) ON CONFLICT DO NOTHING")

    tick, share, unit = (sql(table, columns) for table, columns in tables)
    return Statements((tick, share, unit))


def insert_rows(connection: Connection, statements: Statements, batch: RowBuffer, node: str,
                floor_ms: int | None, max_batch_rows: int, ticks_allowed: bool
                ) -> tuple[int, int]:
    """``batch`` in chunks of ``max_batch_rows``: (rows written, stale rows skipped).
    Without ``ticks_allowed`` (another process writes this node's ticks) only the jobs'
    own rows go: no tick and no unattributed remainder."""
    written = stale = 0
    for start in range(0, len(batch), max_batch_rows):
        end = min(start + max_batch_rows, len(batch))
        ticks, shares, units, skipped = batch.params(node, start, end, floor_ms)
        if not ticks_allowed:
            ticks = []
            shares = [share for share in shares if share[0] != UNATTRIBUTED]
        for statement, params in zip(statements.sql, (ticks, shares, units), strict=True):
            if not params:
                continue
            if statements.columnar:
                columns = tuple(list(column) for column in zip(*params, strict=True))
                connection.exec_driver_sql(statement, columns)
            else:
                connection.exec_driver_sql(statement, params)
        written += len(ticks) + len(shares) + len(units)
        stale += skipped
    return written, stale


def upsert_node(connection: Connection, insert: Callable[..., Any], info: NodeInfo,
                devices: Sequence[DeviceInfo], now_s: float) -> int | None:
    """Upsert the node row (keeping first_seen_s) and its devices; returns the node's
    settled boundary (``totals_until_ms``)."""
    node_insert = insert(NODES).values(
        node=info.node, instance_type=info.instance_type, region=info.region,
        cpu_model=info.cpu_model, agent_version=info.agent_version,
        first_seen_s=now_s, last_seen_s=now_s,
    )
    node_insert = node_insert.on_conflict_do_update(
        index_elements=["node"],
        set_={name: node_insert.excluded[name] for name in (
            "instance_type", "region", "cpu_model", "agent_version", "last_seen_s")},
    )
    unique = {(d.component, d.device): d for d in devices}  # one upsert per key
    device_rows = [
        {"node": info.node, "component": d.component, "device": d.device,
         "source": d.source, "model": d.model, "uuid": d.uuid, "device_index": d.index,
         "last_seen_s": now_s}
        for d in unique.values()
    ]
    device_insert = insert(NODE_DEVICES)
    device_insert = device_insert.on_conflict_do_update(
        index_elements=["node", "component", "device"],
        set_={name: device_insert.excluded[name] for name in (
            "source", "model", "uuid", "device_index", "last_seen_s")},
    )
    connection.execute(node_insert)
    if device_rows:
        connection.execute(device_insert, device_rows)
    return connection.execute(
        select(NODES.c.totals_until_ms).where(NODES.c.node == info.node)
    ).scalar()
