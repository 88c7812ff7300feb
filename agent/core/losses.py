"""Energy no job was given beyond a tick's own unattributed share: counted, and said.

Why a module of its own: the ways a job's joules can go missing sit in three layers
(a gap no tick covered, in the pipeline; jobs restored only once their store answered,
in the runtime; batches a full spool dropped, in the store), and the rule for each is
the same (issue 47): the agent says it at WARNING with the amount in joules and
seconds, and counts it in one metric, ``joulestat_agent_lost_energy_joules_total``
by reason, so a dashboard can alert on it and a report's reader can be told.
"""

from __future__ import annotations

import threading
from enum import Enum


class LossReason(Enum):
    """Why energy did not reach the jobs it belonged to."""

    # No tick covers the time since the last checkpoint (another boot, or older than
    # the counters can be trusted): estimated at the node's learned idle power, a floor.
    UNMEASURED_GAP = "unmeasured_gap"
    # Measured, but the jobs running before a restart were restored only once the store
    # answered: the node's energy until then is unattributed.
    JOBS_RESTORED_LATE = "jobs_restored_late"
    # Measured and attributed, then dropped from a full spool before the store took it.
    SPOOL_DROPPED = "spool_dropped"
    # The row buffer overflowed (store and spool both away): jobs' shares folded into
    # unattributed (the node's energy kept), then rows dropped (the node's lost too).
    BUFFER_FOLDED = "buffer_folded"
    BUFFER_DROPPED = "buffer_dropped"


class EnergyLosses:
    """Joules and seconds lost, by reason; thread-safe (the store thread, the tick
    thread and a scrape read and write it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joules = dict.fromkeys(LossReason, 0.0)
        self._seconds = dict.fromkeys(LossReason, 0.0)

    def add(self, reason: LossReason, joules: float, seconds: float) -> None:
        with self._lock:
            self._joules[reason] += max(0.0, joules)
            self._seconds[reason] += max(0.0, seconds)

    def joules(self) -> dict[LossReason, float]:
        with self._lock:
            return dict(self._joules)

    def seconds(self) -> dict[LossReason, float]:
        with self._lock:
            return dict(self._seconds)


__all__ = ["EnergyLosses", "LossReason"]
