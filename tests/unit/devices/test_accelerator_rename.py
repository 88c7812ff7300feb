"""The component ``gpu`` became ``accelerator`` (issue 14): what joulestat wrote before
still reads the same: crash checkpoints, replay traces and spool segments naming ``gpu``.
The store through migration 0006 (and back) is in tests/store/test_migrations.py; reports
of schema 1 are read by the report import tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulestat.attribution.idle import IdleBaselines
from joulestat.core.tick import Component, Tick, TickEntry
from joulestat.devices.replay import ReplaySensor, load_trace, trace_energy_j
from joulestat.devices.sensor import current_component
from joulestat.pipeline.sampler import Sampler
from joulestat.store.durability import Spool
from joulestat.store.rows import SHARE, TICK, UNIT
from tests.helpers.checkpoint import TRACE, warned

OLD_TRACE = TRACE.replace(",accelerator,", ",gpu,")
ACCELERATOR_COMPONENT, COMPONENTS = Component.ACCELERATOR, tuple(Component)


def test_the_old_name_maps_to_the_new_and_nothing_else_changes() -> None:
    assert ACCELERATOR_COMPONENT == "accelerator" and "gpu" not in COMPONENTS
    assert current_component("gpu") == "accelerator"
    assert [current_component(c) for c in COMPONENTS] == list(COMPONENTS)
    assert current_component("gpu0") == "gpu0"  # a device name is not a component


def test_a_trace_recorded_with_gpu_replays_as_accelerator(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    path.write_text(OLD_TRACE)
    trace = load_trace(path)
    assert set(trace.series) == {("cpu", "package-0"), ("accelerator", "gpu0")}
    sensor = ReplaySensor(trace, 100.0)
    assert {r.component for r in sensor.read(101.0)} == {"cpu", "accelerator"}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _old_names(state: dict) -> dict:
    """A sampler checkpoint as the agent before the rename wrote it."""
    return json.loads(json.dumps(state).replace('"accelerator"', '"gpu"'))


def test_a_checkpoint_naming_gpu_resumes_through_the_gap(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Saved by the agent before the upgrade, restored by the agent after it: the first
    tick covers the gap for the accelerator too, as if no name had changed."""
    (tmp_path / "trace.csv").write_text(TRACE)
    trace = load_trace(tmp_path / "trace.csv")
    clock = Clock(100.0)
    first = Sampler([ReplaySensor(trace, 100.0)], monotonic=clock, wall=lambda: clock.now)
    first.start()
    clock.now = 103.0
    first.tick()
    state = _old_names(first.checkpoint())
    assert ["gpu", "gpu0", "replay"] == state["last_j"][1][:3]
    assert state["sensors"]["replay"]["energy_j"][1][0] == "gpu"
    clock.now = 107.0
    second = Sampler([ReplaySensor(trace, 107.0)], monotonic=clock, wall=lambda: clock.now)
    assert second.restore(state) is True
    clock.now = 110.0
    gap = {(e.component, e.device): e.energy_j for e in second.tick().entries}
    assert gap == pytest.approx(trace_energy_j(trace, 3.0, 10.0), rel=1e-9)
    assert gap[("accelerator", "gpu0")] > 0
    assert warned(caplog, "checkpoint") == 0


def test_learned_idle_power_named_gpu_is_the_accelerator_s() -> None:
    idle = IdleBaselines(min_samples=3)
    idle.restore([["gpu", "gpu0", 61.5], ["cpu", "package-0", 20.0]])
    assert sorted(idle.checkpoint()) == [["accelerator", "gpu0", 61.5],
                                         ["cpu", "package-0", 20.0]]
    tick = Tick(0.0, 1.0, (TickEntry("accelerator", "gpu0", "nvml_energy", 300.0),))
    assert idle.update(tick) == {("accelerator", "gpu0"): 61.5}  # carried until learned


def test_a_spool_segment_written_before_the_rename_is_written_back_renamed(
        tmp_path: Path) -> None:
    """An outage across the upgrade: the old agent's spooled rows name gpu; replayed
    by the new agent, ticks and shares are the accelerator's and units keep their
    names (even one called gpu)."""
    keys = [[TICK, "", "gpu", "gpu0", "nvml_energy"], [SHARE, "j", "gpu", "gpu0", "nvml_energy"],
            [TICK, "", "cpu", "0", "rapl"], [UNIT, "j", "gpu", "", ""]]
    segment = {"format": 1, "keys": keys,
               "rows": [[2000, 1000, 50.0, 0.0, 0], [2000, 1000, 30.0, 10.0, 1],
                        [2000, 1000, 5.0, 0.0, 2], [2000, 2000, 7.0, 0.0, 3]],
               "jobs": {}, "checkpoint": None}
    (tmp_path / "000000000001.json").write_text(json.dumps(segment))
    [(_segment, batch, _pending)] = list(Spool(tmp_path).replay())
    assert [batch.keys[i] for i in batch.key] == [
        (TICK, "", "accelerator", "gpu0", "nvml_energy"),
        (SHARE, "j", "accelerator", "gpu0", "nvml_energy"),
        (TICK, "", "cpu", "0", "rapl"), (UNIT, "j", "gpu", "", "")]
    assert list(batch.dynamic_j) == [50.0, 30.0, 5.0, 7.0]
