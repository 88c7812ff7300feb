"""The agent's SQL writer: batched, idempotent, patient when the database is away.

Costs on the agent's hot path: :meth:`StoreWriter.add` appends a tick's numbers to
four ``array`` columns (about 32 bytes a row, no SQL, no dicts); a batch goes to the
database every ``flush_interval_s`` as one executemany ``INSERT … ON CONFLICT DO
NOTHING`` keyed on ``(node, t_end_ms, component, device)``, so a tick written twice
(a retried batch whose commit did reach the server) is stored once.

When the database is unreachable or locked the batch goes back to the front of the
buffer and is retried with backoff (up to a minute); the buffer is bounded
(``max_buffered_rows``) and, when full, drops its oldest rows with an error saying how
many. Nothing recorded is lost silently.

:meth:`StoreWriter.maintain` (about once a minute) rolls raw ticks up into
``minute_energy`` and deletes raw ticks older than the retention, after rolling up
exactly the minutes it deletes; ``nodes.raw_pruned_until_ms`` records where raw rows
end so queries never count a minute twice (see :mod:`agent.store.models`).

This module uses Core table clauses rather than the ORM models (the ORM costs the agent
about 6 MiB of RSS); ``test_core_tables_match_models`` keeps them in step. One writer
per node: two agents writing the same node name would race on the rollups.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Double,
    Integer,
    String,
    case,
    column,
    delete,
    func,
    literal_column,
    select,
    table,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from agent.identity import NodeInfo
from agent.sensors.base import DeviceInfo
from agent.store.engine import describe_error, dialect_insert, redact_url
from agent.tick import Tick

log = logging.getLogger(__name__)

MINUTE_MS = 60_000
# The agent's whole RSS budget is 50 MiB, so the outage buffer is sized in memory, not
# time: ~32 bytes a row, 200k rows ~6 MiB, i.e. 14 h of 1 s ticks with four entries
# (a day at two or three). Pass more where memory allows longer outages.
DEFAULT_MAX_BUFFERED_ROWS = 200_000
MAX_RETRY_DELAY_S = 60.0
# Raw rows pruned per maintain() call at most, so a long backlog (a retention cut from
# 7d to 1d) is worked off over several minutes instead of one long write lock.
MAX_PRUNE_SPAN_MS = 6 * 3600 * 1000
WARN_EVERY_S = 60.0

NODES = table(
    "nodes",
    column("node", String), column("instance_type", String), column("region", String),
    column("cpu_model", String), column("agent_version", String),
    column("first_seen_s", Double), column("last_seen_s", Double),
    column("raw_pruned_until_ms", BigInteger),
)
NODE_DEVICES = table(
    "node_devices",
    column("node", String), column("component", String), column("device", String),
    column("source", String), column("model", String), column("uuid", String),
    column("device_index", Integer), column("last_seen_s", Double),
)
TICK_ENERGY = table(
    "tick_energy",
    column("node", String), column("t_end_ms", BigInteger), column("component", String),
    column("device", String), column("t_start_ms", BigInteger), column("energy_j", Double),
    column("source", String),
)
MINUTE_ENERGY = table(
    "minute_energy",
    column("node", String), column("minute_start_s", BigInteger), column("component", String),
    column("device", String), column("energy_j", Double), column("covered_s", Double),
    column("source", String),
)
CORE_TABLES = (NODES, NODE_DEVICES, TICK_ENERGY, MINUTE_ENERGY)


class _Rows:
    """Buffered tick rows as parallel arrays; ``key`` indexes (component, device, source)."""

    __slots__ = ("t_end_ms", "t_start_ms", "energy_j", "key")

    def __init__(self) -> None:
        self.t_end_ms = array("q")
        self.t_start_ms = array("q")
        self.energy_j = array("d")
        self.key = array("I")

    def __len__(self) -> int:
        return len(self.t_end_ms)

    def tail(self, start: int) -> _Rows:
        rest = _Rows()
        for name in self.__slots__:
            setattr(rest, name, getattr(self, name)[start:])
        return rest

    def extend(self, other: _Rows) -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))

    def drop_oldest(self, count: int) -> None:
        for name in self.__slots__:
            del getattr(self, name)[:count]


@dataclass(frozen=True)
class MaintainResult:
    """What one :meth:`StoreWriter.maintain` did: rollup rows upserted, raw rows deleted."""

    rolled_rows: int
    pruned_rows: int
    raw_pruned_until_ms: int | None


class StoreWriter:
    """Buffers ticks of one node and writes them to the store; see the module doc."""

    def __init__(
        self,
        engine: Engine,
        node: NodeInfo,
        devices: list[DeviceInfo],
        raw_retention_s: float,
        flush_interval_s: float = 5.0,
        max_batch_rows: int = 1000,
        max_buffered_rows: int = DEFAULT_MAX_BUFFERED_ROWS,
    ) -> None:
        if raw_retention_s < 2 * MINUTE_MS / 1000:
            raise ValueError(f"raw_retention_s must be at least 120 s, got {raw_retention_s}")
        if flush_interval_s <= 0 or max_batch_rows < 1 or max_buffered_rows < max_batch_rows:
            raise ValueError("need flush_interval_s > 0 and 1 <= max_batch_rows <= "
                             "max_buffered_rows")
        self.engine = engine
        self.node = node
        self.devices = list(devices)
        self.raw_retention_s = float(raw_retention_s)
        self.flush_interval_s = float(flush_interval_s)
        self.max_batch_rows = int(max_batch_rows)
        self.max_buffered_rows = int(max_buffered_rows)
        self.written_rows = 0  # counters for logs and metrics
        self.dropped_rows = 0
        self._url = redact_url(engine.url)
        self._insert = dialect_insert(engine)
        self._tick_insert = self._insert(TICK_ENERGY).on_conflict_do_nothing()
        self._lock = threading.Lock()  # guards the buffer (add vs flush)
        self._io_lock = threading.Lock()  # one flush or maintain at a time
        self._rows = _Rows()
        self._keys: list[tuple[str, str, str]] = []
        self._key_index: dict[tuple[str, str, str], int] = {}
        self._next_flush_s: float | None = None
        self._failures = 0
        self._last_warning = -math.inf
        self._bad_entries = 0
        self._registered = False
        self._pruned_until_ms: int | None = None
        try:
            self._register()
        except SQLAlchemyError as exc:
            self._warn(f"cannot register node {node.node!r} in the store {self._url} "
                       f"({describe_error(exc)}); will retry before the first write")

    @property
    def buffered_rows(self) -> int:
        return len(self._rows)

    # -- hot path ---------------------------------------------------------------------

    def add(self, tick: Tick) -> None:
        """Buffer one tick's rows. No SQL; a few microseconds."""
        t_end_ms = round(tick.t1_s * 1000)
        t_start_ms = round(tick.t0_s * 1000)
        with self._lock:
            rows = self._rows
            for entry in tick.entries:
                if not math.isfinite(entry.energy_j):
                    self._bad_entries += 1
                    continue
                key = (entry.component, entry.device, entry.source)
                index = self._key_index.get(key)
                if index is None:
                    index = self._key_index[key] = len(self._keys)
                    self._keys.append(key)
                rows.t_end_ms.append(t_end_ms)
                rows.t_start_ms.append(t_start_ms)
                rows.energy_j.append(entry.energy_j)
                rows.key.append(index)
            if len(rows) > self.max_buffered_rows:
                self._drop_oldest_locked()
        if self._bad_entries and self._may_warn():
            self._warn(f"skipped {self._bad_entries} tick entries with non-finite energy "
                       "(a sampler bug?)")
            self._bad_entries = 0

    def maybe_flush(self, now_s: float) -> bool:
        """Flush when due (interval passed, or a full batch waits); True if rows went out.

        ``now_s`` is any steadily increasing clock; failures back off up to a minute.
        """
        due = self._next_flush_s is None or now_s >= self._next_flush_s or (
            self._failures == 0 and len(self._rows) >= self.max_batch_rows
        )
        if not due:
            return False
        had_rows = len(self._rows) > 0
        ok = self.flush()
        delay = self.flush_interval_s if ok else min(
            MAX_RETRY_DELAY_S, self.flush_interval_s * 2 ** min(self._failures, 10)
        )
        self._next_flush_s = now_s + delay
        return ok and had_rows

    # -- writes -----------------------------------------------------------------------

    def flush(self) -> bool:
        """Write every buffered row now; False (rows kept for retry) if the DB failed."""
        with self._io_lock:
            with self._lock:
                if not len(self._rows):
                    return True
                batch, self._rows = self._rows, _Rows()
            written = 0
            try:
                if not self._registered:
                    self._register()
                for start in range(0, len(batch), self.max_batch_rows):
                    end = min(start + self.max_batch_rows, len(batch))
                    params = self._params(batch, start, end)
                    if params:
                        with self.engine.begin() as connection:
                            connection.execute(self._tick_insert, params)
                    written = end
            except SQLAlchemyError as exc:
                with self._lock:
                    rest = batch.tail(written)
                    rest.extend(self._rows)
                    self._rows = rest
                    if len(rest) > self.max_buffered_rows:
                        self._drop_oldest_locked()
                self._failed(exc, "write ticks to")
                return False
            self.written_rows += written
            if self._failures:
                log.info("store %s reachable again after %d failed attempt(s)",
                         self._url, self._failures)
                self._failures = 0
            return True

    def maintain(self, now_s: float) -> MaintainResult | None:
        """Roll up complete minutes and prune old raw ticks; None if it could not run.

        ``now_s`` is wall-clock epoch seconds (the ticks' clock). Runs only after the
        buffer has been flushed entirely, so no minute is rolled up while some of its
        ticks still wait in memory. Idempotent: rerunning changes nothing.
        """
        if not self.flush():
            return None
        now_ms = round(now_s * 1000)
        complete_until_ms = now_ms // MINUTE_MS * MINUTE_MS
        keep_after_ms = (now_ms - round(self.raw_retention_s * 1000)) // MINUTE_MS * MINUTE_MS
        with self._io_lock:
            try:
                if not self._registered:
                    self._register()
                with self.engine.begin() as connection:
                    connection.execute(update(NODES).where(NODES.c.node == self.node.node)
                                       .values(last_seen_s=now_s))
                    pruned_until = connection.execute(
                        select(NODES.c.raw_pruned_until_ms).where(NODES.c.node == self.node.node)
                    ).scalar()
                    latest = connection.execute(
                        select(func.max(MINUTE_ENERGY.c.minute_start_s))
                        .where(MINUTE_ENERGY.c.node == self.node.node)
                    ).scalar()
                    # Recompute from the latest rolled minute itself (it may have been
                    # rolled while its last tick was in flight), never before the prune
                    # boundary (raw rows there are gone or strays).
                    after_ms = max((v for v in (None if latest is None else latest * 1000,
                                                pruned_until) if v is not None), default=None)
                    rolled = self._rollup(connection, after_ms, complete_until_ms)
                    bound = min(complete_until_ms, keep_after_ms)
                    pruned, pruned_until = self._prune(connection, pruned_until, bound)
            except SQLAlchemyError as exc:
                self._failed(exc, "maintain rollups in")
                return None
        self._pruned_until_ms = pruned_until
        if rolled or pruned:
            log.debug("store: %d minute rows rolled up, %d raw rows pruned", rolled, pruned)
        return MaintainResult(rolled, pruned, pruned_until)

    def close(self) -> None:
        """Flush what is buffered; says how many rows are lost if the DB is still away."""
        if not self.flush():
            log.error("store %s unreachable at shutdown: %d buffered tick rows are lost",
                      self._url, len(self._rows))

    # -- internals --------------------------------------------------------------------

    def _register(self) -> None:
        """Upsert the node row (keeping first_seen_s) and its devices."""
        now_s = time.time()
        info = self.node
        node_insert = self._insert(NODES).values(
            node=info.node, instance_type=info.instance_type, region=info.region,
            cpu_model=info.cpu_model, agent_version=info.agent_version,
            first_seen_s=now_s, last_seen_s=now_s,
        )
        node_insert = node_insert.on_conflict_do_update(
            index_elements=["node"],
            set_={name: node_insert.excluded[name] for name in (
                "instance_type", "region", "cpu_model", "agent_version", "last_seen_s")},
        )
        unique = {(d.component, d.device): d for d in self.devices}  # one upsert per key
        device_rows = [
            {"node": info.node, "component": d.component, "device": d.device,
             "source": d.source, "model": d.model, "uuid": d.uuid, "device_index": d.index,
             "last_seen_s": now_s}
            for d in unique.values()
        ]
        device_insert = self._insert(NODE_DEVICES)
        device_insert = device_insert.on_conflict_do_update(
            index_elements=["node", "component", "device"],
            set_={name: device_insert.excluded[name] for name in (
                "source", "model", "uuid", "device_index", "last_seen_s")},
        )
        with self.engine.begin() as connection:
            connection.execute(node_insert)
            if device_rows:
                connection.execute(device_insert, device_rows)
            self._pruned_until_ms = connection.execute(
                select(NODES.c.raw_pruned_until_ms).where(NODES.c.node == info.node)
            ).scalar()
        self._registered = True

    def _params(self, rows: _Rows, start: int, end: int) -> list[dict[str, Any]]:
        node, keys, floor_ms = self.node.node, self._keys, self._pruned_until_ms
        params = []
        stale = 0
        for i in range(start, end):
            t_end_ms = rows.t_end_ms[i]
            if floor_ms is not None and t_end_ms <= floor_ms:
                stale += 1  # its minute is rolled up and pruned: it could never be counted
                continue
            component, device, source = keys[rows.key[i]]
            params.append({
                "node": node, "t_end_ms": t_end_ms, "component": component, "device": device,
                "t_start_ms": rows.t_start_ms[i], "energy_j": rows.energy_j[i],
                "source": source,
            })
        if stale:
            self.dropped_rows += stale
            log.error("dropped %d tick rows ending at or before the raw retention boundary "
                      "(%d ms): was the wall clock stepped back?", stale, floor_ms)
        return params

    def _rollup(self, connection: Connection, after_ms: int | None, until_ms: int) -> int:
        """Upsert minute_energy from the raw ticks ending in (after_ms, until_ms]."""
        if after_ms is not None and until_ms <= after_ms:
            return 0
        ticks = TICK_ENERGY.c
        # Integer division on both backends (BIGINT / INTEGER); literals, not bind
        # parameters, so PostgreSQL sees the same expression in SELECT and GROUP BY.
        divide = {"precedence": 8}  # as '/': parenthesise (a - 1) / b, not a - 1 / b
        minute = (ticks.t_end_ms - literal_column("1")).op("/", return_type=BigInteger, **divide)(
            literal_column("60000")) * literal_column("60")
        first, last = func.min(ticks.source), func.max(ticks.source)
        source = case((first == last, first), else_=first + literal_column("'+'") + last)
        covered = func.sum(ticks.t_end_ms - ticks.t_start_ms).op(
            "/", return_type=Double, **divide)(literal_column("1000.0"))
        conditions = [ticks.node == self.node.node, ticks.t_end_ms <= until_ms]
        if after_ms is not None:
            conditions.append(ticks.t_end_ms > after_ms)
        query = (
            select(ticks.node, minute, ticks.component, ticks.device,
                   func.sum(ticks.energy_j), covered, source)
            .where(*conditions)
            .group_by(ticks.node, minute, ticks.component, ticks.device)
        )
        names = ["node", "minute_start_s", "component", "device", "energy_j", "covered_s",
                 "source"]
        statement = self._insert(MINUTE_ENERGY).from_select(names, query)
        statement = statement.on_conflict_do_update(
            index_elements=names[:4],
            set_={name: statement.excluded[name] for name in names[4:]},
        )
        return max(connection.execute(statement).rowcount, 0)

    def _prune(
        self, connection: Connection, pruned_until: int | None, bound_ms: int
    ) -> tuple[int, int | None]:
        """Delete raw ticks ending at or before ``bound_ms``, rolling them up first."""
        ticks = TICK_ENERGY.c
        oldest_query = select(func.min(ticks.t_end_ms)).where(ticks.node == self.node.node)
        if pruned_until is not None:
            oldest_query = oldest_query.where(ticks.t_end_ms > pruned_until)
        oldest = connection.execute(oldest_query).scalar()
        if oldest is None:
            return 0, pruned_until
        oldest_minute_end = ((oldest - 1) // MINUTE_MS + 1) * MINUTE_MS
        bound_ms = min(bound_ms, oldest_minute_end - MINUTE_MS + MAX_PRUNE_SPAN_MS)
        if bound_ms < oldest_minute_end:
            return 0, pruned_until
        # The minutes about to lose their raw rows are rolled up from those very rows,
        # in this transaction: rows that arrived late for an already rolled minute are
        # counted, and nothing is deleted that the rollups do not hold.
        self._rollup(connection, pruned_until, bound_ms)
        deleted = connection.execute(
            delete(TICK_ENERGY).where(ticks.node == self.node.node, ticks.t_end_ms <= bound_ms)
        ).rowcount
        connection.execute(update(NODES).where(NODES.c.node == self.node.node)
                           .values(raw_pruned_until_ms=bound_ms))
        return max(deleted, 0), bound_ms

    def _drop_oldest_locked(self) -> None:
        """Over the bound: drop the oldest rows (10 % extra, so this is not per tick)."""
        rows = self._rows
        count = len(rows) - self.max_buffered_rows + self.max_buffered_rows // 10
        first_s, last_s = rows.t_end_ms[0] / 1000, rows.t_end_ms[count - 1] / 1000
        rows.drop_oldest(count)
        self.dropped_rows += count
        log.error(
            "store %s unreachable for too long: buffer full (%d rows), dropped the %d oldest "
            "tick rows (ending %.3f..%.3f); %d dropped in total",
            self._url, self.max_buffered_rows, count, first_s, last_s, self.dropped_rows,
        )

    def _failed(self, exc: SQLAlchemyError, action: str) -> None:
        self._failures += 1
        if self._failures == 1 or self._may_warn():
            self._warn(f"cannot {action} the store {self._url} ({describe_error(exc)}); "
                       f"keeping {len(self._rows)} rows buffered and retrying "
                       f"(attempt {self._failures})")

    def _may_warn(self) -> bool:
        return time.monotonic() - self._last_warning >= WARN_EVERY_S

    def _warn(self, message: str) -> None:
        self._last_warning = time.monotonic()
        log.warning("%s", message)
