"""How long a job, or one node's part in it, was held: from its start to its end, or to
now while it runs.

Instance-hours (cost), embodied emissions and throughput are all charged on this time,
so every record with a start and an optional end (the store's jobs and job parts, the
dashboard's and the reports' views of them) inherits the one rule from :class:`Held`
instead of writing ``ended_s if ended_s is not None else now`` again. Here, beside the
pricing that charges for it, and in a module that imports nothing: the agent's start-up
path reads job records too.
"""

from __future__ import annotations


class Held:
    """A mixin for records with ``started_s`` and ``ended_s`` (None while running)."""

    __slots__ = ()
    started_s: float
    ended_s: float | None

    def end_s(self, now_s: float) -> float:
        """The end, or ``now_s`` while it runs."""
        return self.ended_s if self.ended_s is not None else now_s

    def held_s(self, now_s: float) -> float:
        """Seconds from the start to the end (to ``now_s`` while running); never below 0,
        so a clock a tick behind cannot charge a negative time."""
        ended_s = self.ended_s  # end_s() inlined: the Jobs page asks for every job
        return max(0.0, (now_s if ended_s is None else ended_s) - self.started_s)
