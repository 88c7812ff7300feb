"""A cumulative histogram as a Prometheus endpoint exposes it, and the JSON it is stored
as: a serving engine's latency histograms (:mod:`joulestat.host.serving_metrics`, kept
with the job) and a serving job's per-request length histograms
(:mod:`joulestat.core.serving_trace`) are both this one type, read back and quantiled
the same way."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

_INF = math.inf


class Latency(StrEnum):
    """The latency distributions a serving job reports: time to first token,
    inter-token latency, end-to-end request latency."""

    TTFT = "ttft"
    ITL = "itl"
    E2E = "e2e"


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram as the server exposes it, in the observed unit (seconds for
    latency). ``buckets``: (upper bound ``le``, cumulative count), ascending, ``+inf`` last."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    @property
    def bounds(self) -> tuple[float, ...]:
        return tuple(le for le, _ in self.buckets)


def histogram_to_json(histogram: Histogram) -> dict[str, Any]:
    """``{"buckets": [[le, count], ...], "sum": s, "count": n}``, ``le`` of the +Inf bucket
    written ``"+Inf"`` as Prometheus writes it (JSON has no infinity): how a job's latency
    is stored (``job_nodes.latency``)."""
    return {"buckets": [["+Inf" if math.isinf(le) else le, count]
                        for le, count in histogram.buckets],
            "sum": histogram.sum, "count": histogram.count}


def histogram_from_json(stored: Mapping[str, Any]) -> Histogram:
    """:func:`histogram_to_json` read back; ValueError, KeyError or TypeError when it is
    not one."""
    buckets = tuple((_INF if le == "+Inf" else float(le), float(count))
                    for le, count in stored["buckets"])
    if any(b[0] <= a[0] for a, b in zip(buckets, buckets[1:], strict=False)):
        raise ValueError("histogram bounds are not ascending")
    return Histogram(buckets, float(stored["sum"]), float(stored["count"]))


def _empty_like(histogram: Histogram) -> Histogram:
    return Histogram(tuple((le, 0.0) for le, _ in histogram.buckets), 0.0, 0.0)


def histogram_delta(now: Histogram, then: Histogram | None) -> Histogram:
    """The observations between two scrapes of one histogram.

    ``then`` None: the first scrape: empty (as :func:`counter_delta` gives 0). A count
    or bucket that went down (a restart), or bucket bounds that changed (a restart with
    other settings): ``now`` whole, what the new server observed.
    """
    if then is None:
        return _empty_like(now)
    if now.bounds != then.bounds or now.count < then.count or any(
            b < a for (_, a), (_, b) in zip(then.buckets, now.buckets, strict=True)):
        return now
    return Histogram(
        tuple((le, b - a) for (le, b), (_, a) in zip(now.buckets, then.buckets, strict=True)),
        now.sum - then.sum, now.count - then.count)


def _at_bounds(histogram: Histogram, bounds: Iterable[float]) -> tuple[float, ...]:
    by_le = dict(histogram.buckets)
    return tuple(by_le[le] for le in bounds)


def histogram_add(a: Histogram | None, b: Histogram) -> Histogram:
    """``a`` plus ``b``: deltas accumulated over a job's life.

    Bounds that differ (the server restarted with other buckets) keep the bounds both
    have, +Inf at least: cumulative counts there are exact, only resolution is lost.
    """
    if a is None:
        return b
    if a.bounds == b.bounds:
        buckets = tuple((le, x + y) for (le, x), (_, y) in zip(a.buckets, b.buckets, strict=True))
    else:
        common = sorted((set(a.bounds) & set(b.bounds)) | {_INF})
        a_counts = _at_bounds(_with_inf(a), common)
        b_counts = _at_bounds(_with_inf(b), common)
        buckets = tuple(zip(common, (x + y for x, y in zip(a_counts, b_counts, strict=True)),
                            strict=True))
    return Histogram(buckets, a.sum + b.sum, a.count + b.count)


def _with_inf(histogram: Histogram) -> Histogram:
    if histogram.buckets and histogram.buckets[-1][0] == _INF:
        return histogram
    return Histogram(histogram.buckets + ((_INF, histogram.count),), histogram.sum,
                     histogram.count)


def histogram_quantile(q: float, histogram: Histogram) -> float | None:
    """The ``q`` quantile (0 <= q <= 1) as PromQL's ``histogram_quantile`` estimates it.

    Linear interpolation within the bucket the rank falls in, the first bucket starting
    at 0 (unless its bound is <= 0: then that bound); a rank in the +Inf bucket gives the
    highest finite bound. Counts that decrease along the buckets are raised to be
    monotonic, as Prometheus does. None where PromQL gives NaN: no observations, or no
    finite bucket.
    """
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise ValueError(f"quantile {q} is outside [0, 1]")
    buckets = list(_with_inf(histogram).buckets)
    if len(buckets) < 2:
        return None
    running = 0.0
    for i, (le, count) in enumerate(buckets):
        running = max(running, count)
        buckets[i] = (le, running)
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    if b == 0 and buckets[0][0] <= 0:
        return buckets[0][0]
    start, end, count = 0.0, buckets[b][0], buckets[b][1]
    if b > 0:
        start = buckets[b - 1][0]
        count -= buckets[b - 1][1]
        rank -= buckets[b - 1][1]
    if count <= 0:  # rank 0 in an empty first bucket
        return start
    return start + (end - start) * (rank / count)
