"""joulestat.core.histogram: a histogram's deltas across a server's restarts, sums over a
job's life, and PromQL's histogram_quantile."""

from __future__ import annotations

import math

import pytest

from joulestat.core.histogram import Histogram, histogram_add, histogram_delta, histogram_quantile

INF = math.inf


H1 = Histogram(((0.1, 2.0), (0.5, 5.0), (INF, 6.0)), 1.5, 6.0)
H2 = Histogram(((0.1, 3.0), (0.5, 8.0), (INF, 10.0)), 3.0, 10.0)


def test_histogram_delta() -> None:
    assert histogram_delta(H2, H1) == Histogram(((0.1, 1.0), (0.5, 3.0), (INF, 4.0)), 1.5, 4.0)
    assert histogram_delta(H1, None) == Histogram(((0.1, 0.0), (0.5, 0.0), (INF, 0.0)), 0.0,
                                                  0.0)
    assert histogram_delta(H1, H2) == H1  # count went down: a restart
    shifted = Histogram(((0.1, 5.0), (0.5, 5.0), (INF, 10.0)), 3.0, 10.0)
    assert histogram_delta(H2, shifted) == H2  # a bucket went down: a restart
    other_bounds = Histogram(((0.2, 9.0), (INF, 12.0)), 4.0, 12.0)
    assert histogram_delta(other_bounds, H2) == other_bounds


def test_histogram_add() -> None:
    assert histogram_add(None, H1) == H1
    assert histogram_add(H1, H2) == Histogram(((0.1, 5.0), (0.5, 13.0), (INF, 16.0)), 4.5,
                                              16.0)
    coarse = Histogram(((0.5, 1.0), (1.0, 2.0), (INF, 2.0)), 1.2, 2.0)
    # bounds both have: 0.5 and +Inf, exact there
    assert histogram_add(H1, coarse) == Histogram(((0.5, 6.0), (INF, 8.0)), 2.7, 8.0)


# The example of Prometheus' exposition-format docs
# (https://prometheus.io/docs/instrumenting/exposition_formats/, "Text format example").
DOCS = Histogram(((0.05, 24054.0), (0.1, 33444.0), (0.2, 100392.0), (0.5, 129389.0),
                  (1.0, 133988.0), (INF, 144320.0)), 53423.0, 144320.0)


def test_histogram_quantile_as_promql_computes_it() -> None:
    # median: rank 72160 in (0.1, 0.2]: 0.1 + 0.1 * (72160 - 33444) / (100392 - 33444)
    assert histogram_quantile(0.5, DOCS) == pytest.approx(0.1 + 0.1 * 38716 / 66948)
    # rank 7216 in the first bucket, interpolated from 0
    assert histogram_quantile(0.05, DOCS) == pytest.approx(0.05 * 7216 / 24054)
    # rank 142876.8 > 133988: the +Inf bucket gives the highest finite bound
    assert histogram_quantile(0.99, DOCS) == 1.0
    assert histogram_quantile(1.0, DOCS) == 1.0
    assert histogram_quantile(0.0, DOCS) == 0.0
    # q 0.9: rank 129888 in (0.5, 1]: 0.5 + 0.5 * (129888 - 129389) / 4599
    assert histogram_quantile(0.9, DOCS) == pytest.approx(0.5 + 0.5 * 499 / 4599)


def test_histogram_quantile_edges() -> None:
    empty = Histogram(((0.1, 0.0), (INF, 0.0)), 0.0, 0.0)
    assert histogram_quantile(0.5, empty) is None
    assert histogram_quantile(0.5, Histogram(((INF, 3.0),), 1.0, 3.0)) is None
    negative = Histogram(((-1.0, 2.0), (0.0, 2.0), (INF, 4.0)), -2.0, 4.0)
    assert histogram_quantile(0.25, negative) == -1.0  # first bound <= 0: that bound
    # counts that decrease along the buckets are made monotonic, as Prometheus does
    odd = Histogram(((0.1, 4.0), (0.2, 3.0), (INF, 4.0)), 0.3, 4.0)
    assert histogram_quantile(0.5, odd) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        histogram_quantile(1.5, DOCS)
