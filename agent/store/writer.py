"""The agent's SQL writer: batched, idempotent, patient when the database is away.

Costs on the agent's hot path: :meth:`StoreWriter.add` and :meth:`~StoreWriter.add_shares`
append a tick's numbers and its job shares to parallel ``array`` columns (about 36
bytes a row, no SQL, no dicts; see :class:`joulestat.store.rows.RowBuffer`) in the
:class:`RowQueue`, under one lock (a few microseconds a tick); every ``flush_interval_s``
the store thread takes everything at once and writes it in ONE transaction: tick rows
(one a tick and device) and job shares and unit counts summed into one row a key per
flush window and minute (:meth:`joulestat.store.rows.RowBuffer.params`) as ``INSERT …
ON CONFLICT DO NOTHING`` (keyed on ``(node, t_end_ms, component, device)``, plus
``job_id`` for shares), job metadata and the checkpoint as upserts
(:mod:`joulestat.store.rows`). A tick written twice (a retried
batch whose commit did reach the server) is stored once, and a crash never leaves job
rows without their tick.

The queue is bounded: over ``max_rows`` the job shares of the oldest ticks are folded
into their unattributed rows first (who used the energy is lost, how much is not), and
only a queue of node ticks alone drops its oldest ticks, each time with an error saying
what went and why.

While the database does not take its writes,
:class:`joulestat.store.durability.Outage` keeps the outage's state
and policy in one place: how many writes failed in a row and how long to wait before the
next full write (doubling, up to a minute), a cheap probe of the store every
``RECONNECT_EVERY_S`` (2 s) meanwhile so the rows go in within a few seconds of its
return (the doubling alone left an agent away 15 s and more), where a refused batch
waits (the spool when the agent has one, so a restart keeps it:
:class:`joulestat.store.durability.Spool`; else back at the front of the memory queue),
replaying the spool oldest first once the store answers, warnings at most once a minute,
and what a shutdown during an outage says is kept or lost. A spool that cannot write
(disk full) is said once and counted (``spool_write_failures``); its batches then wait
in memory under the queue's bound. Nothing recorded is lost silently.

An agent whose store did not answer at start-up (:class:`joulestat.store.access.StoreWait`)
starts in that outage state, so it measures meanwhile; its probe is then the start's
look at the store (schema, node row, lease), and ``after_open`` runs once the spool is
written back. A store that can never take the rows (another revision, no answer within
``--db-wait``, another live writer of the node) sets :attr:`StoreWriter.fatal`, and the
agent stops with that message.

The writer is a sink of the pipeline (:mod:`joulestat.pipeline.sink`): it stores ticks,
so it receives each tick's checkpoint and reports finished jobs final once stored. It
holds job records (:class:`joulestat.core.records.JobRecord`, snapshots) and job ids,
never the registry's live jobs: finality goes back by id through ``on_final``, the
callback of whoever owns those jobs (the runtime passes the registry's ``mark_final``).
:meth:`StoreWriter.maintain` rolls raw rows up into minutes, adds settled rows to the
job totals and prunes raw rows past the retention (:mod:`joulestat.store.maintenance`);
rows ending at or before the totals boundary (a clock stepped back) are dropped with an
error, never half counted.

This module uses Core table clauses rather than the ORM models (the ORM costs the agent
about 6 MiB of RSS); ``test_core_tables_match_models`` keeps them in step. One writer
per node (:class:`joulestat.store.durability.NodeLease`): two agents writing the same
node name would race on the rollups.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from joulestat.core.errors import ConfigError
from joulestat.core.records import DeviceInfo, NodeInfo
from joulestat.core.tick import Tick
from joulestat.store.access import StoreAway, StoreWait
from joulestat.store.durability import RECONNECT_EVERY_S, NodeLease, NodeLeaseError, Outage, Spool
from joulestat.store.engine import StoreError, describe_error, dialect_insert, redact_url
from joulestat.store.maintenance import MaintainResult, PartitionKeeper, maintain_node
from joulestat.store.row_queue import RowQueue
from joulestat.store.rows import (
    PendingJobs,
    RowBuffer,
    insert_rows,
    insert_statements,
    upsert_node,
    write_pending,
)
from joulestat.store.schema import (
    MINUTE_MS,
    NODES,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import TickResult
    from joulestat.core.records import JobRecord, Share
    from joulestat.core.tick import Tick
    from joulestat.pipeline.sink import TickRecord

log = logging.getLogger(__name__)

__all__ = ["StoreSettings", "StoreWriter"]


# -- The agent's SQL writer: batched, idempotent, patient when the database is away ----


# The agent's whole RSS budget is 50 MiB, so the outage buffer is sized in memory, not
# time: ~36 bytes a row, 200k rows ~7 MiB, i.e. 14 h of 1 s ticks with four entries
# and no jobs; each running job adds a share row per entry (and a row per unit it
# counts), so two jobs cut that to about 5 h. Pass more where memory allows.
DEFAULT_MAX_BUFFERED_ROWS = 200_000


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """A long-running writer's store, from the options of the same names: where it is
    (``db``: None is SQLite in the user's data dir), how long to keep trying it at start,
    how often to flush, how long raw rows stay, and where and how much to spool while it
    is away (``spool_dir`` None: the data dir's ``spool/<node>``)."""

    db: str | None
    db_wait_s: float
    flush_interval_s: float
    raw_retention_s: float
    spool_dir: Path | None
    spool_max_bytes: int


class StoreWriter:
    """Buffers ticks, job shares and job metadata of one node and writes them to the store.

    The pipeline's contract: :meth:`on_tick` (or :meth:`record`) once per tick, from
    one thread; or, piece by piece, :meth:`add` each tick, then :meth:`add_shares` with
    its attribution and :meth:`add_units` with each job's unit counts for that tick (same
    thread, in that order, so a tick's rows stay side by side in the buffer);
    :meth:`save_job` and :meth:`save_checkpoint` whenever there is something to
    record; :meth:`maybe_flush` often, :meth:`maintain` about once a minute,
    :meth:`close` at exit. Only flush and maintain do SQL.

    ``on_final(job_ids)`` is told, right after the flush that committed the rows
    buffered with them (on the thread that flushed, under the writer's I/O lock), the
    ids of the finished jobs (:meth:`record`'s, :meth:`finish_jobs`') whose figures
    are now stored whole; None: nobody is told.
    """

    stores_ticks = True  # joulestat.pipeline.sink: checkpoints come with the ticks

    def __init__(
        self,
        engine: Engine,
        node: NodeInfo,
        devices: list[DeviceInfo],
        raw_retention_s: float,
        flush_interval_s: float = 5.0,
        max_batch_rows: int = 1000,
        max_buffered_rows: int = DEFAULT_MAX_BUFFERED_ROWS,
        spool: Spool | None = None,
        lease: NodeLease | None = None,
        wait: StoreWait | None = None,
        after_open: Callable[[], None] | None = None,
        on_final: Callable[[list[str]], None] | None = None,
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
        # Buffered rows that make a flush due before its interval. Not max_batch_rows: a
        # flush writes a job's shares of the whole interval as one window row
        # (RowBuffer.params), so flushing at every thousand rows (every 4 ticks with 50
        # jobs) would cut the windows, and the store's rows, to a few seconds.
        self.flush_rows = max(self.max_batch_rows, self.max_buffered_rows // 10)
        self.written_rows = 0  # counters for logs and metrics (tick, share and unit rows)
        self.stale_rows = 0  # ending at or before the settled boundary: not written
        self.flushes = 0  # successful flushes, and the seconds they took (health metrics)
        self.flush_seconds_sum = 0.0
        self.spool = spool
        self.lease = lease  # one writer per node (agent/store/durability.py); None: no check
        self._url = redact_url(engine.url)
        self._insert = dialect_insert(engine)
        # Plain SQL for the driver's executemany: the rows are tuples already, and
        # SQLAlchemy's per-row parameter processing was half a flush's CPU.
        self._statements = insert_statements(engine)
        self._io_lock = threading.Lock()  # one flush or maintain at a time
        self.queue = RowQueue(node, max_buffered_rows, self._full_cause)
        self.losses = self.queue.losses  # energy no job got: one tally, read by the metric
        if spool is not None:
            spool.losses = self.losses
        self.outage = Outage(self._url, self.queue, spool)
        self._next_flush_s: float | None = None
        self._next_probe_s = -math.inf  # while failing: when to ask if the store is back
        self._registered = False
        self._settled_until_ms: int | None = None
        # Set when a flush is wanted before the interval is up (a job just ended and
        # someone waits for its final figures); the store thread sleeps on it.
        self.wake = threading.Event()
        self.partitions = PartitionKeeper(engine.dialect.name, node.node)  # PostgreSQL's
        # A store that did not answer at start (the agent measures meanwhile): nothing
        # touches it until wait.check() says it answers at the head revision; then
        # after_open() runs once the spool is written back (the daemon restores the jobs
        # that were running before the start). Until then the writer is in its outage
        # state: rows to the spool, the store probed every RECONNECT_EVERY_S.
        self._wait = wait if wait is not None and not wait.opened else None
        self._after_open = after_open
        self._after_open_due = False
        self._on_final = on_final
        # Set when the store can never take this writer's rows (another revision, never
        # answered within --db-wait, another live writer holds the node's lease): the
        # agent stops with this message. ``_discard``: the rows measured are not to be
        # written at all (they would count the node twice beside the lease's holder).
        self.fatal: str | None = None
        self._discard = False
        self.discarded_rows = 0
        if self._wait is not None:
            self.outage.failures = 1  # store_up 0, probes every RECONNECT_EVERY_S
            return
        try:
            self._register()
        except SQLAlchemyError as exc:
            self.outage.warn(f"cannot register node {node.node!r} in the store {self._url} "
                             f"({describe_error(exc)}); will retry before the first write")

    @property
    def failing(self) -> bool:
        """True while the last write to the store failed (or it has not answered yet)."""
        return self.outage.failures > 0

    @property
    def waiting(self) -> bool:
        """True while the store has not answered since start-up."""
        return self._wait is not None and not self._wait.opened

    @property
    def spooled_rows(self) -> int:
        """Rows handed to the spool while the store was away."""
        return self.outage.spooled_rows

    @property
    def buffered_rows(self) -> int:
        """Tick, share and unit rows waiting for the database."""
        return len(self.queue)

    @property
    def spool_write_failures(self) -> int:
        """Batches the spool could not write (disk full, ...)."""
        return self.outage.spool_write_failures

    @property
    def folded_rows(self) -> int:
        """Job rows folded into unattributed because the buffer was full."""
        return self.queue.folded_rows

    @property
    def dropped_rows(self) -> int:
        """Rows lost: the buffer or the spool overflowed, or they ended before the
        settled boundary."""
        spool_dropped = self.spool.dropped_rows if self.spool is not None else 0
        return self.queue.dropped_rows + self.stale_rows + spool_dropped

    def _full_cause(self) -> str:
        return (f"the store {self._url} has been unreachable for a while" if self.failing
                else "job rows arrive faster than the store thread writes them")

    # -- hot path ---------------------------------------------------------------------

    def on_tick(self, record: TickRecord) -> None:
        """The pipeline's sink call (:mod:`joulestat.pipeline.sink`): :meth:`record` the tick."""
        self.record(record.tick, record.result, record.checkpoint)

    def record(self, tick: Tick, result: TickResult | None,
               checkpoint: tuple[Mapping[str, Any], str] | None) -> None:
        """All of one tick at once: its rows, its attribution, the units and job changes
        it saw, the jobs it finished and the checkpoint taken after it (state, boot id).

        One lock for all of it, so a flush on the store thread takes the whole tick or
        none of it: a tick is never committed with the previous tick's checkpoint (a
        restart would then cover that tick a second time).
        """
        self.queue.record(tick, result, checkpoint)
        self._report_bad_entries()
        if result is not None and result.finished_ids:
            self._next_flush_s = None
            self.wake.set()

    def add(self, tick: Tick) -> None:
        """Buffer one tick's rows. No SQL; a few microseconds."""
        self.queue.add(lambda rows: rows.append_tick(tick))
        self._report_bad_entries()

    def add_shares(self, tick: Tick, shares: list[Share]) -> None:
        """Buffer the attribution of ``tick``
        (from :func:`joulestat.attribution.shares.attribute`)."""
        self.queue.add(lambda rows: rows.append_shares(tick, shares))
        self._report_bad_entries()

    def add_units(self, job_id: str, t_end_s: float, deltas: Mapping[str, float]) -> None:
        """Buffer units of work ``job_id`` counted during the tick ending at ``t_end_s``
        (one call per job and tick; a repeat is taken for a retry and stored once)."""
        self.queue.add(lambda rows: rows.append_units(job_id, t_end_s, deltas))
        self._report_bad_entries()

    def save_job(self, job: JobRecord, node: NodeInfo | None = None) -> None:
        """Upsert ``job`` (and ``node``'s part in it, default this one) with the next
        flush; the latest save of a job before a flush is the one written."""
        self.queue.save_job(job, node)

    def save_job_now(self, job: JobRecord) -> bool:
        """Write ``job``'s row now, outside the batch: the API answers 201 only for a job
        a crash cannot lose. False (logged) when the store cannot take it yet; the row
        then goes with the next flush like any other."""
        if self.waiting:  # not answered since start-up: the probe finds it, not the API
            return False  # (whose client would wait for a store that may take seconds)
        pending = PendingJobs()
        pending.save_job(job, self.node)
        with self._io_lock:
            if self.fatal is not None:
                return False
            try:
                self._connect()
                with self.engine.begin() as connection:
                    write_pending(connection, self._insert, pending, self.node.node)
            except (SQLAlchemyError, StoreAway) as exc:
                self.outage.failed(exc, "write a new job to")
                return False
            except (ConfigError, NodeLeaseError) as exc:
                self._refuse(exc)
                return False
        return True

    def finish_jobs(self, job_ids: Iterable[str]) -> None:
        """Report ``job_ids`` final (``on_final``) once the rows buffered so far are
        stored, and ask for that flush now rather than at the next interval."""
        job_ids = list(job_ids)
        if not job_ids:
            return
        self.queue.finish(job_ids)
        self._next_flush_s = None
        self.wake.set()

    def save_checkpoint(self, state: Mapping[str, Any], boot_id: str, saved_s: float) -> None:
        """Store ``state`` (JSON-able, not mutated afterwards) as this node's checkpoint
        with the next flush; encoded then, and skipped with an error log if it cannot be."""
        self.queue.save_checkpoint(state, boot_id, saved_s)

    def maybe_flush(self, now_s: float) -> bool:
        """Flush when due (interval passed, or a full batch waits); True if rows went out.

        ``now_s`` is any steadily increasing clock; failed writes back off up to a
        minute, but meanwhile the store is probed every ``RECONNECT_EVERY_S`` and
        written as soon as it answers.
        """
        if self.fatal is not None:
            return False
        due = self._next_flush_s is None or now_s >= self._next_flush_s or (
            not self.failing and len(self.queue) >= self.flush_rows
        )
        if not due and self.failing and now_s >= self._next_probe_s:
            self._next_probe_s = now_s + RECONNECT_EVERY_S
            due = self._store_answers()
        if not due:
            return False
        had_rows = len(self.queue) > 0 or bool(self.queue.pending) or bool(self.spool)
        ok = self.flush()
        delay = self.flush_interval_s if ok else self.outage.retry_delay_s(
            self.flush_interval_s)
        self._next_flush_s = now_s + delay
        self._next_probe_s = now_s + RECONNECT_EVERY_S
        return ok and had_rows

    def due_in_s(self, now_s: float) -> float:
        """Seconds until :meth:`maybe_flush` has something to do (the store thread
        sleeps that long unless woken): the next flush, or while the store is away the
        next probe, whichever is sooner."""
        if self._next_flush_s is None:
            return 0.0
        due_s = self._next_flush_s
        if self.failing:
            due_s = min(due_s, self._next_probe_s)
        return max(0.0, due_s - now_s)

    def _store_answers(self) -> bool:
        """One connection and one small read: is the store back? No rows move.

        While the store has not answered since start-up, the look is the start's
        (schema, node row, lease: :meth:`_connect`)."""
        if self.waiting:
            with self._io_lock:
                try:
                    self._connect()
                except (SQLAlchemyError, StoreAway) as exc:
                    log.debug("store %s still away: %s", self._url, describe_error(exc))
                    return False
                except (ConfigError, NodeLeaseError) as exc:
                    self._refuse(exc)
                    return False
            return True
        try:
            with self.engine.connect() as connection:
                connection.execute(select(NODES.c.node).limit(1)).first()
        except SQLAlchemyError as exc:
            log.debug("store %s still away: %s", self._url, describe_error(exc))
            return False
        return True

    # -- writes -----------------------------------------------------------------------

    def flush(self) -> bool:
        """Write the spool (oldest first) and everything buffered; False on failure.

        On failure the batch goes to the spool when there is one (a restart keeps it),
        else back to the front of the memory buffer, to be retried.
        """
        with self._io_lock:
            if self.fatal is not None:
                return False
            batch, pending, finishing = self.queue.take()
            if not len(batch) and not pending and not self.spool:
                self._report_final(finishing)
                return True
            started = time.perf_counter()
            try:
                self._connect()
                written = stale = 0
                if self.spool:
                    written, stale = self.outage.replay(self._write_one)
                if len(batch) or pending:
                    with self.engine.begin() as connection:
                        batch_written, batch_stale = self._write(connection, batch, pending)
                    written, stale = written + batch_written, stale + batch_stale
            except (SQLAlchemyError, StoreAway) as exc:
                self.outage.keep(batch, pending, finishing)
                self.outage.failed(exc, "write ticks to")
                return False
            except (ConfigError, NodeLeaseError) as exc:
                self._refuse(exc, batch, pending, finishing)
                return False
            self.flushes += 1
            self.flush_seconds_sum += time.perf_counter() - started
            self.written_rows += written
            self._report_final(finishing)
            if stale:
                self.stale_rows += stale
                log.error("dropped %d rows ending at or before the node's settled boundary "
                          "(%s ms, already summed into job totals and rollups): was the "
                          "wall clock stepped back?", stale,
                          self._settled_until_ms)
            self.outage.recovered()
        if self._after_open_due and self._after_open is not None:
            try:
                self._after_open()
            except StoreError as exc:  # tried again after the next flush
                log.warning("%s; trying again with the next flush", exc)
            else:
                self._after_open_due = False
        return True

    def maintain(self, now_s: float) -> MaintainResult | None:
        """Roll up complete minutes and prune old raw rows; None if it could not run.

        ``now_s`` is wall-clock epoch seconds (the ticks' clock). Runs only after the
        buffer has been flushed entirely, so no minute is rolled up while some of its
        ticks still wait in memory. Idempotent: rerunning changes nothing.
        """
        if not self.flush():
            return None
        with self._io_lock:
            if self.fatal is not None:
                return None
            try:
                self._connect()
                with self.engine.begin() as connection:
                    result = maintain_node(connection, self._insert, self.node.node, now_s,
                                           self.raw_retention_s, self.partitions.active)
            except (SQLAlchemyError, StoreAway) as exc:
                self.outage.failed(exc, "maintain rollups in")
                return None
            except (ConfigError, NodeLeaseError) as exc:
                self._refuse(exc)
                return None
            self.partitions.after_maintain(self.engine, now_s, result.raw_pruned_until_ms)
        self._settled_until_ms = result.totals_until_ms
        if result.rolled_rows or result.pruned_rows or result.job_pruned_rows:
            log.debug("store: %s", result)
        return result

    def close(self) -> None:
        """Flush what is buffered and give up the node's lease; says where rows wait, or
        how many are lost, if the store is still away (or can never take them)."""
        if self.fatal is not None:
            self._close_refused()
            return
        if self.flush():
            if self.lease is not None:
                try:
                    with self.engine.begin() as connection:
                        self.lease.give_up(connection)
                except SQLAlchemyError as exc:
                    log.debug("could not give up the node's lease: %s", exc)
            return
        self.outage.report_shutdown()

    # -- internals --------------------------------------------------------------------

    def _connect(self) -> None:
        """Before a write: when the store has not answered since start-up, its look
        (:meth:`StoreWait.check`: answers, head revision, schema created when new); then,
        once, the node row and the node's lease. Raises SQLAlchemyError or
        :class:`StoreAway` (not now) or ConfigError or NodeLeaseError (never)."""
        if self._registered:
            return
        if self._wait is not None and not self._wait.opened:
            self._wait.check()
            self._after_open_due = True
        self._register()

    def _refuse(self, exc: Exception, batch: RowBuffer | None = None,
                pending: PendingJobs | None = None, finishing: list[str] | None = None
                ) -> None:
        """The store can never take this writer's rows: say why, keep or set aside what
        waits, and wake the store thread, which stops the agent (caller holds _io_lock).

        Another live writer of the node (:class:`NodeLeaseError`): what this one measured
        while it waited for the store would count the node twice, so it is not written:
        its spooled batches are renamed ``*.refused`` (kept for a person to judge, never
        replayed) and what is in memory is dropped, counted. Anything else (another
        schema revision, --db-wait over): the rows are good, so they wait in the spool
        for the next start."""
        duplicate = isinstance(exc, NodeLeaseError)
        self._discard = duplicate
        message = str(exc)
        if duplicate:
            dropped = (len(batch) if batch is not None else 0) + len(self.queue)
            self.queue.take()
            self.discarded_rows += dropped
            kept = ""
            if self.spool is not None:
                segments, rows, span = self.spool.set_aside_own()
                kept = (f"; {rows} rows it spooled ({segments} batch(es), {span}) are set "
                        f"aside as *.refused in {self.spool.directory}, never written back")
            waited = (f" (found when the store answered, {self._wait.waited_s:.0f} s after "
                      "start-up)" if self._wait is not None else "")
            message = (f"{message}{waited}. What this agent measured meanwhile is not "
                       f"written, as it would count the node twice: {dropped} rows in "
                       f"memory dropped{kept}")
        elif batch is not None and pending is not None:
            self.outage.keep(batch, pending, finishing or [])
        self.fatal = message
        log.error("%s", message)
        self.wake.set()

    def _close_refused(self) -> None:
        """close() of a refused writer: what came since goes where the refusal said."""
        batch, pending, finishing = self.queue.take()
        if self._discard:
            if len(batch):
                self.discarded_rows += len(batch)
                log.warning("dropped the %d rows of the last tick(s) too (%d in all): "
                            "another writer holds node %r", len(batch),
                            self.discarded_rows, self.node.node)
            return
        self.outage.keep(batch, pending, finishing)
        if self.spool is not None and not len(self.queue):
            log.warning("%d bytes of rows measured by this agent wait in the spool %s and "
                        "go to the store at the next start that can write them",
                        self.spool.bytes, self.spool.directory)
        elif len(self.queue):
            log.error("%d buffered rows and %d job updates are lost (no spool could take "
                      "them)", len(self.queue), len(self.queue.pending.jobs))

    def _write_one(self, batch: RowBuffer, pending: PendingJobs) -> tuple[int, int]:
        """One spooled batch in a transaction of its own."""
        with self.engine.begin() as connection:
            return self._write(connection, batch, pending)

    def _write(
        self, connection: Connection, batch: RowBuffer, pending: PendingJobs
    ) -> tuple[int, int]:
        """Everything of one flush, in the caller's transaction: (rows written, stale)."""
        node, floor_ms = self.node.node, self._settled_until_ms
        # Job metadata first: on PostgreSQL the jobs upsert takes the row locks that
        # order concurrent agents (see joulestat.store.rows).
        write_pending(connection, self._insert, pending, node)
        if self.lease is not None:
            self.lease.keep(connection, time.time())
        ticks_allowed = self.lease is None or self.lease.ticks_allowed
        return insert_rows(connection, self._statements, batch, node, floor_ms,
                           self.max_batch_rows, ticks_allowed)

    def _register(self) -> None:
        """Upsert the node row and its devices, read the settled boundary, take the
        node's lease."""
        now_s = time.time()
        with self.engine.begin() as connection:
            self._settled_until_ms = upsert_node(connection, self._insert, self.node,
                                                 self.devices, now_s)
            if self.lease is not None:
                self.lease.take(connection, now_s)
        self.partitions.start(self.engine, now_s)  # days ahead partitioned (PostgreSQL)
        self._registered = True

    def _report_final(self, job_ids: list[str]) -> None:
        """Tell the owner of the live jobs that these are stored whole (caller holds
        _io_lock, right after the commit, as the jobs' ``final`` was always set)."""
        if job_ids and self._on_final is not None:
            self._on_final(job_ids)

    def _report_bad_entries(self) -> None:
        if self.queue.bad_entries and self.outage.may_warn():
            # Not an outage, but its warnings share the outage's once-a-minute throttle.
            self.outage.warn(f"skipped {self.queue.bad_entries} non-finite tick entries, "
                             "shares or unit counts (a sampler bug?)")
            self.queue.bad_entries = 0

