"""Power and work over time for a report, in a bounded number of equal bins.

A week-long job has 600 000 one-second ticks per component; a chart needs a hundred
points. Rows are spread over equal bins by the share of their time that falls in each
bin, so a minute rollup or an imported stretch becomes a flat run at its true average
power instead of a spike at its end, and the energy under the curve equals the job's
energy. The last bin ends at the job's end: when the job is shorter than
``MAX_POINTS`` bins of :data:`MIN_BIN_S`, that bin is partial and its power is its
energy over the time it covers, not over a full bin, so a job of constant power draws a
flat line to its end.

The same bins, per node and with dynamic and idle apart (:func:`node_series`), and the
units counted per bin (:func:`unit_series`), go into the JSON report so that
``joulestat import`` can store the job's profile, and a report of the imported job
gives the same series back.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from joulestat.core.tick import Component

MAX_POINTS = 120
MIN_BIN_S = 1.0
COMPONENT_ORDER = (Component.CPU, Component.DRAM, Component.ACCELERATOR, Component.NET)
# (node, t_start_s, t_end_s, component, dynamic_j, idle_j)
EnergyRow = tuple[str, float, float, str, float, float]
# (node, t_end_s, unit, count)
UnitRow = tuple[str, float, str, float]


def component_sort_key(component: str) -> tuple[int, str]:
    """cpu, dram, accelerator, net first, in that order, then the rest by name."""
    if component in COMPONENT_ORDER:
        return (COMPONENT_ORDER.index(component), component)
    return (len(COMPONENT_ORDER), component)


@dataclass(frozen=True, slots=True)
class Bins:
    """``count`` bins of ``width`` seconds from ``low``; the last one ends at ``high``."""

    low: float
    high: float
    width: float
    count: int

    def start(self, index: int) -> float:
        return self.low + index * self.width

    def end(self, index: int) -> float:
        return min(self.low + (index + 1) * self.width, self.high)


def bins_for(start_s: float, end_s: float, rows: Iterable[EnergyRow],
             max_points: int = MAX_POINTS) -> Bins:
    """The bins of a job from ``start_s`` to ``end_s`` (widened to rows outside it)."""
    rows = list(rows)
    # Edges on whole milliseconds, as the store keeps times: a report's bins imported
    # as rows and reported again fall on the same bins.
    low = math.floor(min([start_s, *(r[1] for r in rows)]) * 1000) / 1000
    high = math.ceil(max([end_s, *(r[2] for r in rows)]) * 1000) / 1000
    width = max(math.ceil((high - low) / max_points * 1000) / 1000, MIN_BIN_S)
    # A sliver under a thousandth of a bin joins the last bin: float rounding of epoch
    # seconds must not make a bin of microseconds whose power is noise over nothing.
    count = max(1, math.ceil((high - low) / width - 1e-3))
    return Bins(low, high if high > low else low + width, width, count)


def _spread(rows: Iterable[EnergyRow], bins: Bins
            ) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(node, component) -> bin -> [dynamic_j, idle_j], each row spread over the bins
    by the share of its time inside each."""
    found: defaultdict[tuple[str, str], dict[int, list[float]]] = defaultdict(dict)

    def bin_of(t_s: float) -> int:
        return min(bins.count - 1, max(0, int((t_s - bins.low) / bins.width)))

    for node, t0, t1, component, dynamic_j, idle_j in rows:
        per_bin = found[(node, component)]
        if t1 <= t0:
            cell = per_bin.setdefault(bin_of(t1), [0.0, 0.0])
            cell[0] += dynamic_j
            cell[1] += idle_j
            continue
        first, last = bin_of(t0 + 0.001), bin_of(t1 - 0.001)
        if first == last:  # inside one bin (to the store's millisecond): all of it, so
            cell = per_bin.setdefault(first, [0.0, 0.0])  # an imported bin stays exact
            cell[0] += dynamic_j
            cell[1] += idle_j
            continue
        for index in range(bin_of(t0), bin_of(t1 - 1e-9) + 1):
            # the first and last bins take what lies beyond them: nothing is lost
            b0 = -math.inf if index == 0 else bins.start(index)
            b1 = math.inf if index == bins.count - 1 else bins.start(index + 1)
            overlap = min(t1, b1) - max(t0, b0)
            if overlap > 0:
                cell = per_bin.setdefault(index, [0.0, 0.0])
                cell[0] += dynamic_j * overlap / (t1 - t0)
                cell[1] += idle_j * overlap / (t1 - t0)
    return found


def power_series(rows: Iterable[EnergyRow], start_s: float, end_s: float,
                 max_points: int = MAX_POINTS) -> list[dict[str, float | str]]:
    """``[{t_start_s, t_end_s, component, power_w}]`` summed over nodes, by bin then
    component; a bin's power is its energy over the seconds it spans."""
    rows = list(rows)
    if not rows:
        return []
    bins = bins_for(start_s, end_s, rows, max_points)
    energy: defaultdict[str, list[float]] = defaultdict(lambda: [0.0] * bins.count)
    for (_node, component), per_bin in _spread(rows, bins).items():
        for index, (dynamic_j, idle_j) in per_bin.items():
            energy[component][index] += dynamic_j + idle_j
    series: list[dict[str, float | str]] = []
    for index in range(bins.count):
        t0, t1 = bins.start(index), bins.end(index)
        for component in sorted(energy, key=component_sort_key):
            series.append({"t_start_s": t0, "t_end_s": t1, "component": component,
                           "power_w": energy[component][index] / (t1 - t0)})
    return series


def node_series(rows: Iterable[EnergyRow], start_s: float, end_s: float,
                max_points: int = MAX_POINTS) -> dict[str, list[dict[str, Any]]]:
    """node -> ``[{t_start_s, t_end_s, component, dynamic_j, idle_j}]``, on the bins of
    :func:`power_series`, only bins some row overlapped (a gap stays a gap)."""
    rows = list(rows)
    if not rows:
        return {}
    bins = bins_for(start_s, end_s, rows, max_points)
    found: defaultdict[str, list[tuple[int, str, float, float]]] = defaultdict(list)
    for (node, component), per_bin in _spread(rows, bins).items():
        found[node] += [(i, component, d, idle) for i, (d, idle) in per_bin.items()]
    return {node: [{"t_start_s": bins.start(i), "t_end_s": bins.end(i), "component": c,
                    "dynamic_j": d, "idle_j": idle}
                   for i, c, d, idle in sorted(
                       cells, key=lambda x: (x[0], component_sort_key(x[1])))]
            for node, cells in sorted(found.items())}


def unit_series(units: Iterable[UnitRow], energy_rows: Iterable[EnergyRow], start_s: float,
                end_s: float, max_points: int = MAX_POINTS
                ) -> dict[str, list[dict[str, Any]]]:
    """node -> ``[{t_end_s, unit, count}]``: units counted per bin of the same bins, at
    the bin's end.

    A unit row is a count at an instant, made over the time since the node's previous
    row of that unit (the job's start for the first): it is spread over that time as
    energy rows are, so one-second counts in 2.5-second bins do not alias into 90, 60,
    90, ... for a steady 30 a second. A bin's row imported and reported again lies in
    one bin and comes back whole.
    """
    bins = bins_for(start_s, end_s, list(energy_rows), max_points)
    per_key: defaultdict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for node, t_end_s, unit, count in units:
        per_key[(node, unit)].append((t_end_s, count))
    found: defaultdict[str, dict[tuple[int, str], float]] = defaultdict(dict)
    for (node, unit), points in per_key.items():
        previous = start_s
        spread: list[EnergyRow] = []
        for t_end_s, count in sorted(points):
            spread.append((node, min(previous, t_end_s), t_end_s, unit, count, 0.0))
            previous = t_end_s
        for (_node, _unit), per_bin in _spread(spread, bins).items():
            for index, (count, _zero) in per_bin.items():
                found[node][(index, unit)] = found[node].get((index, unit), 0.0) + count
    return {node: [{"t_end_s": bins.end(i), "unit": u, "count": n}
                   for (i, u), n in sorted(cells.items()) if n]
            for node, cells in sorted(found.items())}


# -- A job's work so far, for the per-unit and rate charts of its page ------------------

# The unit a job's figures are per by default, by kind: what its users count it in, before
# what merely outnumbers it (a trainer counting samples and tokens is per sample).
USUAL_UNITS = {"training": ("sample", "step", "epoch", "token"),
               "inference": ("inference", "request", "output_token", "token")}


def headline_unit(kind: str, counts: dict[str, float]) -> str | None:
    """The unit ``counts`` (a job's units) is read per by default: its kind's usual one
    it counted, else the one it counted most; None where it counted none."""
    counted = {unit: n for unit, n in counts.items() if n > 0}
    for unit in USUAL_UNITS.get(kind, ()):
        if unit in counted:
            return unit
    return max(counted, key=lambda unit: (counted[unit], unit), default=None)


@dataclass(frozen=True, slots=True)
class WorkSoFar:
    """A job's work from its start to ``t_s``: its units of one kind, its energy (all of
    it, as its headline's), and the time it ran."""

    t_s: float
    units: float
    energy_j: float
    elapsed_s: float

    @property
    def rate(self) -> float:
        return self.units / self.elapsed_s

    @property
    def energy_per_unit_j(self) -> float:
        return self.energy_j / self.units


def work_so_far(energy_rows: Iterable[tuple[float, str, float, float]],
                unit_rows: Iterable[tuple[str, float, str, float]], unit: str,
                start_s: float, end_s: float, bucket_s: float) -> list[WorkSoFar]:
    """Per ``bucket_s`` bucket: the job's ``unit`` count and energy since ``start_s``,
    from its energy rows ``(t_end_s, component, dynamic_j, idle_j)`` and unit rows
    ``(node, t_end_s, unit, count)``, at the end of the last row the bucket holds (rows
    cover the time up to their end: a point at the bucket's end would divide them by
    time they do not cover yet). A row past ``end_s`` (the job's end or now: the units a
    job counted at its end reach the store with the flush after it) counts at ``end_s``,
    so the last point is the job's whole energy over its whole count and time: its
    headline. Buckets before its first unit have no point (nothing to divide by)."""
    def clipped(t_s: float) -> float:
        return min(end_s, max(t_s, start_s))

    energy: defaultdict[float, float] = defaultdict(float)
    counted: defaultdict[float, float] = defaultdict(float)
    last_s: dict[float, float] = {}  # bucket end -> its last row's end
    for t_s, _component, dynamic_j, idle_j in energy_rows:
        bucket = math.ceil(clipped(t_s) / bucket_s) * bucket_s
        energy[bucket] += dynamic_j + idle_j
        last_s[bucket] = max(last_s.get(bucket, start_s), clipped(t_s))
    for _node, t_s, row_unit, count in unit_rows:
        if row_unit == unit:
            bucket = math.ceil(clipped(t_s) / bucket_s) * bucket_s
            counted[bucket] += count
            last_s[bucket] = max(last_s.get(bucket, start_s), clipped(t_s))
    points, units_so_far, energy_so_far = [], 0.0, 0.0
    for bucket in sorted(last_s):
        units_so_far += counted.get(bucket, 0.0)
        energy_so_far += energy.get(bucket, 0.0)
        t_s = last_s[bucket]
        if units_so_far > 0 and t_s > start_s:
            points.append(WorkSoFar(t_s, units_so_far, energy_so_far, t_s - start_s))
    return points
