"""Crash recovery of the other accelerators: AMD's accumulator and power path, Gaudi's
older checkpoints, and AWS Neuron, which has no counter (a short gap is estimated from
the power either side of it, a long one is not). Sensor A is checkpointed at its "kill
-9", B is opened mid-gap and restored from the JSON text, C never stops (the truth);
see :mod:`tests.helpers.checkpoint`."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from joulestat.devices.amd import AmdSensor, open_amd
from joulestat.devices.gaudi import GaudiSensor, open_gaudi
from joulestat.devices.neuron import RESUME_MAX_S, NeuronSensor, open_neuron
from joulestat.pipeline.sampler import Sampler
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdsmi
from tests.fakes.hlml import FakeHlml, FakeHpu
from tests.fakes.neuron import FakeNeuron
from tests.helpers.checkpoint import EXACT, energies, via_json, warned

GPU0, GPU1 = ("accelerator", "amdgpu0"), ("accelerator", "amdgpu1")


def _amd(monkeypatch: pytest.MonkeyPatch, fake: FakeAmdsmi, now_s: float) -> AmdSensor:
    fake.install(monkeypatch)
    sensor = open_amd(now_s, probe=lambda: fake.advance(0.5))
    assert isinstance(sensor, AmdSensor)
    return sensor


# --- AMD --------------------------------------------------------------------------------


def test_amd_accumulator_resumes_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """B's total = A's at the kill + what the accumulators counted since, to the count
    (the truth is the fake's own counters: each sensor's start-up probe moves them)."""
    fake = FakeAmdsmi([FakeAmdGpu(uuid="amd-a", accumulator=5_000_000, power_w=300.0),
                       FakeAmdGpu(uuid="amd-b", power_w=150.0)])
    a = _amd(monkeypatch, fake, 0.0)
    fake.advance(2.0)
    at_kill = energies(a.read(2.0))
    # amdgpu0 also counted amdgpu1's start-up probe (the fake advances every GPU)
    assert at_kill == pytest.approx({GPU0: 300.0 * 2.5, GPU1: 150.0 * 2.0}, rel=1e-4)
    state = via_json(a.checkpoint())
    assert set(state["gpus"]) == {"amd-a", "amd-b"}
    counted = [g.energy_j for g in fake.gpus]
    fake.advance(3.0)  # the gap
    b = _amd(monkeypatch, fake, 6.0)  # opened mid-gap: its probe runs the counters on too
    b.restore(state)
    fake.advance(4.0)
    got = energies(b.read(10.0))
    since = [g.energy_j - before for g, before in zip(fake.gpus, counted, strict=True)]
    assert got == pytest.approx({GPU0: at_kill[GPU0] + since[0],
                                 GPU1: at_kill[GPU1] + since[1]}, rel=EXACT)
    assert got[GPU0] == pytest.approx(300.0 * 10.5, rel=1e-4)  # 2.5 + 3 + 2 probes + 4 s


def test_amd_power_path_integrates_across_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Power rising linearly through the gap: one trapezoid equals the tick-by-tick sum."""
    fake = FakeAmdsmi([FakeAmdGpu(uuid="amd-p", counter_works=False, power_w=100.0)])
    a, c = _amd(monkeypatch, fake, 0.0), _amd(monkeypatch, fake, 0.0)
    assert a.capabilities.power_only
    for t in (1.0, 2.0):
        a.read(t)
        c.read(t)
    state = via_json(a.checkpoint())
    for t, watts in ((3.0, 120.0), (4.0, 140.0)):
        fake.gpus[0].power_w = watts
        c.read(t)
    b = _amd(monkeypatch, fake, 4.0)
    b.restore(state)
    fake.gpus[0].power_w = 160.0
    got, truth = energies(b.read(5.0)), energies(c.read(5.0))
    assert got == pytest.approx(truth, rel=EXACT)
    assert got[GPU0] == pytest.approx(200.0 + 110.0 + 130.0 + 150.0)


def test_amd_restore_skips_what_does_not_match(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdsmi([FakeAmdGpu(uuid="amd-a"), FakeAmdGpu(uuid="amd-b")])
    a = _amd(monkeypatch, fake, 0.0)
    fake.advance(1.0)
    a.read(1.0)
    state = via_json(a.checkpoint())
    state["gpus"]["amd-b"]["last"] = "12"  # damaged: amd-b starts from its baseline
    state["gpus"]["amd-gone"] = dict(state["gpus"]["amd-a"])
    b = _amd(monkeypatch, fake, 2.0)
    b.restore(state)
    assert warned(caplog, "amd-gone is not present") == 1
    assert warned(caplog, "amd-b ignored") == 1
    before = energies(b.read(2.0))
    fake.advance(1.0)
    after = energies(b.read(3.0))
    assert after[GPU1] - before[GPU1] == pytest.approx(300.0, rel=1e-4)
    assert after[GPU0] > 300.0 * 2.0  # restored: A's total plus the gap
    # The counter then, power now (the probe found it broken this time): not mixed.
    fake.gpus[0].counter_works = False
    d = _amd(monkeypatch, fake, 3.0)
    d.restore(state)
    assert warned(caplog, "measured via 'amdsmi' then, 'amdsmi_power' now") == 1
    for bad in (None, [], {"gpus": []}, {"gpus": {"amd-a": 3}}):
        d.restore(bad)  # type: ignore[arg-type]
    assert energies(d.read(4.0))[GPU0] == pytest.approx(300.0)  # since its open: 1 s


# --- Gaudi ------------------------------------------------------------------------------


def test_gaudi_resumes_from_a_checkpoint_written_before_vendor_sensor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``hpus`` items of older agents had no index and no power fields: still read."""
    hpus = [FakeHpu(uuid="hl-a", energy_mj=9_000_000)]
    FakeHlml(hpus).install(monkeypatch)
    b = open_gaudi(5.0)
    assert isinstance(b, GaudiSensor)
    b.restore({"hpus": {"hl-a": {"source": "hlml", "last": 8_000_000.0, "energy_j": 40.0}}})
    hpus[0].energy_mj = 9_500_000
    assert energies(b.read(6.0)) == {("accelerator", "gaudi0"): pytest.approx(1540.0)}
    assert set(via_json(b.checkpoint())["hpus"]["hl-a"]) == {"index", "source", "energy_j",
                                                             "last"}


# --- Neuron -----------------------------------------------------------------------------

NEURON = ("accelerator", "neuron0")


def _neuron(tmp_path: Path) -> tuple[FakeNeuron, NeuronSensor]:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0, "Inferentia2")
    fake.set_power(0, 40.0)
    sensor = open_neuron(tmp_path, 100.0)
    assert isinstance(sensor, NeuronSensor)
    return fake, sensor


def _reopened(tmp_path: Path, state: dict) -> NeuronSensor:
    sensor = open_neuron(tmp_path, 100.0)
    assert isinstance(sensor, NeuronSensor)
    sensor.restore(state)
    return sensor


def test_neuron_short_gap_is_the_trapezoid_of_the_power_either_side(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake, a = _neuron(tmp_path)
    a.read(0.0)
    assert energies(a.read(10.0))[NEURON] == pytest.approx(400.0)  # 40 W
    state = via_json(a.checkpoint())
    fake.set_power(0, 60.0)  # the driver's next minute, during the gap
    with caplog.at_level(logging.INFO):
        b = _reopened(tmp_path, state)
        got = energies(b.read(40.0))[NEURON]
    assert got == pytest.approx(400.0 + (40.0 + 60.0) / 2 * 30.0)
    assert "estimated from the power averages" in caplog.text
    assert energies(b.read(50.0))[NEURON] == pytest.approx(got + 600.0)  # ticks as before


def test_neuron_long_gap_is_not_estimated_and_the_total_carries_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake, a = _neuron(tmp_path)
    a.read(0.0)
    a.read(10.0)
    b = _reopened(tmp_path, via_json(a.checkpoint()))
    fake.set_power(0, 50.0)
    assert energies(b.read(10.0 + RESUME_MAX_S + 1.0))[NEURON] == pytest.approx(400.0)
    assert warned(caplog, "not counted") == 1
    assert energies(b.read(20.0 + RESUME_MAX_S + 1.0))[NEURON] == pytest.approx(900.0)


def test_neuron_restore_skips_what_does_not_match(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    _fake, a = _neuron(tmp_path)
    never_read = via_json(a.checkpoint())
    assert "last_s" not in never_read["devices"]["neuron0"]
    a.read(0.0)
    a.read(10.0)
    state = via_json(a.checkpoint())
    for bad, why in ((never_read, "'last_s' is not a finite number"),
                     ({"devices": {"neuron0": {**state["devices"]["neuron0"],
                                               "model": "AWS Trainium"}}}, "was 'AWS Trainium'"),
                     ({"devices": {"neuron0": {**state["devices"]["neuron0"],
                                               "measured_j": -1.0}}}, "is negative"),
                     ({"devices": {"neuron7": state["devices"]["neuron0"]}}, "not present")):
        b = _reopened(tmp_path, bad)
        assert warned(caplog, why) == 1, why
        b.read(20.0)
        assert energies(b.read(30.0))[NEURON] == pytest.approx(400.0)  # from its baseline


def test_a_restarted_sampler_over_neuron_covers_the_gap_without_going_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Through the sampler, as the daemon restores it: the first tick spans the gap and
    holds its estimate; no series "went backwards" (what an empty checkpoint caused)."""
    now = [0.0]
    fake, _unused = _neuron(tmp_path)

    def sampler() -> Sampler:
        sensor = open_neuron(tmp_path, 100.0)
        assert sensor is not None
        return Sampler([sensor], monotonic=lambda: now[0], wall=lambda: 1.7e9 + now[0])

    first = sampler()
    first.start()
    now[0] = 10.0
    first.tick()
    state = via_json(first.checkpoint())
    now[0] = 40.0
    second = sampler()
    assert second.restore(state) is True
    fake.set_power(0, 60.0)
    now[0] = 41.0
    [entry] = second.tick().entries
    assert entry.energy_j == pytest.approx((40.0 + 60.0) / 2 * 31.0)
    assert warned(caplog, "backwards") == 0
