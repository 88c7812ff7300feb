"""What waits in memory for the node's next store write, under one lock.

The tick loop adds to it (no SQL, a few microseconds a tick); the store thread takes
everything at once and puts back what the store refused. Split from
:mod:`joulestat.store.writer`, which decides when and where that goes (store, spool,
retries). The bound lives here: over ``max_rows`` the job shares of the oldest ticks
are folded into their unattributed rows first (who used the energy is lost, how much
is not), and only a queue of node ticks alone drops its oldest ticks, each time with
an error saying what went and why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from joulestat.host.identity import NodeInfo
from joulestat.store.buffer import RowBuffer
from joulestat.store.job_writer import PendingJobs

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import TickResult
    from joulestat.attribution.registry import Job
    from joulestat.core.tick import Tick

log = logging.getLogger("joulestat.store.writer")  # operators filter the writer's one name


class RowQueue:
    """Rows, job metadata, a checkpoint and jobs to mark final, waiting for a flush.

    ``cause()`` says why the queue filled, for the error when it does.
    """

    def __init__(self, node: NodeInfo, max_rows: int, cause: Callable[[], str]) -> None:
        self.node, self.max_rows, self._cause = node, int(max_rows), cause
        self.lock = threading.Lock()
        self.rows = RowBuffer()
        self.pending = PendingJobs()
        self.finishing: list[Job] = []  # ended jobs: final once their last tick is stored
        self.bad_entries = 0  # non-finite numbers skipped since the writer last said so
        self.folded_rows = 0
        self.dropped_rows = 0

    def __len__(self) -> int:
        return len(self.rows)

    def record(self, tick: Tick, result: TickResult | None,
               checkpoint: tuple[Mapping[str, Any], str] | None) -> None:
        """A whole tick under one lock (see StoreWriter.record)."""
        with self.lock:
            self.bad_entries += self.rows.append_tick(tick)
            if result is not None:
                self.bad_entries += self.rows.append_shares(tick, result.shares)
                for job_id, deltas in result.units.items():
                    self.bad_entries += self.rows.append_units(job_id, tick.t1_s, deltas)
                for job in result.changed_jobs:
                    self.pending.save_job(job, self.node)
                self.finishing.extend(result.finished_jobs)
            if checkpoint is not None:
                self.pending.save_checkpoint(checkpoint[0], checkpoint[1], tick.t1_s)
            self._bound_locked()

    def add(self, append: Callable[[RowBuffer], int]) -> None:
        """Rows one ``append`` call on the buffer makes (it returns the bad count)."""
        with self.lock:
            self.bad_entries += append(self.rows)
            self._bound_locked()

    def save_job(self, job: Job, node: NodeInfo | None = None) -> None:
        with self.lock:
            self.pending.save_job(job, node or self.node)

    def save_checkpoint(self, state: Mapping[str, Any], boot_id: str, saved_s: float) -> None:
        with self.lock:
            self.pending.save_checkpoint(state, boot_id, saved_s)

    def finish(self, jobs: list[Job]) -> None:
        with self.lock:
            self.finishing.extend(jobs)

    def take(self) -> tuple[RowBuffer, PendingJobs, list[Job]]:
        """Everything waiting, leaving the queue empty."""
        with self.lock:
            taken = self.rows, self.pending, self.finishing
            self.rows, self.pending, self.finishing = RowBuffer(), PendingJobs(), []
        return taken

    def put_back(self, batch: RowBuffer, pending: PendingJobs, finishing: list[Job]) -> None:
        """What the store did not take, in front of what came since."""
        with self.lock:
            self.rows.prepend(batch)
            self.pending.merge_back(pending)
            self.finishing[:0] = finishing
            self._bound_locked()

    def _bound_locked(self) -> None:
        """Over the bound: make room for 10 % more (so this is not per tick)."""
        rows = self.rows
        if len(rows) <= self.max_rows:
            return
        count = len(rows) - self.max_rows + self.max_rows // 10
        cause = self._cause()
        folded, first_s, last_s = rows.fold_jobs(count)
        if folded:
            self.folded_rows += folded
            log.error(
                "row buffer full (%d rows; %s): folded the job shares of the ticks ending "
                "%.3f..%.3f into their unattributed rows and dropped their unit counts "
                "(%d rows); node energy is kept whole; %d job rows folded in total",
                self.max_rows, cause, first_s, last_s, folded, self.folded_rows)
            count -= folded
        if count <= 0 or len(rows) <= self.max_rows:
            return
        count, first_s, last_s = rows.drop_oldest(count)
        self.dropped_rows += count
        log.error(
            "row buffer full (%d rows of node ticks alone; %s): dropped the %d oldest "
            "rows (ticks ending %.3f..%.3f); %d dropped in total",
            self.max_rows, cause, count, first_s, last_s, self.dropped_rows,
        )

