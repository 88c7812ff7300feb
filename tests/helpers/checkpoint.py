"""Crash recovery checks: a sensor's checkpoint through JSON, and the fake hardware the
checkpoint tests share.

Every sensor test runs three instances over the same fake hardware: A reads until the
"kill -9" and is checkpointed; B is opened at restart (mid-gap, as the daemon would) and
restored from the JSON text of A's checkpoint; C never stops and is the ground truth. After
the gap B's cumulative energy must equal C's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from joulestat.devices.estimators import CpuModelSensor
from joulestat.devices.nvidia import NvidiaSensor, open_nvidia
from joulestat.devices.power_model import METHOD_CCF_VCPU, build_cpu_model
from joulestat.devices.rapl import RaplSensor, open_rapl
from joulestat.devices.sensor import Reading
from tests.fakes.nvml import FakeGpu, FakeNvml
from tests.fakes.powercap import FakePowercap
from tests.fakes.proc_stat import FakeProc

EXACT = 1e-12  # "to float precision": relative tolerance for sums taken in another order


def json_only(value: Any, where: str = "checkpoint") -> None:
    """Fail unless ``value`` is built only of str, int, float, list and dict."""
    assert not isinstance(value, bool) and value is not None, where
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            json_only(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            json_only(item, f"{where}[{i}]")
    else:
        assert isinstance(value, str | int | float), f"{where}: {type(value).__name__}"


def via_json(state: dict) -> dict:
    json_only(state)
    return json.loads(json.dumps(state))


def energies(readings: list[Reading]) -> dict[tuple[str, str], float]:
    return {(r.component, r.device): r.energy_j for r in readings}


def warned(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


RANGE_UJ = 100_000_000  # 100 J: small, so the counter wraps every few simulated seconds


class RaplHardware:
    """package-0 at 20 W and its dram at 3 W, raw counters set from simulated time."""

    def __init__(self, root: Path, range_uj: int = RANGE_UJ) -> None:
        self.tree = FakePowercap(root)
        self.range_uj = range_uj
        self.tree.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=range_uj)
        self.tree.add_zone("intel-rapl:0:0", "dram", max_energy_range_uj=range_uj)
        self.wraps = 0
        self.at(0.0)

    def at(self, t_s: float) -> None:
        for zone_id, start_uj, power_w in (("intel-rapl:0", 70_000_000, 20.0),
                                           ("intel-rapl:0:0", 1_000_000, 3.0)):
            absolute_uj = start_uj + round(power_w * t_s * 1e6)
            self.tree.set_energy_uj(zone_id, absolute_uj % self.range_uj)
            if zone_id == "intel-rapl:0":
                self.wraps = absolute_uj // self.range_uj


def rapl_at(hw: RaplHardware, now_s: float) -> RaplSensor:
    sensor = open_rapl(hw.tree.root, now_s=now_s)
    assert sensor is not None
    return sensor


def rapl_killed_at(hw: RaplHardware, t_s: float) -> dict:
    """Sensor A's checkpoint, through JSON: opened at 0 s, last read at ``t_s`` (its kill -9)."""
    a = rapl_at(hw, 0.0)
    hw.at(t_s)
    a.read(t_s)
    return via_json(a.checkpoint())


def rapl_restored(hw: RaplHardware, state: dict, now_s: float) -> RaplSensor:
    """Sensor B: opened at restart (``now_s``) and restored from ``state``."""
    b = rapl_at(hw, now_s)
    b.restore(state)
    return b


def nvidia_at(monkeypatch: pytest.MonkeyPatch, gpus: list[FakeGpu], now_s: float) -> NvidiaSensor:
    FakeNvml(gpus).install(monkeypatch)
    sensor = open_nvidia(now_s=now_s)
    assert sensor is not None
    return sensor


def ccf_cpu(proc: FakeProc) -> CpuModelSensor:
    return CpuModelSensor(proc.root, build_cpu_model(METHOD_CCF_VCPU, proc.threads))


TRACE = ("t_s,component,device,watts\n"
         "0,cpu,package-0,50\n0,accelerator,gpu0,300\n4,cpu,package-0,80\n6,accelerator,gpu0,100\n"
         "9,cpu,package-0,20\n")
