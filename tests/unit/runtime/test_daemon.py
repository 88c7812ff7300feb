"""The daemon over the shared tick loop: its hooks (tick-work timing, forgetting ended
jobs), the store thread started and joined around the loop, the pipeline closed last."""

from __future__ import annotations

import threading
import time
from typing import Any

from joulestat.attribution.registry import JobRegistry
from joulestat.core.records import NodeInfo
from joulestat.outputs.prometheus import NodeMetrics
from joulestat.runtime.daemon import Daemon

NODE = NodeInfo("n1", "test.xlarge", "us-east-1", "Test CPU", "0.1.0")


class FakePipeline:
    """Stops the daemon after ``ticks`` ticks; records what happened, in order."""

    def __init__(self, stop: threading.Event, ticks: int, accounting: Any = None) -> None:
        self.stop, self.left, self.accounting = stop, ticks, accounting
        self.events: list[str] = []

    def tick(self) -> None:
        self.events.append("tick")
        self.left -= 1
        if self.left == 0:
            self.stop.set()

    def close(self) -> None:
        self.events.append("close")


class FakeWriter:
    flush_interval_s = 0.05

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.flushes = 0

    def maybe_flush(self, now_s: float) -> bool:
        self.flushes += 1
        return True

    def maintain(self, now_s: float) -> None:
        pass


def test_run_times_each_scheduled_tick_and_closes_after_the_final_one() -> None:
    stop = threading.Event()
    pipeline = FakePipeline(stop, ticks=3)
    metrics = NodeMetrics(NODE)
    writer = FakeWriter()
    daemon = Daemon(pipeline, 0.01, stop=stop, writer=writer,  # type: ignore[arg-type]
                    node_metrics=metrics)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    runner.join(10.0)
    assert not runner.is_alive()
    assert pipeline.events == ["tick"] * 4 + ["close"]  # three scheduled, the final one
    (ticks,) = [m for m in metrics.collect() if m.name == "joulestat_agent_ticks"]
    assert ticks.samples[0].value == 3  # the final tick is not timed
    assert not any(t.name == "joulestat-store" for t in threading.enumerate())


class FakeAccounting:
    def __init__(self, registry: JobRegistry) -> None:
        self.registry = registry
        self.forgotten: list[str] = []

    def forget(self, job_ids: list[str]) -> None:
        self.forgotten.extend(job_ids)


def test_jobs_ended_past_the_retention_are_forgotten() -> None:
    registry = JobRegistry()
    old = registry.register("old", "other", job_id="old")
    recent = registry.register("recent", "other", job_id="recent")
    running = registry.register("running", "other", job_id="running")
    registry.end(old.id, at_s=time.time() - 400)
    registry.end(recent.id, at_s=time.time() - 100)
    accounting = FakeAccounting(registry)
    stop = threading.Event()
    daemon = Daemon(FakePipeline(stop, 1, accounting), 1.0,  # type: ignore[arg-type]
                    job_retention_s=300.0, stop=stop)
    daemon._prune_ended_jobs()
    assert {j.id for j in registry.jobs()} == {recent.id, running.id}
    assert accounting.forgotten == ["old"]


def test_pruning_is_a_once_a_minute_hook() -> None:
    stop = threading.Event()
    daemon = Daemon(FakePipeline(stop, 1), 1.0, stop=stop)  # type: ignore[arg-type]
    hooks = daemon.hooks()
    assert len(hooks) == 1  # no node metrics: no timing hook
    prune = hooks[0]
    assert getattr(prune, "period_s", None) == 60.0
