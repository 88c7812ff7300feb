"""Crash recovery of the estimators and the replay: the CPU and DRAM models, network byte
counters, a replayed trace's time, and every sensor given garbage. How each test runs is
in :mod:`tests.helpers.checkpoint`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joulestat.devices.estimators import DramModelSensor
from joulestat.devices.network import NetworkSensor
from joulestat.devices.replay import ReplaySensor, load_trace
from tests.fakes.net_dev import write_net_dev
from tests.fakes.nvml import FakeGpu
from tests.fakes.proc_stat import FakeProc
from tests.helpers.checkpoint import (
    EXACT,
    TRACE,
    RaplHardware,
    ccf_cpu,
    energies,
    nvidia_at,
    rapl_at,
    via_json,
    warned,
)

# --- CPU and DRAM estimators -----------------------------------------------------------


def test_cpu_model_resumes_from_the_kernel_counters(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    a, c = ccf_cpu(proc), ccf_cpu(proc)
    a.read(100.0)
    c.read(100.0)
    for t, load in ((101.0, 0.5), (102.0, 0.9), (103.0, 0.3)):
        proc.advance(1.0, load=load)
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    for t in (104.0, 105.0):  # constant load through the gap: the reference may tick in it
        proc.advance(1.0, load=0.7)
        c.read(t)
    b = ccf_cpu(proc)  # opened at restart; never read before restore
    b.restore(state)
    proc.advance(1.0, load=0.7)
    got, truth = energies(b.read(106.0)), energies(c.read(106.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert b.last_load == pytest.approx(0.7)


def test_cpu_model_restores_the_last_load_for_a_jiffy_less_interval(tmp_path: Path) -> None:
    """Restarted within one jiffy: no counter moved, so the saved load is what applies."""
    proc = FakeProc(tmp_path)
    a, c = ccf_cpu(proc), ccf_cpu(proc)
    a.read(0.0)
    c.read(0.0)
    proc.advance(1.0, load=0.8)
    a.read(1.0)
    c.read(1.0)
    b = ccf_cpu(proc)
    b.restore(via_json(a.checkpoint()))
    got, truth = energies(b.read(1.004)), energies(c.read(1.004))
    assert got == pytest.approx(truth, rel=EXACT)
    assert b.last_load == pytest.approx(0.8)


def test_cpu_model_charges_the_gap_at_its_average_load(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    a = ccf_cpu(proc)
    a.read(0.0)
    proc.advance(1.0, load=1.0)
    [before] = a.read(1.0)
    state = via_json(a.checkpoint())
    proc.advance(3.0, load=0.2)
    proc.advance(1.0, load=1.0)  # 4 s gap, average load (0.6 + 0.4) / 4 = 0.4
    b = ccf_cpu(proc)
    b.restore(state)
    [after] = b.read(5.0)
    expected = before.energy_j + b.model.power_w(0.4) * 4.0
    assert after.energy_j == pytest.approx(expected, rel=EXACT)
    assert b.last_load == pytest.approx(0.4)


def test_cpu_model_ignores_a_malformed_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = FakeProc(tmp_path)
    a = ccf_cpu(proc)
    a.read(0.0)
    proc.advance(1.0, load=1.0)
    a.read(1.0)
    good = via_json(a.checkpoint())
    bads: list[Any] = [None, {}, {**good, "last_load": 1.5}, {**good, "energy_j": "9"},
                       {**good, "times": {**good["times"], "idle": 1.5}},
                       {**good, "times": [1, 2]}]
    for bad in bads:
        b = ccf_cpu(proc)
        b.restore(bad)
        assert energies(b.read(2.0)) == {("cpu", "node"): 0.0}, bad  # a fresh baseline
    assert warned(caplog, "cpu estimator checkpoint ignored") == len(bads)


def test_dram_model_resumes_with_constant_power_over_the_gap(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    proc.meminfo(16 * 1024 * 1024)
    a, c = DramModelSensor(tmp_path), DramModelSensor(tmp_path)
    for t in (10.0, 11.0, 12.5):
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    c.read(15.0)
    b = DramModelSensor(tmp_path)
    b.restore(state)
    got, truth = energies(b.read(20.0)), energies(c.read(20.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got[("dram", "node")] == pytest.approx(b.power_w * 10.0)
    fresh = DramModelSensor(tmp_path)
    fresh.restore({"energy_j": 5.0, "prev_s": "soon"})
    assert energies(fresh.read(30.0)) == {("dram", "node"): 0.0}


# --- Network ----------------------------------------------------------------------------


def test_network_resumes_byte_counters(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_net_dev(tmp_path, {"eth0": (1000, 1000), "eth1": (0, 0)})
    a, c = NetworkSensor(tmp_path, j_per_byte=1e-6), NetworkSensor(tmp_path, j_per_byte=1e-6)
    write_net_dev(tmp_path, {"eth0": (5000, 3000), "eth1": (100, 0)})
    a.read(1.0)
    c.read(1.0)
    state = via_json(a.checkpoint())
    write_net_dev(tmp_path, {"eth0": (9000, 8000), "eth1": (300, 0)})
    c.read(2.0)
    b = NetworkSensor(tmp_path, j_per_byte=1e-6)  # its own baseline mid-gap
    b.restore(state)
    write_net_dev(tmp_path, {"eth0": (20000, 10000), "eth1": (400, 0)})
    got, truth = energies(b.read(3.0)), energies(c.read(3.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got == pytest.approx({("net", "eth0"): 28000e-6, ("net", "eth1"): 400e-6})
    # eth1 removed before the restart: skipped with a warning; a new coefficient applies
    # to the gap only, never to the energy already reported.
    write_net_dev(tmp_path, {"eth0": (20000, 10000)})
    d = NetworkSensor(tmp_path, j_per_byte=2e-6)
    d.restore(via_json(b.checkpoint()))
    assert warned(caplog, "eth1 is not present") == 1
    write_net_dev(tmp_path, {"eth0": (21000, 10000)})
    assert energies(d.read(4.0)) == {("net", "eth0"): pytest.approx(28000e-6 + 1000 * 2e-6)}


# --- Replay -----------------------------------------------------------------------------


def test_replay_trace_time_runs_on_through_the_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    a, c = ReplaySensor(load_trace(path), 100.0), ReplaySensor(load_trace(path), 100.0)
    for t in (101.0, 102.0, 103.0):
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    b = ReplaySensor(load_trace(path), opened_s=108.0)  # restarted at 108
    b.restore(state)
    got = energies(b.read(111.0))
    assert got == energies(c.read(111.0))
    assert got == pytest.approx({("cpu", "package-0"): 50 * 4 + 80 * 5 + 20 * 2,
                                 ("accelerator", "gpu0"): 300 * 6 + 100 * 5})
    # Another trace under the same name: the saved energies do not match, so it is ignored.
    path.write_text(TRACE.replace("0,cpu,package-0,50", "0,cpu,package-0,55"))
    other = ReplaySensor(load_trace(path), opened_s=108.0)
    other.restore(state)
    assert warned(caplog, "replay checkpoint ignored") == 1
    assert other.opened_s == 108.0
    for bad in ({**state, "energy_j": [["cpu", "package-0"]]}, {**state, "opened_s": None},
                {**state, "energy_j": [["net", "eth9", 0.0]]}, "x"):
        other.restore(bad)  # type: ignore[arg-type]
        assert other.opened_s == 108.0


# --- Every sensor -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [None, [], "x", 5, {"zones": 1, "gpus": [], "ifaces": "eth0"}])
def test_every_sensor_warns_and_carries_on_after_garbage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    bad: Any,
) -> None:
    hw = RaplHardware(tmp_path / "sys")
    proc = FakeProc(tmp_path / "proc")
    proc.meminfo(1024 * 1024)
    write_net_dev(proc.root, {"eth0": (0, 0)})
    (tmp_path / "trace.csv").write_text(TRACE)
    sensors = [rapl_at(hw, 0.0), nvidia_at(monkeypatch, [FakeGpu()], 0.0), ccf_cpu(proc),
               DramModelSensor(proc.root), NetworkSensor(proc.root),
               ReplaySensor(load_trace(tmp_path / "trace.csv"), 0.0)]
    for sensor in sensors:
        sensor.read(0.0)
        before = sensor.checkpoint()
        caplog.clear()
        sensor.restore(bad)
        assert warned(caplog, "ignored") == 1, sensor.name
        assert sensor.checkpoint() == before, sensor.name
