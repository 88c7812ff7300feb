"""The pipeline's contract with its sinks: every sink sees every tick once, in list
order; the checkpoint is computed and passed only when it is saved; finished jobs are
final at once when nothing stores them, and reported by id to their owner once stored
when a sink stores them; closing closes every sink.

A fake sampler and accounting keep the figures known; one test runs a real StoreWriter
on SQLite to show the checkpoint lands with its tick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joulestat.attribution.accounting import TickResult
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.records import DeviceInfo, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.pipeline.pipeline import Pipeline
from joulestat.pipeline.sink import TickRecord

NODE = NodeInfo("n1", "test.xlarge", "us-east-1", "Test CPU", "0.1.0")
T0 = 1_700_000_000.0


class FakeSampler:
    """Ticks of 1 s at 10 W; counts the checkpoints taken (they cost a copy each)."""

    def __init__(self) -> None:
        self.t = T0
        self.checkpoints = 0
        self.closed = False

    def start(self) -> None:
        pass

    def tick(self) -> Tick:
        self.t += 1.0
        return Tick(self.t - 1.0, self.t, (TickEntry("cpu", "0", "rapl", 10.0),))

    def checkpoint(self) -> dict:
        self.checkpoints += 1
        return {"t": self.t}

    def close(self) -> None:
        self.closed = True


class FakeAccounting:
    """Finishes the jobs put in ``finishing`` (of its ``registry``) at the next tick."""

    def __init__(self, registry: JobRegistry | None = None) -> None:
        self.registry = registry or JobRegistry()
        self.finishing: list[Job] = []
        self.closed = False

    def start(self) -> None:
        pass

    def on_tick(self, tick: Tick) -> TickResult:
        finished, self.finishing = self.finishing, []
        return TickResult(tick, [], {}, [], [job.id for job in finished])

    def checkpoint(self) -> dict:
        return {"idle": []}

    def close(self) -> None:
        self.closed = True


class RecordingSink:
    def __init__(self, name: str, log: list[tuple[str, TickRecord]],
                 stores_ticks: bool = False) -> None:
        self.name, self.log, self.stores_ticks = name, log, stores_ticks
        self.closed = 0

    def on_tick(self, record: TickRecord) -> None:
        self.log.append((self.name, record))

    def close(self) -> None:
        self.closed += 1


def make(sinks: list[Any], save_checkpoints: bool = True,
         registry: JobRegistry | None = None) -> Pipeline:
    pipeline = Pipeline(FakeSampler(), NODE, FakeAccounting(registry),  # type: ignore[arg-type]
                        sinks, boot_id="boot-1", save_checkpoints=save_checkpoints)
    pipeline.start()
    return pipeline


def test_every_sink_sees_every_tick_once_in_list_order() -> None:
    log: list[tuple[str, TickRecord]] = []
    pipeline = make([RecordingSink("metrics", log), RecordingSink("store", log, True),
                     RecordingSink("jobs", log)])
    ticks = [pipeline.tick() for _ in range(3)]
    assert [name for name, _ in log] == ["metrics", "store", "jobs"] * 3
    for i, (tick, result) in enumerate(ticks):
        records = [record for _, record in log[3 * i: 3 * i + 3]]
        assert all(record is records[0] for record in records)  # one record, shared
        assert records[0].tick is tick and records[0].result is result
    assert [r.tick.t1_s for _, r in log[::3]] == [T0 + 1, T0 + 2, T0 + 3]


def test_the_checkpoint_is_taken_after_the_tick_for_a_storing_sink() -> None:
    log: list[tuple[str, TickRecord]] = []
    pipeline = make([RecordingSink("store", log, stores_ticks=True)])
    pipeline.tick()
    pipeline.tick()
    assert pipeline.sampler.checkpoints == 2  # type: ignore[attr-defined]
    (_, first), (_, second) = log
    assert first.checkpoint == ({"sampler": {"t": T0 + 1}, "accounting": {"idle": []}},
                                "boot-1")
    assert second.checkpoint is not None and second.checkpoint[0]["sampler"] == {"t": T0 + 2}


@pytest.mark.parametrize("stores, save", [(False, True), (True, False), (False, False)])
def test_no_checkpoint_is_computed_unless_one_is_saved(stores: bool, save: bool) -> None:
    log: list[tuple[str, TickRecord]] = []
    pipeline = make([RecordingSink("sink", log, stores_ticks=stores)], save_checkpoints=save)
    pipeline.tick()
    assert log[0][1].checkpoint is None
    assert pipeline.sampler.checkpoints == 0  # type: ignore[attr-defined]


def _ended(pipeline: Pipeline, job_id: str) -> Job:
    """A job of the pipeline's registry that has just ended."""
    registry = pipeline.accounting.registry  # type: ignore[union-attr]
    job = registry.register(job_id, "other", job_id=job_id)
    registry.end(job_id)
    return job


@pytest.mark.parametrize("sinks", [[], ["metrics"]])
def test_finished_jobs_are_final_at_once_when_nothing_stores_them(sinks: list[str]) -> None:
    log: list[tuple[str, TickRecord]] = []
    pipeline = make([RecordingSink(name, log) for name in sinks])
    job = _ended(pipeline, "j1")
    pipeline.accounting.finishing = [job]  # type: ignore[union-attr]
    _, result = pipeline.tick()
    assert result is not None and result.finished_ids == ["j1"]
    assert job.final


def test_a_storing_sink_makes_finished_jobs_final_itself() -> None:
    log: list[tuple[str, TickRecord]] = []
    pipeline = make([RecordingSink("metrics", log), RecordingSink("store", log, True)])
    job = _ended(pipeline, "j1")
    pipeline.accounting.finishing = [job]  # type: ignore[union-attr]
    pipeline.tick()
    assert not job.final  # not before its last tick is stored
    assert log[1][1].result is not None and log[1][1].result.finished_ids == ["j1"]


class FailingClose(RecordingSink):
    def close(self) -> None:
        super().close()
        raise RuntimeError("disk gone")


def test_close_closes_every_sink_then_the_readers() -> None:
    log: list[tuple[str, TickRecord]] = []
    sinks = [RecordingSink("a", log), RecordingSink("b", log, True)]
    pipeline = make(sinks)
    pipeline.close()
    assert [s.closed for s in sinks] == [1, 1]
    assert pipeline.accounting.closed and pipeline.sampler.closed  # type: ignore[union-attr]


def test_a_sink_failing_to_close_does_not_keep_the_others_open() -> None:
    log: list[tuple[str, TickRecord]] = []
    sinks = [FailingClose("a", log), RecordingSink("b", log, True)]
    pipeline = make(sinks)
    with pytest.raises(RuntimeError, match="disk gone"):
        pipeline.close()
    assert [s.closed for s in sinks] == [1, 1]
    assert pipeline.accounting.closed and pipeline.sampler.closed  # type: ignore[union-attr]


def test_the_store_writer_stores_each_tick_with_its_checkpoint(tmp_path: Path) -> None:
    from joulestat.store import migrate
    from joulestat.store.durability import load_checkpoint
    from joulestat.store.engine import make_engine
    from joulestat.store.writer import StoreWriter

    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    migrate.upgrade(engine)
    # The writer holds job ids, never the registry's jobs: it tells their owner (as the
    # runtime wires it) once their rows are stored.
    registry, told = JobRegistry(), []

    def on_final(job_ids: list[str]) -> None:
        told.append(list(job_ids))
        registry.mark_final(job_ids)

    writer = StoreWriter(engine, NODE, [DeviceInfo("cpu", "0", "rapl")], raw_retention_s=600,
                         on_final=on_final)
    pipeline = make([writer], registry=registry)
    job = _ended(pipeline, "j1")
    pipeline.accounting.finishing = [job]  # type: ignore[union-attr]
    pipeline.tick()
    pipeline.tick()
    assert not job.final and writer.wake.is_set()  # a flush is asked for, not yet done
    pipeline.close()  # flushes
    assert job.final and told == [["j1"]]
    saved = load_checkpoint(engine, NODE.node)
    assert saved is not None
    assert (saved.saved_s, saved.boot_id) == (T0 + 2, "boot-1")
    assert saved.state["sampler"] == {"t": T0 + 2}


class IdleAccounting(FakeAccounting):
    """FakeAccounting with the real idle baselines a checkpoint restores."""

    def __init__(self, procfs_root: Path) -> None:
        from joulestat.attribution.idle import IdleBaselines

        super().__init__()
        self.idle, self.procfs_root = IdleBaselines(), procfs_root


@pytest.mark.parametrize(("boot_id", "age_s", "gap_s"),
                         [("boot-1", 400.0, 400.0),   # this boot, older than 300 s
                          ("boot-0", 10.0, 10.0)])    # another boot, 10 s ago
def test_a_gap_no_tick_covers_is_said_at_warning_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, boot_id: str, age_s: float,
        gap_s: float) -> None:
    """Issue 47: a 373.7 s hole was said at INFO. Now the WARNING gives its seconds and
    its floor in joules (the learned idle power over it), and the lost-energy metric's
    tally counts it."""
    from joulestat.core.losses import EnergyLosses, LossReason

    losses = EnergyLosses()
    pipeline = Pipeline(FakeSampler(), NODE, IdleAccounting(tmp_path),  # type: ignore[arg-type]
                        [], boot_id="boot-1", losses=losses)
    state = {"sampler": {}, "accounting": {"idle": [["cpu", "0", 12.5]]}}
    with caplog.at_level("WARNING", logger="joulestat.pipeline.pipeline"):
        assert pipeline.start((T0 - age_s, boot_id, state), now_s=T0) is False
    [said] = [r for r in caplog.records if "not measured" in r.getMessage()]
    assert said.levelname == "WARNING"
    assert f"{gap_s:.1f} s" in said.getMessage()
    assert f"{gap_s * 12.5:.1f} J" in said.getMessage()
    assert losses.joules()[LossReason.UNMEASURED_GAP] == pytest.approx(gap_s * 12.5)
    assert losses.seconds()[LossReason.UNMEASURED_GAP] == pytest.approx(gap_s)
