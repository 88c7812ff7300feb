"""What the store writer does while the database does not take its writes.

Split from :mod:`joulestat.store.writer`, which decides when to write; this module keeps
the outage's state and policy in one place: how many writes failed in a row and how
long to wait before the next (doubling, up to a minute), where a refused batch waits
(the spool when the agent has one, so a restart keeps it; else back at the front of
the memory queue), replaying the spool oldest first once the store answers, warnings
at most once a minute, and what a shutdown during an outage says is kept or lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.exc import SQLAlchemyError

from joulestat.store.buffer import RowBuffer
from joulestat.store.engine import describe_error
from joulestat.store.job_writer import PendingJobs
from joulestat.store.row_queue import RowQueue
from joulestat.store.spool import Spool

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.registry import Job

log = logging.getLogger("joulestat.store.writer")  # operators filter the writer's one name

MAX_RETRY_DELAY_S = 60.0
WARN_EVERY_S = 60.0


class Outage:
    """Failures in a row, throttled warnings and the spool of one node's writer."""

    def __init__(self, url: str, queue: RowQueue, spool: Spool | None) -> None:
        self.url = url  # redacted: it goes into logs
        self.queue = queue
        self.spool = spool
        self.failures = 0
        self.spooled_rows = 0  # rows handed to the spool while the store was away
        self._last_warning = -math.inf

    def retry_delay_s(self, flush_interval_s: float) -> float:
        """How long to wait after the latest failure: doubling, capped at a minute."""
        return min(MAX_RETRY_DELAY_S, flush_interval_s * 2 ** min(self.failures, 10))

    def keep(self, batch: RowBuffer, pending: PendingJobs, finishing: list[Job]) -> None:
        """A batch the store did not take: to the spool, else back into memory."""
        if self.spool is not None and (len(batch) or pending):
            try:
                self.spool.append(batch, pending)
                self.spooled_rows += len(batch)
                batch, pending = RowBuffer(), PendingJobs()
            except OSError as exc:
                log.error("cannot spool %d rows to %s (%s); keeping them in memory",
                          len(batch), self.spool.directory, exc)
        self.queue.put_back(batch, pending, finishing)

    def replay(self, write: Callable[[RowBuffer, PendingJobs], tuple[int, int]]
               ) -> tuple[int, int]:
        """Spooled batches into the store, oldest first, each through ``write`` (one
        transaction, returning rows written and stale); a segment is deleted only once
        its transaction committed."""
        assert self.spool is not None
        written = stale = replayed = 0
        for segment, batch, pending in self.spool.replay():
            seg_written, seg_stale = write(batch, pending)
            self.spool.done(segment)
            written, stale, replayed = written + seg_written, stale + seg_stale, replayed + 1
        if replayed:
            log.info("store %s: wrote %d spooled batch(es) (%d rows) back", self.url,
                     replayed, written)
        return written, stale

    def failed(self, exc: SQLAlchemyError, action: str) -> None:
        self.failures += 1
        if self.failures == 1 or self.may_warn():
            kept = f"keeping {len(self.queue)} rows in memory"
            if self.spool is not None:
                kept += f" and {self.spool.bytes} bytes in the spool {self.spool.directory}"
            self.warn(f"cannot {action} the store {self.url} ({describe_error(exc)}); "
                      f"{kept} and retrying (attempt {self.failures})")

    def recovered(self) -> None:
        if self.failures:
            log.info("store %s reachable again after %d failed attempt(s)",
                     self.url, self.failures)
            self.failures = 0

    def report_shutdown(self) -> None:
        """The store is still away at exit: say where rows wait, or how many are lost."""
        if self.spool is not None and not len(self.queue):
            log.warning("store %s unreachable at shutdown: %d bytes of rows wait in the "
                        "spool %s and go to the store at the next start", self.url,
                        self.spool.bytes, self.spool.directory)
            return
        log.error("store %s unreachable at shutdown: %d buffered rows and %d job "
                  "updates are lost", self.url, len(self.queue), len(self.queue.pending.jobs))

    def may_warn(self) -> bool:
        return time.monotonic() - self._last_warning >= WARN_EVERY_S

    def warn(self, message: str) -> None:
        self._last_warning = time.monotonic()
        log.warning("%s", message)
