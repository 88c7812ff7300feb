"""Power over time for a report's chart, in a bounded number of points.

A week-long job has 600 000 one-second ticks per component; a chart needs a hundred
points. Rows are spread over equal bins by the share of their time that falls in
each bin, so a minute rollup or an imported whole-job aggregate becomes a flat stretch
at its true average power instead of a spike at its end, and the energy under the
curve equals the job's energy.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

MAX_POINTS = 120
MIN_BIN_S = 1.0
COMPONENT_ORDER = ("cpu", "dram", "gpu", "net")


def component_sort_key(component: str) -> tuple[int, str]:
    """cpu, dram, gpu, net first, in that order, then the rest by name."""
    if component in COMPONENT_ORDER:
        return (COMPONENT_ORDER.index(component), component)
    return (len(COMPONENT_ORDER), component)


def power_series(
    rows: Iterable[tuple[str, float, float, str, float]],
    start_s: float,
    end_s: float,
    max_points: int = MAX_POINTS,
) -> list[dict[str, float | str]]:
    """``[{t_start_s, t_end_s, component, power_w}]`` summed over nodes, by bin then
    component; ``rows`` are ``(node, t_start_s, t_end_s, component, energy_j)``."""
    rows = list(rows)
    if not rows:
        return []
    low = min(start_s, min(r[1] for r in rows))
    high = max(end_s, max(r[2] for r in rows))
    width = max((high - low) / max_points, MIN_BIN_S)
    count = max(1, math.ceil((high - low) / width - 1e-9))
    energy: defaultdict[str, list[float]] = defaultdict(lambda: [0.0] * count)

    def bin_of(t_s: float) -> int:
        return min(count - 1, max(0, int((t_s - low) / width)))

    for _node, t0, t1, component, energy_j in rows:
        bins = energy[component]
        if t1 <= t0:
            bins[bin_of(t1)] += energy_j
            continue
        first, last = bin_of(t0), bin_of(t1 - 1e-9)
        for index in range(first, last + 1):
            b0, b1 = low + index * width, low + (index + 1) * width
            overlap = min(t1, b1) - max(t0, b0)
            if overlap > 0:
                bins[index] += energy_j * overlap / (t1 - t0)
    series: list[dict[str, float | str]] = []
    for index in range(count):
        for component in sorted(energy, key=component_sort_key):
            series.append({
                "t_start_s": low + index * width,
                "t_end_s": low + (index + 1) * width,
                "component": component,
                "power_w": energy[component][index] / width,
            })
    return series
