"""What waits in memory for the node's next store write, under one lock.

The tick thread adds each tick's rows, job metadata and checkpoint here; the store
thread takes them all at a flush. Its own concept apart from the rows themselves
(:mod:`joulestat.store.rows`, how a batch is laid out and written): the bound. When the
store and the spool are both away too long the queue makes room, first by folding
jobs' shares into their ticks' unattributed rows (the node's energy kept), then by
dropping the oldest ticks whole; each says what it cost in joules and counts it
(:mod:`joulestat.core.losses`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from joulestat.core.losses import EnergyLosses, LossReason
from joulestat.store.rows import PendingJobs, RowBuffer

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import TickResult
    from joulestat.core.records import JobRecord, NodeInfo
    from joulestat.core.tick import Tick

log = logging.getLogger(__name__)


class RowQueue:
    """Rows, job metadata, a checkpoint and the ids of jobs to report final, waiting for
    a flush.

    ``cause()`` says why the queue filled, for the error when it does.
    """

    def __init__(self, node: NodeInfo, max_rows: int, cause: Callable[[], str]) -> None:
        self.node, self.max_rows, self._cause = node, int(max_rows), cause
        self.lock = threading.Lock()
        self.rows = RowBuffer()
        self.pending = PendingJobs()
        # Ids of ended jobs: reported final once the rows buffered with them are stored.
        self.finishing: list[str] = []
        self.bad_entries = 0  # non-finite numbers skipped since the writer last said so
        self.folded_rows = 0
        self.dropped_rows = 0
        self.said_dropping = False  # the drop error is said once until a write succeeds
        self.losses = EnergyLosses()  # the writer's, shared with its spool and pipeline

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
                self.finishing.extend(result.finished_ids)
            if checkpoint is not None:
                self.pending.save_checkpoint(checkpoint[0], checkpoint[1], tick.t1_s)
            self._bound_locked()

    def add(self, append: Callable[[RowBuffer], int]) -> None:
        """Rows one ``append`` call on the buffer makes (it returns the bad count)."""
        with self.lock:
            self.bad_entries += append(self.rows)
            self._bound_locked()

    def save_job(self, job: JobRecord, node: NodeInfo | None = None) -> None:
        with self.lock:
            self.pending.save_job(job, node or self.node)

    def save_checkpoint(self, state: Mapping[str, Any], boot_id: str, saved_s: float) -> None:
        with self.lock:
            self.pending.save_checkpoint(state, boot_id, saved_s)

    def finish(self, job_ids: Iterable[str]) -> None:
        with self.lock:
            self.finishing.extend(job_ids)

    def take(self) -> tuple[RowBuffer, PendingJobs, list[str]]:
        """Everything waiting, leaving the queue empty."""
        with self.lock:
            taken = self.rows, self.pending, self.finishing
            self.rows, self.pending, self.finishing = RowBuffer(), PendingJobs(), []
        return taken

    def put_back(self, batch: RowBuffer, pending: PendingJobs, finishing: list[str]) -> None:
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
        node_before, jobs_before, seconds_before = rows.energy_j()
        folded, first_s, last_s = rows.fold_jobs(count)
        if folded:
            self.folded_rows += folded
            jobs_lost = jobs_before - rows.energy_j()[1]
            self.losses.add(LossReason.BUFFER_FOLDED, jobs_lost, last_s - first_s)
            log.warning("%.1f J of jobs' energy over %.1f s went to unattributed: the row "
                        "buffer was full", jobs_lost, last_s - first_s)
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
        node_after, _jobs, seconds_after = rows.energy_j()
        node_lost = node_before - node_after
        self.losses.add(LossReason.BUFFER_DROPPED, node_lost, seconds_before - seconds_after)
        log.warning("%.1f J of the node's energy over %.1f s dropped unstored (its jobs' "
                    "shares with it): the row buffer was full", node_lost,
                    seconds_before - seconds_after)
        level = logging.DEBUG if self.said_dropping else logging.ERROR
        self.said_dropping = True
        log.log(level,
            "row buffer full (%d rows of node ticks alone; %s): dropped the %d oldest "
            "rows (ticks ending %.3f..%.3f); %d dropped in total (said once until the "
            "store takes rows again)",
            self.max_rows, cause, count, first_s, last_s, self.dropped_rows,
        )
