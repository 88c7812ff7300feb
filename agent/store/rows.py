"""What one flush writes, and how: the buffered rows and their SQL.

:class:`RowBuffer` holds the writer's per-tick rows (ticks, their job shares and unit
counts) as arrays, in the order they were added, so that when the database stays away
too long and the oldest rows must go, a tick goes together with its shares and unit
counts (a job row must never be stored without its tick, or conservation breaks). A
row costs about 36 bytes (four 8-byte numbers and a 4-byte key index, no dicts); its
strings live once in :attr:`RowBuffer.keys`. Each buffer owns its key table and the
writer starts a fresh buffer at every flush, so the table never outgrows what is
buffered: an agent that saw thousands of short jobs does not keep their names forever.

:class:`PendingJobs` sits next to it: job metadata and the agent's checkpoint, written in
the same transaction (:func:`write_pending`), so a crash or a lost connection never
leaves a half-written flush behind. Everything there is upserted, so a retried flush
whose commit did reach the server changes nothing:

* ``jobs`` is one row per job id whichever node reports it. The first report fixes
  name, kind and origin (the registry refuses a different name or kind under one id);
  ``created_s`` keeps the earliest start and labels are merged key by key, in SQL
  (``json_patch`` / ``jsonb ||``), so two agents saving the same job at once cannot
  lose each other's labels. Agent labels merge the same way, except that two
  different ``idle_policy`` values make ``mixed``
  (:func:`joulestat.attribution.agent_labels.merge_agent_labels`, here in SQL).
  ``status`` and ``ended_s`` are then derived from all of the job's ``job_nodes`` rows:
  a multi-node job runs while any node runs it. The ``jobs`` upsert comes first and
  locks the row on PostgreSQL, so two nodes ending the job at the same moment see each
  other's ``job_nodes`` rows.
* ``node_checkpoints`` keeps the latest state saved. It is JSON-encoded at flush, not
  at save: the agent saves one every tick and keeps only the last, so encoding each
  would cost more than the rest of the tick. The caller hands over a fresh object it
  no longer mutates; a state that cannot be encoded is logged and skipped, and the
  rows of that flush are written all the same.

The node's own rows (its node and device rows) and the batched INSERTs of tick, share
and unit rows are here too. :mod:`joulestat.store.writer` decides when and what to
write (buffering, spool, lease, retries); this module only says how. Core table
clauses only (no ORM): this runs in the agent.
"""

from __future__ import annotations

import json
import logging
import math
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, case, exists, func, literal_column, select, update
from sqlalchemy.engine import Connection, Engine

from joulestat.attribution.agent_labels import IDLE_POLICY, MIXED
from joulestat.core.records import DeviceInfo, NodeInfo
from joulestat.core.serving_trace import trace_to_json
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_NODES,
    JOB_UNITS,
    JOBS,
    MINUTE_MS,
    NODE_CHECKPOINTS,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.core.records import JobRecord, NodeInfo, Share
    from joulestat.core.tick import Tick

log = logging.getLogger(__name__)


# -- The writer's in-memory buffer: ticks, their job shares and unit counts as arrays ----

# The kind of a row, first in its key:
TICK = "tick"  # (TICK, "", component, device, source); energy in dynamic_j
SHARE = "share"  # (SHARE, job or UNATTRIBUTED, component, device, source)
UNIT = "unit"  # (UNIT, job, unit, "", ""); the count in dynamic_j

_ARRAYS = ("t_end_ms", "t_start_ms", "dynamic_j", "idle_j", "key")

Key = tuple[str, str, str, str, str]
Params = list[tuple[Any, ...]]
TICK_COLUMNS = ("node", "t_end_ms", "component", "device", "t_start_ms", "energy_j", "source")
SHARE_COLUMNS = ("job_id", "node", "t_end_ms", "component", "device", "t_start_ms",
                 "dynamic_j", "idle_j", "source")
UNIT_COLUMNS = ("job_id", "node", "t_end_ms", "unit", "count")


class RowBuffer:
    """Rows ``(t_end_ms, t_start_ms, dynamic_j, idle_j, key)``; see the module doc.

    Not thread-safe on its own: the writer calls it under its buffer lock.
    """

    __slots__ = (*_ARRAYS, "keys", "_index", "cuts")

    def __init__(self) -> None:
        self.t_end_ms = array("q")
        self.t_start_ms = array("q")
        self.dynamic_j = array("d")
        self.idle_j = array("d")
        self.key = array("I")
        self.keys: list[Key] = []
        self._index: dict[Key, int] = {}
        # Row positions where a window must start (see params): where a batch that failed
        # to write was put back in front of newer rows. Its windows must come out as
        # they did in the attempt whose commit may have reached the server.
        self.cuts: list[int] = []

    def __len__(self) -> int:
        return len(self.t_end_ms)

    def key_of(self, key: Key) -> int:
        index = self._index.get(key)
        if index is None:
            # Kept as exact strings: a component arrives as a Component (a str enum),
            # which sqlite3 binds at 1.5 us a row more than a str (a flush binds
            # thousands); a key is converted once, when first seen (every key of a busy
            # node again after each flush, so spelt out rather than a generator's loop).
            key = (key[0], str(key[1]), str(key[2]), str(key[3]), str(key[4]))
            index = self._index[key] = len(self.keys)
            self.keys.append(key)
        return index

    def append(self, t_end_ms: int, t_start_ms: int, dynamic_j: float, idle_j: float,
               key: Key) -> None:
        self.t_end_ms.append(t_end_ms)
        self.t_start_ms.append(t_start_ms)
        self.dynamic_j.append(dynamic_j)
        self.idle_j.append(idle_j)
        self.key.append(self.key_of(key))

    def append_tick(self, tick: Tick) -> int:
        """A tick's entries (each from its own start: a sensor gap is one long row);
        returns how many non-finite entries were skipped."""
        t_end_ms, bad = round(tick.t1_s * 1000), 0
        for entry in tick.entries:
            if not math.isfinite(entry.energy_j):
                bad += 1
                continue
            self.append(t_end_ms, round(tick.entry_t0_s(entry) * 1000), entry.energy_j, 0.0,
                        tick_key(entry.component, entry.device, entry.source))
        return bad

    def append_shares(self, tick: Tick, shares: Iterable[Share]) -> int:
        """A tick's attribution. ``job=None`` is stored under job id ``''``: the
        unattributed remainder, which keeps job rows summing to the tick's energy. Shares
        of one (job, component, device) are summed, as they are one row in the store.
        Returns how many non-finite shares were skipped."""
        t_end_ms, t_start_ms = round(tick.t1_s * 1000), round(tick.t0_s * 1000)
        merged: dict[Key, list[float]] = {}
        bad = 0
        isfinite = math.isfinite
        for share in shares:
            dynamic_j, idle_j = share.dynamic_j, share.idle_j
            if not (isfinite(dynamic_j) and isfinite(idle_j)):
                bad += 1
                continue
            job = share.job
            key = (SHARE, UNATTRIBUTED if job is None else job, share.component, share.device,
                   share.source)  # share_key, inline: a busy node's tick has hundreds
            total = merged.get(key)
            if total is None:
                merged[key] = [dynamic_j, idle_j]
            else:
                total[0] += dynamic_j
                total[1] += idle_j
        # A column at a time (what append does a row at a time): a tick's shares are most
        # of what the agent buffers, 250 rows a second on a node with 50 jobs.
        count = len(merged)
        self.t_end_ms.extend(array("q", (t_end_ms,)) * count)
        self.t_start_ms.extend(array("q", (t_start_ms,)) * count)
        key_of = self.key_of
        self.key.extend(array("I", [key_of(key) for key in merged]))
        sums = list(merged.values())
        self.dynamic_j.extend(array("d", [total[0] for total in sums]))
        self.idle_j.extend(array("d", [total[1] for total in sums]))
        return bad

    def energy_j(self) -> tuple[float, float, float]:
        """(node joules, jobs' joules, seconds of ticks) in these rows: what a drop or a
        fold of them costs, for the WARNING and the lost-energy metric
        (:mod:`joulestat.core.losses`). A pass over the rows: overflow paths only."""
        keys, node_j, jobs_j = self.keys, 0.0, 0.0
        spans: dict[int, int] = {}  # tick end -> its start, from the node's tick rows
        for r in range(len(self)):
            key = keys[self.key[r]]
            if key[0] == TICK:
                node_j += self.dynamic_j[r]
                spans[self.t_end_ms[r]] = self.t_start_ms[r]
            elif key[0] == SHARE and key[1] != UNATTRIBUTED:
                jobs_j += self.dynamic_j[r] + self.idle_j[r]
        return node_j, jobs_j, sum(end - start for end, start in spans.items()) / 1000

    def append_units(self, job_id: str, t_end_s: float, deltas: Mapping[str, float]) -> int:
        """Units ``job_id`` counted in the tick ending at ``t_end_s``; returns how many
        counts were not finite numbers (skipped)."""
        t_end_ms, bad = round(t_end_s * 1000), 0
        for unit, count in deltas.items():
            if isinstance(count, bool) or not isinstance(count, int | float) or (
                    not math.isfinite(count)):
                bad += 1
            elif count:
                self.append(t_end_ms, t_end_ms, float(count), 0.0, unit_key(job_id, unit))
        return bad

    def prepend(self, older: RowBuffer) -> None:
        """Put ``older`` (a batch that failed to write) back in front of these rows."""
        remap = [self.key_of(key) for key in older.keys]
        shift = len(older)
        for name in _ARRAYS[:-1]:
            mine = getattr(self, name)
            setattr(self, name, getattr(older, name) + mine)
        self.key = array("I", (remap[k] for k in older.key)) + self.key
        self.cuts = [*older.cuts, shift, *(c + shift for c in self.cuts)]

    def fold_jobs(self, count: int) -> tuple[int, float, float]:
        """Make room without losing node energy: in the oldest ticks, fold each job's
        shares into that tick's unattributed row and drop the tick's unit counts, until
        at least ``count`` rows are gone (or no job row is left).

        The tick rows stay, and jobs + unattributed still equal each tick's energy: what
        is lost is who used it, never how much was used. Returns the rows removed and the
        first and last tick ends (seconds) that were folded.
        """
        n, removed, i = len(self), 0, 0
        keys = self.keys
        kept = RowBuffer()
        first = last = 0
        cuts, moved = sorted(self.cuts), []
        while i < n and removed < count:
            t_end = self.t_end_ms[i]
            j = i
            while j < n and self.t_end_ms[j] == t_end:
                j += 1
            while cuts and cuts[0] <= i:  # a cut before this tick's rows stays before them
                cuts.pop(0)
                moved.append(len(kept))
            folded: dict[Key, list[float]] = {}
            t_start = self.t_start_ms[i]
            rows_before = len(kept)
            for r in range(i, j):
                key = keys[self.key[r]]
                if key[0] == TICK:
                    kept.append(t_end, self.t_start_ms[r], self.dynamic_j[r], self.idle_j[r],
                                key)
                elif key[0] == SHARE:
                    total = folded.setdefault((SHARE, UNATTRIBUTED, *key[2:]), [0.0, 0.0])
                    total[0] += self.dynamic_j[r]
                    total[1] += self.idle_j[r]
                    t_start = self.t_start_ms[r]
            for key, (dynamic_j, idle_j) in folded.items():
                kept.append(t_end, t_start, dynamic_j, idle_j, key)
            if (j - i) > len(kept) - rows_before:
                first = first or t_end
                last = t_end
            removed += (j - i) - (len(kept) - rows_before)
            i = j
        if removed == 0:
            return 0, 0.0, 0.0
        while cuts and cuts[0] < i:  # a cut within a folded tick: after its rows
            cuts.pop(0)
            moved.append(len(kept))
        offset = len(kept) - i
        for r in range(i, n):
            kept.append(self.t_end_ms[r], self.t_start_ms[r], self.dynamic_j[r],
                        self.idle_j[r], keys[self.key[r]])
        kept.cuts = [*moved, *(c + offset for c in cuts)]
        for name in (*_ARRAYS, "keys", "_index", "cuts"):
            setattr(self, name, getattr(kept, name))
        return removed, first / 1000, last / 1000

    def drop_oldest(self, count: int) -> tuple[int, float, float]:
        """Drop at least ``count`` oldest rows, and the rest of the last dropped tick.

        Returns how many rows went and the first and last tick ends (seconds) among them.
        """
        count = min(count, len(self))
        if count <= 0:
            return 0, 0.0, 0.0
        last = self.t_end_ms[count - 1]
        while count < len(self) and self.t_end_ms[count] == last:
            count += 1  # a tick's shares and units follow its rows: keep them together
        first = self.t_end_ms[0]
        for name in _ARRAYS:
            del getattr(self, name)[:count]
        self.cuts = [c - count for c in self.cuts if c > count]
        return count, first / 1000, last / 1000

    def params(
        self, node: str, start: int, end: int, floor_ms: int | None
    ) -> tuple[Params, Params, Params, int]:
        """Insert rows for ``[start, end)`` as tuples in :data:`TICK_COLUMNS`,
        :data:`SHARE_COLUMNS` and :data:`UNIT_COLUMNS` order: (ticks, shares, units,
        stale count). Tuples, not dicts: the writer hands them to the driver's
        ``executemany`` as they are, which halves a flush's CPU on a node with many jobs.

        Ticks go one row each. Job shares and unit counts go as **windows**: the rows
        of one key (job, component, device, source; or job and unit) are summed over
        the ticks of the range that end in the same minute, into one row from the
        first such tick's start to the window's end, the last tick of that minute any
        share (or unit count) of the range belongs to. A store row per job, component
        and tick was most of a busy node's store (benchmarks/store_growth.py); the
        sums stay exact to the joule, only their time resolution becomes the flush's,
        and since a window never crosses a minute, every minute still holds exactly
        its own ticks' shares (conservation per minute and per window: the shares of a
        window sum to the node's ticks since the previous window). A window also ends
        at a cut (:attr:`cuts`): a batch put back after a failed write comes out as it
        did then, so a retry whose first commit did reach the server collides with
        the stored rows instead of counting them twice. And a window ends where a
        device's source changes (:meth:`_source_changes`): ``job_energy`` is keyed
        without the source, so a window holding a job's ``rapl`` and ``fill:rapl`` rows
        of one device (a counter fault starting or ending inside it) would store one of
        the two and drop the other at the conflict, silently, its energy attributed to
        nobody (issue 47: 920 J in 7 windows of a 66 s run through six faults,
        tests/store/test_counter_fault_windows.py). Cut there instead, every row of a
        window still ends at one time, and each keeps its provenance.

        Rows ending at or before ``floor_ms`` (the node's totals boundary) are stale:
        the job totals already cover that time and its raw rows may be pruned, so
        writing them would count them in some figures and not in others. The boundary
        is minute-aligned, so a window is stale whole or not at all.
        """
        ticks: Params = []
        shares: Params = []
        units: Params = []
        stale = 0
        keys = self.keys
        t_end_all, t_start_all = self.t_end_ms, self.t_start_ms
        dynamic_all, idle_all, key_all = self.dynamic_j, self.idle_j, self.key
        cuts = {c for c in self.cuts if start < c < end}
        window_shares: dict[int, list[float]] = {}  # key index -> [t_start, dyn, idle]
        window_units: dict[int, float] = {}
        seen: set[tuple[int, int]] = set()  # (key, tick): a repeated row counts once
        # (component, device) -> the source of its shares in the open window, and per key
        # index the (component, device) of a share key (None for other keys).
        sources: dict[tuple[str, str], str] = {}
        devices = [(key[2], key[3]) if key[0] == SHARE else None for key in keys]
        share_end = unit_end = 0
        cell: int | None = None
        tick_end: int | None = None  # the tick whose rows are being read

        def close() -> None:
            for index, (t_start, dynamic_j, idle_j) in window_shares.items():
                _kind, job, component, device, source = keys[index]
                shares.append((job, node, share_end, component, device, int(t_start),
                               dynamic_j, idle_j, source))
            for index, count in window_units.items():
                units.append((keys[index][1], node, unit_end, keys[index][2], count))
            window_shares.clear()
            window_units.clear()
            seen.clear()
            sources.clear()

        for i in range(start, end):
            t_end_ms = t_end_all[i]
            row_cell = (t_end_ms - 1) // MINUTE_MS
            if row_cell != cell or i in cuts:
                close()
                cell, share_end, unit_end = row_cell, 0, 0
            if floor_ms is not None and t_end_ms <= floor_ms:
                stale += 1
                continue
            if t_end_ms != tick_end:  # a tick's first row: its shares all go, or none
                tick_end = t_end_ms
                if sources and self._source_changes(i, end, window_shares, devices, sources):
                    close()
                    share_end = unit_end = 0
            index = key_all[i]
            kind = keys[index][0]
            if kind == TICK:
                _kind, _job, component, device, source = keys[index]
                ticks.append((node, t_end_ms, component, device, t_start_all[i],
                              dynamic_all[i], source))
            elif (index, t_end_ms) in seen:
                continue  # the same share or count again (a retried add): stored once
            elif kind == SHARE:
                seen.add((index, t_end_ms))
                share_end = max(share_end, t_end_ms)
                total = window_shares.get(index)
                if total is None:  # a key new to the window: its device's source
                    slot = devices[index]
                    if slot is not None:
                        sources[slot] = keys[index][4]
                    window_shares[index] = [t_start_all[i], dynamic_all[i], idle_all[i]]
                else:
                    total[0] = min(total[0], t_start_all[i])
                    total[1] += dynamic_all[i]
                    total[2] += idle_all[i]
            else:
                seen.add((index, t_end_ms))
                unit_end = max(unit_end, t_end_ms)
                window_units[index] = window_units.get(index, 0.0) + dynamic_all[i]
        close()
        return ticks, shares, units, stale

    def _source_changes(self, i: int, end: int, window: Mapping[int, object],
                        devices: Sequence[tuple[str, str] | None],
                        sources: Mapping[tuple[str, str], str]) -> bool:
        """Whether the tick whose rows start at ``i`` has a share of a device whose
        source differs from that device's shares earlier in the open window
        (``sources``): a counter fault's fill starting or ending. Read ahead over the
        tick's rows before any is summed, so the window is cut between two ticks, never
        inside one. Only a key new to the window (not in ``window``) can bring another
        source, as the window never holds two of one device: a row of a key already
        there (a repeated row too) costs one lookup. On the store thread, at flush: the
        tick path does not see it."""
        t_end_all, key_all, keys = self.t_end_ms, self.key, self.keys
        t_end_ms = t_end_all[i]
        while i < end and t_end_all[i] == t_end_ms:
            index = key_all[i]
            i += 1
            if index in window:
                continue
            slot = devices[index]
            if slot is not None:
                known = sources.get(slot)
                if known is not None and known != keys[index][4]:
                    return True
        return False


def tick_key(component: str, device: str, source: str) -> Key:
    return (TICK, "", component, device, source)


def share_key(job: str | None, component: str, device: str, source: str) -> Key:
    """The key of an attribution share; ``job=None`` is the unattributed part."""
    return (SHARE, UNATTRIBUTED if job is None else job, component, device, source)


def unit_key(job: str, unit: str) -> Key:
    return (UNIT, job, unit, "", "")


# -- The SQL of a node's writer --------------------------------------------------------

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
    """``batch`` (ticks, and job windows: :meth:`RowBuffer.params`) in statements of at
    most ``max_batch_rows`` rows each: (rows written, stale rows skipped).
    Without ``ticks_allowed`` (another process writes this node's ticks) only the jobs'
    own rows go: no tick and no unattributed remainder."""
    ticks, shares, units, stale = batch.params(node, 0, len(batch), floor_ms)
    if not ticks_allowed:
        ticks = []
        shares = [share for share in shares if share[0] != UNATTRIBUTED]
    for statement, rows in zip(statements.sql, (ticks, shares, units), strict=True):
        for start in range(0, len(rows), max_batch_rows):
            params = rows[start:start + max_batch_rows]
            if statements.columnar:
                columns = tuple(list(column) for column in zip(*params, strict=True))
                connection.exec_driver_sql(statement, columns)
            else:
                connection.exec_driver_sql(statement, params)
    return len(ticks) + len(shares) + len(units), stale


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


# -- Job metadata and the agent's checkpoint on their way to the store -----------------

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

    def save_job(self, job: JobRecord, node: NodeInfo) -> None:
        """``job``'s rows as ``node`` sees it; a later save of the same id replaces them."""
        self.jobs[job.id] = (
            {"id": job.id, "name": job.name, "kind": job.kind,
             "labels": json.dumps(dict(job.labels), sort_keys=True), "origin": job.origin,
             "created_s": float(job.started_s), "ended_s": job.ended_s,
             "status": job.status,
             "agent_labels": json.dumps(dict(job.agent_labels), sort_keys=True)},
            {"job_id": job.id, "node": node.node,
             "instance_type": job.instance_type or node.instance_type,
             "region": node.region, "started_s": float(job.started_s),
             "ended_s": job.ended_s, "pids": json.dumps(sorted(job.pids)),
             "latency": json.dumps(job.latency, sort_keys=True) if job.latency else None,
             "serving_trace": (json.dumps(trace_to_json(job.serving_trace),
                                          separators=(",", ":"))
                               if job.serving_trace is not None else None)},
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
        connection.execute(_checkpoint_upsert(insert), {"node": node, **checkpoint})


# Per dialect's insert(): the checkpoint's upsert, the same statement every flush.
_CHECKPOINT_UPSERTS: dict[Any, Any] = {}


def _checkpoint_upsert(insert: Any) -> Any:
    """The checkpoint's upsert, built once per dialect: its values go as parameters, not
    ``.values(...)`` literals, so it compiles once and is cached (literal coercion of
    the state text cost ~1 ms a flush); building it again each flush (its ``excluded``
    columns) cost another 0.1 ms for the same statement. Statements are immutable, so
    every writer and thread shares it."""
    statement = _CHECKPOINT_UPSERTS.get(insert)
    if statement is None:
        statement = insert(NODE_CHECKPOINTS)
        statement = statement.on_conflict_do_update(
            index_elements=["node"],
            set_={name: statement.excluded[name] for name in ("saved_s", "boot_id", "state")},
        )
        _CHECKPOINT_UPSERTS[insert] = statement
    return statement


def _encoded(checkpoint: dict[str, Any] | None) -> dict[str, Any] | None:
    if checkpoint is None or isinstance(checkpoint["state"], str):
        return checkpoint
    try:
        state = json.dumps(checkpoint["state"], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        log.error("checkpoint cannot be stored as JSON (%s); skipping it", exc)
        return None
    return {**checkpoint, "state": state}


def _merged_agent_labels(dialect: str) -> Any:
    """The stored and the new agent labels merged key by key, an ``idle_policy`` that
    differs between them made ``mixed`` (and kept so: ``mixed`` differs from any policy
    a node reports); :func:`joulestat.attribution.agent_labels.merge_agent_labels` in SQL."""
    key, mixed = f"'{IDLE_POLICY}'", f"'{MIXED}'"
    if dialect == "postgresql":
        old, new = "jobs.agent_labels::jsonb", "excluded.agent_labels::jsonb"
        return literal_column(
            f"CASE WHEN ({old} ->> {key}) <> ({new} ->> {key}) "
            f"THEN ({old} || {new} || jsonb_build_object({key}, {mixed}))::text "
            f"ELSE ({old} || {new})::text END")
    old, new = "jobs.agent_labels", "excluded.agent_labels"
    path = f"'$.{IDLE_POLICY}'"
    return literal_column(
        f"CASE WHEN json_extract({old}, {path}) <> json_extract({new}, {path}) "
        f"THEN json_set(json_patch({old}, {new}), {path}, {mixed}) "
        f"ELSE json_patch({old}, {new}) END")


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
            "agent_labels": _merged_agent_labels(dialect),
            "created_s": case((excluded.created_s < JOBS.c.created_s, excluded.created_s),
                              else_=JOBS.c.created_s),
        },
    )


def _job_nodes_upsert(insert: Any) -> Any:
    statement = insert(JOB_NODES)
    return statement.on_conflict_do_update(
        index_elements=["job_id", "node"],
        set_={name: statement.excluded[name] for name in (
            "instance_type", "region", "started_s", "ended_s", "pids", "latency",
            "serving_trace")},
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
