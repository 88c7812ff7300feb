"""Is a difference real? The one rule by which a comparison row's energy is judged
against its baseline's (docs/methodology.md, "Is a difference real?").

A question about two figures' **ratio**, whose uncertainty splits into what the two
share and what they do not (the GUM's correlated inputs, JCGM 100:2008 5.2): a
systematic error of the same sources on the same instance types scales both figures
alike and cancels in the ratio (correlation 1); bounds of different sources, models or
hardware do not, and widen the ratio to its extremes (``low_a / high_b`` to
``high_a / low_b``). Across runs, each row's relative standard error (spread / mean /
sqrt(runs)) adds in quadrature, times Student's t at the Welch-Satterthwaite degrees of
freedom (JCGM 100:2008 G.4) for 95 %. A row of one run has no spread: its difference is
judged on unshared bounds alone, and with shared ones it cannot be judged.

:mod:`joulestat.reports.compare.table` says what of a row is judged (:class:`Judged`)
and asks :func:`difference`; the CLI, the JSON, the reports and the Compare page read
its answer from the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# Two-sided 95 % quantiles of Student's t by degrees of freedom; past the table, the
# next smaller key's (a wider interval), and 1.96 past 120.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
        16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
        40: 2.021, 60: 2.000, 120: 1.980}


def t95(dof: float) -> float:
    """Student's t for a two-sided 95 % interval at ``dof`` degrees of freedom,
    rounded down to a tabulated one (GUM G.4.1: truncate the effective degrees of
    freedom), so never narrower than the exact quantile."""
    if dof > max(_T95):
        return 1.960
    return _T95[max(k for k in _T95 if k <= max(1.0, dof))]


@dataclass(frozen=True, slots=True)
class Judged:
    """What is judged of one row: its figure (energy per unit, or per run) with its
    bounds (None: unknown), its runs' count, mean and spread (None with one run), and
    where its energy comes from (sources and instance types)."""

    figure: float | None
    bounds: tuple[float, float] | None
    runs: int
    runs_mean: float | None
    runs_spread: float | None
    sources: tuple[str, ...]
    instance_types: tuple[str, ...]

    def relative_se(self) -> tuple[float, int] | None:
        """The relative standard error of the mean over the runs and its degrees of
        freedom; None with one run."""
        if self.runs_spread is None or not self.runs_mean or self.runs < 2:
            return None
        return self.runs_spread / self.runs_mean / math.sqrt(self.runs), self.runs - 1


@dataclass(frozen=True, slots=True)
class Difference:
    """A row's figure against the baseline's, as a ratio (1.0 the same) with the 95 %
    interval of that ratio (see the module's docstring). ``shared``: both rows' energy
    comes from the same sources on the same instance types, whose error cancels in the
    ratio; ``one_run``: a row of one run, whose spread across runs is unknown."""

    ratio: float
    interval: tuple[float, float] | None  # None: cannot say
    shared: bool
    one_run: bool

    @property
    def real(self) -> bool | None:
        """Whether the interval leaves out "no difference" (a ratio of 1); None when
        there is no interval."""
        if self.interval is None:
            return None
        return self.interval[0] > 1.0 or self.interval[1] < 1.0

    @property
    def pct_interval(self) -> tuple[float, float] | None:
        """The interval as a change in percent, ``(-55.0, -43.0)``."""
        if self.interval is None:
            return None
        return (self.interval[0] - 1.0) * 100.0, (self.interval[1] - 1.0) * 100.0

    def scaled(self, factor: float) -> Difference:
        """The difference of a figure ``factor`` times this one's ratio (CO2e: energy
        times each row's known CO2e per joule)."""
        interval = (None if self.interval is None
                    else (self.interval[0] * factor, self.interval[1] * factor))
        return replace(self, ratio=self.ratio * factor, interval=interval)


def difference(mine: Judged, theirs: Judged) -> Difference | None:
    """``mine`` against ``theirs`` by the rule of the module's docstring; None where a
    figure is unknown, 0 or negative."""
    if not mine.figure or not theirs.figure or mine.figure < 0 or theirs.figure < 0:
        return None
    ratio = mine.figure / theirs.figure
    shared = bool(mine.sources) and (mine.sources, mine.instance_types) == (
        theirs.sources, theirs.instance_types)
    low, high = ratio, ratio
    bounded = mine.bounds is not None and theirs.bounds is not None
    if bounded and not shared and theirs.bounds[0] > 0:
        low, high = mine.bounds[0] / theirs.bounds[1], mine.bounds[1] / theirs.bounds[0]
    errors = [e for e in (mine.relative_se(), theirs.relative_se()) if e is not None]
    if len(errors) < 2:
        if shared or not bounded:
            return Difference(ratio, None, shared, True)
        return Difference(ratio, (low, high), shared, True)
    u = math.sqrt(sum(e * e for e, _dof in errors))
    dof = (u ** 4 / sum(e ** 4 / dof for e, dof in errors)) if u > 0 else math.inf
    widen = math.exp(t95(dof) * u)
    return Difference(ratio, (low / widen, high * widen), shared, False)
