"""A cumulative histogram as a Prometheus endpoint exposes it, and the JSON it is stored
as: a serving engine's latency histograms (:mod:`joulestat.host.serving_metrics`, kept
with the job) and a serving job's per-request length histograms
(:mod:`joulestat.core.serving_trace`) are both this one type, read back and quantiled
the same way."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_INF = math.inf


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
