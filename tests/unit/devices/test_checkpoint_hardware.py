"""Crash recovery of the hardware counters: RAPL (a wrap inside the gap, the ceiling over
the real gap, zones that no longer match) and NVML (the energy counter, the power path,
GPUs matched by UUID). How each test runs is in :mod:`tests.helpers.checkpoint`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.fakes.nvml import FakeGpu
from tests.helpers.checkpoint import (
    EXACT,
    RANGE_UJ,
    RaplHardware,
    energies,
    nvidia_at,
    rapl_at,
    rapl_killed_at,
    rapl_restored,
    via_json,
    warned,
)

# --- RAPL -------------------------------------------------------------------------------


def test_rapl_resumes_across_a_gap_with_a_wrap_inside_it(tmp_path: Path) -> None:
    hw = RaplHardware(tmp_path)
    a, c = rapl_at(hw, 0.0), rapl_at(hw, 0.0)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        hw.at(t)
        assert energies(a.read(t)) == energies(c.read(t))
    state = via_json(a.checkpoint())
    wraps_before_gap = hw.wraps
    # killed at t=5 (raw package counter 70 J); the counter wraps at t=6.5, inside the gap
    for t in (6.0, 7.0):
        hw.at(t)
        c.read(t)
    b = rapl_restored(hw, state, 7.0)  # the restarted agent opens its sensor mid-gap
    hw.at(7.5)
    assert hw.wraps == wraps_before_gap + 1
    got, truth = energies(b.read(7.5)), energies(c.read(7.5))
    assert got == truth  # integer µJ: exactly equal
    assert got[("cpu", "package-0")] == pytest.approx(20.0 * 7.5)
    assert got[("dram", "package-0")] == pytest.approx(3.0 * 7.5)
    hw.at(9.0)
    assert energies(b.read(9.0)) == energies(c.read(9.0)) == {
        ("cpu", "package-0"): pytest.approx(180.0), ("dram", "package-0"): pytest.approx(27.0)}


def test_rapl_ceiling_applies_over_the_real_gap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bogus step is judged against the gap's real length, not a one-second tick."""
    hw = RaplHardware(tmp_path, range_uj=10**15)
    state = rapl_killed_at(hw, 1.0)
    b = rapl_restored(hw, state, 3.0)
    hw.tree.set_energy_uj("intel-rapl:0", 70_000_000 + 20_000_000 + 9_000_000_000)  # 9 kJ
    # 9 kJ in 3 s is over 2 kW: not counted, the 3 s filled at the restored recent
    # 20 W instead; over a 5 s gap it would pass (see below)
    (package,) = [r for r in b.read(4.0) if r.device == "package-0" and r.component == "cpu"]
    assert (package.energy_j, package.filled) == (pytest.approx(20.0 + 3 * 20.0), True)
    assert warned(caplog, "a jump of 9000.0 J in 3.000 s") == 1
    c = rapl_restored(hw, state, 6.0)
    assert energies(c.read(6.0))[("cpu", "package-0")] == pytest.approx(9020.0)


def test_rapl_long_gap_warns_that_wraps_may_hide(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hw = RaplHardware(tmp_path)
    b = rapl_restored(hw, rapl_killed_at(hw, 1.0), 30.0)
    hw.at(30.0)
    b.read(30.0)
    assert warned(caplog, "lower bound") == 2  # package and dram, once each
    hw.at(31.0)
    b.read(31.0)
    assert warned(caplog, "lower bound") == 2  # an ordinary tick after it: no more


def test_rapl_restore_skips_what_does_not_match(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hw = RaplHardware(tmp_path)
    state = rapl_killed_at(hw, 2.0)
    zones = state["zones"]
    zones["intel-rapl:9"] = {"energy_uj": 1, "prev_s": 0.0, "total_uj": 5}  # gone now
    zones["intel-rapl:0:0"]["total_uj"] = "12"  # wrong type: this zone is skipped
    b = rapl_restored(hw, state, 2.0)
    assert warned(caplog, "intel-rapl:9") == 1
    assert warned(caplog, "intel-rapl:0:0") == 1
    hw.at(3.0)
    energy = energies(b.read(3.0))
    assert energy[("cpu", "package-0")] == pytest.approx(60.0)  # restored: 40 J + 20 J
    assert energy[("dram", "package-0")] == pytest.approx(3.0)  # fresh since its open at 2 s
    for bad in ({"zones": {"intel-rapl:0": {"energy_uj": RANGE_UJ + 1, "prev_s": 0.0,
                                            "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": -1, "prev_s": 0.0, "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": 1, "prev_s": math.nan,
                                            "total_uj": 0}}},
                {"zones": {"intel-rapl:0": {"energy_uj": True, "prev_s": 0.0, "total_uj": 0}}},
                {"zones": {"intel-rapl:0": [1, 2]}}, {"zones": [1]}, {}, []):
        fresh = rapl_at(hw, 3.0)
        fresh.restore(bad)  # type: ignore[arg-type]
        hw.at(4.0)
        assert energies(fresh.read(4.0))[("cpu", "package-0")] == pytest.approx(20.0), bad
        hw.at(3.0)


# --- NVML -------------------------------------------------------------------------------


def test_nvml_energy_counter_resumes_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=7_000_000), FakeGpu(uuid="GPU-b", energy_mj=0)]
    a, c = nvidia_at(monkeypatch, gpus, 0.0), nvidia_at(monkeypatch, gpus, 0.0)

    def at(t: float) -> None:
        gpus[0].energy_mj = 7_000_000 + round(300_000 * t)  # 300 W
        gpus[1].energy_mj = round(150_000 * t)

    for t in (1.0, 2.0):
        at(t)
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    assert set(state["gpus"]) == {"GPU-a", "GPU-b"}
    at(5.0)
    c.read(5.0)
    b = nvidia_at(monkeypatch, gpus, 6.0)
    b.restore(state)
    at(10.0)
    got, truth = energies(b.read(10.0)), energies(c.read(10.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got == pytest.approx({("accelerator", "gpu0"): 3000.0, ("accelerator", "gpu1"): 1500.0})


def test_nvml_power_path_integrates_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power rising linearly through the gap: one trapezoid over it equals the tick-by-tick sum."""
    gpus = [FakeGpu(uuid="GPU-old", energy_mj=None, power_mw=100_000)]
    a, c = nvidia_at(monkeypatch, gpus, 0.0), nvidia_at(monkeypatch, gpus, 0.0)
    for t in (1.0, 2.0, 3.0):
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    for t, mw in ((4.0, 120_000), (5.0, 140_000)):
        gpus[0].power_mw = mw
        c.read(t)
    b = nvidia_at(monkeypatch, gpus, 5.0)
    b.restore(state)
    gpus[0].power_mw = 160_000
    got, truth = energies(b.read(6.0)), energies(c.read(6.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got[("accelerator", "gpu0")] == pytest.approx(300.0 + 110.0 + 130.0 + 150.0)


def test_nvml_restore_matches_by_uuid_and_skips_the_rest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gpus = [FakeGpu(uuid="GPU-a", energy_mj=0), FakeGpu(uuid="GPU-b", energy_mj=0),
            FakeGpu(uuid="GPU-c", energy_mj=0)]
    a = nvidia_at(monkeypatch, gpus, 0.0)
    for gpu in gpus:
        gpu.energy_mj = 100_000
    a.read(1.0)
    state = via_json(a.checkpoint())
    state["gpus"]["GPU-c"]["last_mj"] = -5  # malformed
    # After restart: GPU-a is gone, so GPU-b now sits at index 0 and GPU-c at 1. Both are
    # skipped: continuing them under other gpuN names would feed one board's total to another.
    survivors = [FakeGpu(uuid="GPU-b", energy_mj=100_000), FakeGpu(uuid="GPU-c", energy_mj=100_000)]
    b = nvidia_at(monkeypatch, survivors, 2.0)
    b.restore(state)
    assert warned(caplog, "GPU-a is not present") == 1
    assert warned(caplog, "was gpu1, is gpu0") == 1
    assert warned(caplog, "GPU-c ignored") == 1
    for gpu in survivors:
        gpu.energy_mj = 150_000
    assert energies(b.read(3.0)) == {("accelerator", "gpu0"): pytest.approx(50.0),
                                    ("accelerator", "gpu1"): pytest.approx(50.0)}
    # The same GPU at the same index but another measurement path is skipped as well.
    state["gpus"]["GPU-a"]["source"] = "nvml_power"
    d = nvidia_at(monkeypatch, gpus, 3.0)
    d.restore(state)
    assert warned(caplog, "measured via 'nvml_power' then") == 1
    gpus[0].energy_mj = 130_000
    assert energies(d.read(4.0))[("accelerator", "gpu0")] == pytest.approx(30.0)
    for bad in (None, [], {"gpus": []}, {"gpus": {"GPU-a": 3}}):
        d.restore(bad)  # type: ignore[arg-type]
    gpus[0].energy_mj = 160_000  # counting on as before: the bad states changed nothing
    assert energies(d.read(5.0))[("accelerator", "gpu0")] == pytest.approx(60.0)
