"""The spread of a pool's runs, kept so that partial pools merge exactly.

A comparison row's mean and spread across runs (``runs_mean_j``, ``runs_spread_j``,
:mod:`joulestat.reports.compare.table`) are taken from a :class:`Spread`, whichever
way its runs were added up: job by job, or as the day sums the store keeps for a
fleet's settled jobs (:mod:`joulestat.store.pool_days`). In ``core`` because both
layers use it and neither may import the other's arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Spread:
    """The runs' figures of a pool as their count, mean and sum of squared deviations
    from the mean (``m2``): what their mean and sample standard deviation are taken from
    (:meth:`mean_sd`), whoever added them up. Two spreads merge exactly (Chan et al.'s
    pairwise update), so a pool read as day sums from the store
    (:mod:`joulestat.store.pool_days`, one per node, day and group) and one read job by
    job give the same mean and spread to rounding, without a sum of squares that
    cancels when the runs agree."""

    runs: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @staticmethod
    def of(values: Iterable[float]) -> Spread:
        """The spread of ``values`` (two passes: mean first, then deviations)."""
        listed = list(values)
        if not listed:
            return Spread()
        mean = sum(listed) / len(listed)
        return Spread(len(listed), mean, sum((v - mean) ** 2 for v in listed))

    @staticmethod
    def of_parts(parts: Iterable[tuple[int, float, float]]) -> Spread:
        """The spreads ``(runs, mean, m2)`` of disjoint sets of runs as one: what
        :meth:`merged` gives folded over them, in two passes (the overall mean, then
        each part's squared deviations and its mean's from it), for the 10^5 parts of
        a fleet's comparison (one per running job) without a :class:`Spread` each."""
        listed = [part for part in parts if part[0]]
        runs = sum(part[0] for part in listed)
        if not runs:
            return Spread()
        mean = sum(n * part_mean for n, part_mean, _m2 in listed) / runs
        return Spread(runs, mean, sum(m2 + n * (part_mean - mean) ** 2
                                      for n, part_mean, m2 in listed))

    def merged(self, other: Spread) -> Spread:
        """Both sets of runs as one."""
        if not other.runs:
            return self
        if not self.runs:
            return other
        runs = self.runs + other.runs
        delta = other.mean - self.mean
        return Spread(runs, self.mean + delta * other.runs / runs,
                      self.m2 + other.m2 + delta * delta * self.runs * other.runs / runs)

    def mean_sd(self) -> tuple[float | None, float | None]:
        """Mean and sample standard deviation of the runs' figures (None with one run)."""
        if not self.runs:
            return None, None
        if self.runs < 2:
            return self.mean, None
        return self.mean, math.sqrt(max(self.m2, 0.0) / (self.runs - 1))
