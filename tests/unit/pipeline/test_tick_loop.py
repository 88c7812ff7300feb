"""The shared tick loop on a fake clock: ticks at start + k * interval whatever each
tick's work costs, missed slots skipped (no burst to catch up), one final tick on stop,
hooks after every scheduled tick."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from joulestat.pipeline.tick_loop import Every, SharedTick, TickLoop

START = 100.0


class FakeTime:
    """A monotonic clock that moves only when the loop waits or a tick works.

    ``stop_at``: the clock time at which ``stop`` is set; ``wait`` then returns True.
    """

    def __init__(self, stop_at: float) -> None:
        self.now = START
        self.stop_at = stop_at
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None and timeout >= 0
        self.waits.append(timeout)
        if self.now + timeout >= self.stop_at:
            self.now = max(self.now, self.stop_at)
            return True
        self.now += timeout
        return False


class Work:
    """A tick that records when it started and costs ``costs[i]`` seconds (default 0)."""

    def __init__(self, time: FakeTime, costs: dict[int, float] | None = None) -> None:
        self.time = time
        self.costs = costs or {}
        self.started: list[float] = []

    def __call__(self) -> None:
        self.started.append(self.time.now)
        self.time.now += self.costs.get(len(self.started) - 1, 0.0)


def loop(time: FakeTime, work: Work, interval_s: float = 1.0, hooks=()) -> TickLoop:
    return TickLoop(work, interval_s, time, hooks, clock=time.clock, timer=time.clock)


def test_ticks_keep_to_start_plus_k_intervals_whatever_the_work_costs() -> None:
    time = FakeTime(stop_at=105.5)
    work = Work(time, {i: 0.3 for i in range(10)})  # 0.3 s of work every tick
    assert loop(time, work).run() == 6
    # No drift: a loop that slept one interval after its work would tick at 102.3, ...
    assert work.started == pytest.approx([101.0, 102.0, 103.0, 104.0, 105.0, 105.5])


def test_a_late_tick_skips_the_missed_slots_instead_of_bursting(
        caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime(stop_at=108.5)
    work = Work(time, {1: 3.5})  # the tick at 102 ends at 105.5: slots 103-105 are gone
    with caplog.at_level(logging.DEBUG, logger="joulestat.pipeline.tick_loop"):
        loop(time, work).run()
    assert work.started == pytest.approx([101.0, 102.0, 106.0, 107.0, 108.0, 108.5])
    assert [r.getMessage() for r in caplog.records] == ["tick ran late; skipping 3 slot(s)"]


def test_a_tick_ending_on_the_next_slot_skips_it() -> None:
    time = FakeTime(stop_at=104.5)
    work = Work(time, {0: 1.0})  # the next slot's time has come: it is gone, not run late
    loop(time, work).run()
    assert work.started == pytest.approx([101.0, 103.0, 104.0, 104.5])


def test_stop_runs_one_final_tick_at_once_without_hooks() -> None:
    time = FakeTime(stop_at=102.25)
    work = Work(time)
    calls: list[tuple[float, float]] = []
    ran = loop(time, work, hooks=[lambda now, work_s: calls.append((now, work_s))]).run()
    assert ran == 3 and work.started == pytest.approx([101.0, 102.0, 102.25])
    assert [now for now, _ in calls] == pytest.approx([101.0, 102.0])  # not after the final


def test_stopped_before_the_first_slot_still_counts_the_time_since_start() -> None:
    time = FakeTime(stop_at=100.4)
    work = Work(time)
    assert loop(time, work).run() == 1
    assert work.started == [100.4]


def test_hooks_run_in_order_after_each_tick_with_its_work_time() -> None:
    time = FakeTime(stop_at=103.5)
    work = Work(time, {0: 0.25, 1: 0.5})
    calls: list[tuple[str, float, float]] = []
    hooks = [lambda now, w: calls.append(("a", now, w)), lambda now, w: calls.append(("b", now, w))]
    loop(time, work, hooks=hooks).run()
    assert calls == [("a", 101.25, 0.25), ("b", 101.25, 0.25), ("a", 102.5, 0.5),
                     ("b", 102.5, 0.5), ("a", 103.0, 0.0), ("b", 103.0, 0.0)]


def test_every_runs_once_a_period_or_when_asked() -> None:
    now = [0.0]
    ran: list[float] = []
    asked = [False]
    every = Every(10.0, ran.append, asked=lambda: asked[0], clock=lambda: now[0])
    for t in (1.0, 9.9, 10.0, 15.0, 19.9, 20.0):
        every(t, 0.0)
    assert ran == [10.0, 20.0]
    asked[0] = True
    every(21.0, 0.0)
    assert ran == [10.0, 20.0, 21.0]
    asked[0] = False
    every(30.0, 0.0)  # the period restarts from the asked run
    every(31.0, 0.0)
    assert ran == [10.0, 20.0, 21.0, 31.0]


def test_a_bad_interval_is_refused() -> None:
    time = FakeTime(stop_at=101.0)
    with pytest.raises(ValueError, match="interval_s"):
        loop(time, Work(time), interval_s=0.0).run()


def test_with_a_real_event_a_stop_ends_the_loop_with_a_final_tick() -> None:
    stop = threading.Event()
    ticks: list[float] = []
    thread = threading.Thread(target=lambda: TickLoop(lambda: ticks.append(1.0), 0.01,
                                                      stop).run())
    thread.start()
    for _ in range(500):  # up to 5 s for three ticks 10 ms apart
        if len(ticks) >= 3:
            break
        thread.join(0.01)
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    assert len(ticks) >= 4  # three scheduled, at least, and the final one


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_tick_asked_for_runs_after_the_ask_unless_the_loops_began_since() -> None:
    clock, began = _Clock(), []
    ticks = SharedTick(lambda: began.append(clock.now), clock=clock, sleep=clock.sleep)
    ticks()  # the loop's, at 100.0
    clock.now = 101.0
    ticks.since(100.5)  # asked after the loop's tick began: one more, now
    assert began == [100.0, 101.0] and ticks.on_demand == 1
    ticks.since(101.0)  # a tick began at the ask: it holds what came before
    assert began == [100.0, 101.0] and ticks.on_demand == 1
    clock.now = 102.0
    ticks()  # the loop's
    ticks.since(101.5)
    assert began == [100.0, 101.0, 102.0], "the loop's tick began after the ask"


def test_ticks_asked_for_in_a_row_are_spaced_by_the_gap() -> None:
    clock, began = _Clock(), []
    ticks = SharedTick(lambda: began.append(clock.now), gap_s=0.2, clock=clock,
                       sleep=clock.sleep)
    for _ in range(3):
        ticks.since(clock.now + 1e-9)  # each ask after the last tick began
    assert began == pytest.approx([100.0, 100.2, 100.4])
    assert ticks.on_demand == 3


def test_the_loop_and_a_reader_never_tick_at_once() -> None:
    inside, overlaps = [0], []
    lock = threading.Lock()

    def tick() -> None:
        with lock:
            inside[0] += 1
            overlaps.append(inside[0])
        os.sched_yield()  # let another thread run while inside: an overlap would show
        with lock:
            inside[0] -= 1

    ticks = SharedTick(tick, gap_s=0.0)
    readers = [threading.Thread(target=lambda: [ticks.since(time.monotonic())
                                                 for _ in range(20)]) for _ in range(3)]
    for thread in readers:
        thread.start()
    for _ in range(20):
        ticks()
    for thread in readers:
        thread.join()
    assert max(overlaps) == 1 and len(overlaps) >= 20
