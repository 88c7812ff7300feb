"""Idle baselines: fixed for estimators, learned (a low percentile over a window) for
measured sources, and carried across a restart by the checkpoint.

The percentile is recomputed on ticks 1, 1 + n, 1 + 2n, ... (``recompute_every`` = n);
most tests take n = 2, so it is recomputed on odd ticks.
"""

from __future__ import annotations

import json
import math

import pytest

from joulestat.attribution.idle import IdleBaselines
from joulestat.core.tick import Tick, TickEntry

KEY = ("cpu", "package-0")


def tick(t1_s: float, watts: float, component: str = "cpu", device: str = "package-0",
         duration_s: float = 1.0) -> Tick:
    return Tick(t1_s - duration_s, t1_s,
                (TickEntry(component, device, "rapl", watts * duration_s),))


def feed(idle: IdleBaselines, watts: list[float], start_s: float = 0.0
         ) -> dict[tuple[str, str], float]:
    result: dict[tuple[str, str], float] = {}
    for i, w in enumerate(watts):
        result = idle.update(tick(start_s + i + 1, w))
    return result


def test_an_estimator_idle_power_is_fixed() -> None:
    idle = IdleBaselines({KEY: 12.5}, min_samples=2, recompute_every=1)
    assert feed(idle, [100.0, 3.0, 50.0]) == {KEY: 12.5}
    assert idle.current() == {KEY: 12.5}
    assert idle.checkpoint() == []  # nothing learned: the estimator says it each start


def test_nothing_is_idle_until_enough_ticks_are_seen() -> None:
    idle = IdleBaselines(min_samples=3, recompute_every=2)
    for i, w in enumerate([30.0, 20.0]):
        assert idle.update(tick(i + 1.0, w)) == {KEY: 0.0}  # all of it is dynamic
    assert idle.update(tick(3.0, 25.0)) == {KEY: 20.0}


def test_the_baseline_is_a_low_percentile_robust_to_one_odd_reading() -> None:
    idle = IdleBaselines(min_samples=10, recompute_every=2)
    watts = [2.0] + [50.0 + i for i in range(20)]  # one glitch far below the rest
    assert feed(idle, watts) == {KEY: 50.0}  # the 5th percentile of 21: the 2nd lowest


def test_network_and_zero_length_entries_have_no_idle() -> None:
    idle = IdleBaselines(min_samples=1, recompute_every=1)
    assert idle.update(tick(1.0, 5.0, component="net", device="eth0")) == {("net", "eth0"): 0.0}
    assert idle.update(tick(2.0, 5.0, duration_s=0.0)) == {KEY: 0.0}


def test_the_window_forgets_old_ticks() -> None:
    idle = IdleBaselines(window_s=10.0, min_samples=3, recompute_every=2)
    assert feed(idle, [10.0] * 11) == {KEY: 10.0}
    # Busy for longer than the window: the quiet ticks age out and the baseline rises.
    assert feed(idle, [40.0] * 13, start_s=11.0) == {KEY: 40.0}


def test_the_percentile_is_recomputed_every_n_ticks_only() -> None:
    idle = IdleBaselines(min_samples=1, recompute_every=3)
    assert idle.update(tick(1.0, 30.0)) == {KEY: 30.0}  # tick 1: computed
    assert idle.update(tick(2.0, 10.0)) == {KEY: 30.0}  # ticks 2, 3: kept
    assert idle.update(tick(3.0, 10.0)) == {KEY: 30.0}
    assert idle.update(tick(4.0, 10.0)) == {KEY: 10.0}  # tick 4: computed again


def test_recompute_every_one_recomputes_every_tick() -> None:
    idle = IdleBaselines(min_samples=1, recompute_every=1)
    assert idle.update(tick(1.0, 30.0)) == {KEY: 30.0}
    assert idle.update(tick(2.0, 10.0)) == {KEY: 10.0}


def test_a_checkpoint_carries_learned_idle_across_a_restart() -> None:
    first = IdleBaselines(min_samples=3, recompute_every=2)
    assert feed(first, [22.0, 25.0, 30.0, 24.0, 26.0]) == {KEY: 22.0}
    state = json.loads(json.dumps(first.checkpoint()))
    assert state == [["cpu", "package-0", 22.0]]
    second = IdleBaselines(min_samples=3, recompute_every=2)
    second.restore(state)
    # Until the new window holds min_samples ticks, the carried value stands in.
    assert second.update(tick(101.0, 90.0)) == {KEY: 22.0}
    assert second.update(tick(102.0, 95.0)) == {KEY: 22.0}
    assert second.update(tick(103.0, 80.0)) == {KEY: 80.0}  # learned afresh
    # A checkpoint taken before anything is learned keeps what was carried.
    third = IdleBaselines(min_samples=3)
    third.restore(state)
    assert third.checkpoint() == [["cpu", "package-0", 22.0]]


def test_restore_skips_bad_entries() -> None:
    idle = IdleBaselines(min_samples=5)
    idle.restore([["cpu", "package-0", 20.0], ["cpu", "bad", -1.0], ["accelerator", "0", math.nan],
                  ["accelerator", "1", math.inf], ["accelerator", "2", "many"], ["too", "short"], 7,
                  ["dram", "0", "3.5"],
                  ["gpu", "gpu0", 61.5]])  # no component now: "accelerator" since 0.1.0
    assert sorted(idle.checkpoint()) == [["cpu", "package-0", 20.0], ["dram", "0", 3.5]]


@pytest.mark.parametrize("state", [None, {"cpu": 1.0}, "22.0", 5])
def test_restore_ignores_what_is_not_a_checkpoint(state: object) -> None:
    idle = IdleBaselines(min_samples=5)
    idle.restore(state)
    assert idle.checkpoint() == []
    assert idle.update(tick(1.0, 10.0)) == {KEY: 0.0}
