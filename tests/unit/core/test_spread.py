"""Spread: a pool's runs merged from parts give the mean and spread of the runs
themselves, however the parts were cut (job by job, day sums, both)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from joulestat.core.spread import Spread


def _as_parts(values: list[float], cuts: list[int]) -> list[Spread]:
    parts, start = [], 0
    for end in [*cuts, len(values)]:
        parts.append(Spread.of(values[start:end]))
        start = end
    return parts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parts_merge_to_the_runs_own_mean_and_spread(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.uniform(5e3, 5e4) for _ in range(200)]
    cuts = sorted(rng.sample(range(1, 200), 20))
    parts = _as_parts(values, cuts)
    folded = Spread()
    for part in parts:
        folded = folded.merged(part)
    at_once = Spread.of_parts((p.runs, p.mean, p.m2) for p in parts)
    mean, sd = at_once.mean_sd()
    assert at_once.runs == folded.runs == 200
    assert mean == pytest.approx(statistics.fmean(values), rel=1e-12)
    assert sd == pytest.approx(statistics.stdev(values), rel=1e-9)
    assert at_once.mean == pytest.approx(folded.mean, rel=1e-12)
    assert at_once.m2 == pytest.approx(folded.m2, rel=1e-9)


def test_one_run_parts_and_empty_parts() -> None:
    # A fleet's running jobs come as one-run parts (m2 0); an empty part changes nothing.
    values = [3.0, 5.0, 10.0]
    got = Spread.of_parts([(1, v, 0.0) for v in values] + [(0, 0.0, 0.0)])
    assert (got.runs, got.mean) == (3, 6.0)
    assert math.sqrt(got.m2 / 2) == pytest.approx(statistics.stdev(values))
    assert Spread.of_parts([]) == Spread()
