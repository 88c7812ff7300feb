"""Replay traces: validation with file:line messages, exact integrals, the sensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.devices.replay import TraceError, load_trace, open_replay, trace_energy_j

HEADER = "t_s,component,device,watts\n"

TRACE = HEADER + (
    "100,cpu,package-0,50\n"
    "100,accelerator,gpu0,300\n"
    "102,cpu,package-0,80\n"
    "103,accelerator,gpu0,100\n"
    "\n"
    "104,cpu,package-0,20\n"
    "105,dram,package-0,10\n"
)


def _trace_file(tmp_path: Path, text: str = TRACE) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_load_builds_piecewise_series(tmp_path: Path) -> None:
    trace = load_trace(_trace_file(tmp_path))
    assert trace.start_s == 100.0 and trace.end_s == 105.0
    assert set(trace.series) == {("cpu", "package-0"), ("accelerator", "gpu0"),
                                 ("dram", "package-0")}
    assert trace.series[("cpu", "package-0")].times_s == (100.0, 102.0, 104.0)
    assert trace.series[("cpu", "package-0")].watts_w == (50.0, 80.0, 20.0)


def test_trace_energy_is_the_exact_integral(tmp_path: Path) -> None:
    trace = load_trace(_trace_file(tmp_path))
    energy = trace_energy_j(trace, 100.0, 106.0)
    # cpu: 50*2 + 80*2 + 20*2 (holds after its last row); accelerator: 300*3 + 100*3; dram: 10*1
    assert energy[("cpu", "package-0")] == pytest.approx(300.0)
    assert energy[("accelerator", "gpu0")] == pytest.approx(1200.0)
    assert energy[("dram", "package-0")] == pytest.approx(10.0)
    partial = trace_energy_j(trace, 101.5, 102.5)
    assert partial[("cpu", "package-0")] == pytest.approx(0.5 * 50 + 0.5 * 80)
    assert partial[("dram", "package-0")] == 0.0  # before its first row: 0 W
    assert trace_energy_j(trace, 99.0, 100.0)[("cpu", "package-0")] == 0.0
    with pytest.raises(ValueError):
        trace_energy_j(trace, 2.0, 1.0)


def test_sensor_replays_in_monotonic_time(tmp_path: Path) -> None:
    sensor = open_replay(_trace_file(tmp_path), now_s=5000.0)
    trace = sensor.trace
    assert {(d.component, d.device, d.source) for d in sensor.describe()} == {
        ("cpu", "package-0", "replay"), ("accelerator", "gpu0", "replay"),
        ("dram", "package-0", "replay"),
    }
    assert all(r.energy_j == 0.0 for r in sensor.read(4999.0))  # before open
    for now_s in (5000.0, 5000.7, 5002.0, 5003.25, 5004.9, 5005.0, 5050.0):
        readings = sensor.read(now_s)
        expected = trace_energy_j(trace, 100.0, 100.0 + (now_s - 5000.0))
        assert {(r.component, r.device): r.energy_j for r in readings} == pytest.approx(expected)
        assert all(r.source == "replay" for r in readings)
    # After the last row each key holds its last watts: 45 s more of cpu at 20 W.
    final = {(r.component, r.device): r.energy_j for r in sensor.read(5050.0)}
    assert final[("cpu", "package-0")] == pytest.approx(300.0 + 44 * 20.0)


def test_same_instant_later_row_wins(tmp_path: Path) -> None:
    trace = load_trace(_trace_file(tmp_path, HEADER + "0,cpu,p,10\n0,cpu,p,30\n1,cpu,p,0\n"))
    assert trace_energy_j(trace, 0.0, 5.0)[("cpu", "p")] == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("", 1, "header"),
        ("time,component,device,watts\n0,cpu,p,1\n", 1, "header"),
        (HEADER, 1, "no data rows"),
        (HEADER + "0,cpu,p,1\nabc,cpu,p,1\n", 3, "t_s is not a number"),
        (HEADER + "0,cpu,p,1\n1,cpu,p,lots\n", 3, "watts is not a number"),
        (HEADER + "0,cpu,p,1\n\n1,cpu,p,-2\n", 4, "watts must be between 0 and 100000"),
        (HEADER + "0,cpu,p,1e308\n", 2, "watts must be between 0 and 100000"),
        (HEADER + "0,cpu,p,nan\n", 2, "finite"),
        (HEADER + "0,cpu,p,inf\n", 2, "finite"),
        (HEADER + "inf,cpu,p,1\n", 2, "finite"),
        (HEADER + "0,cpu,p,1\n4e8,cpu,p,1\n", 3, "ten years"),
        (HEADER + "0,cpu,p,1\n1,fan,p,1\n", 3, "unknown component 'fan'"),
        # the accelerator's name during development, before the first release
        (HEADER + "0,cpu,p,1\n1,gpu,gpu0,1\n", 3, "unknown component 'gpu'"),
        (HEADER + "0,cpu,p,1\n2,cpu,p,1\n1,accelerator,g,1\n", 4, "backwards"),
        (HEADER + "0,cpu,p\n", 2, "expected 4 fields"),
        (HEADER + "0,cpu,,1\n", 2, "device must not be empty"),
    ],
)
def test_every_validation_error_names_file_and_line(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    path = _trace_file(tmp_path, text)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert problem in message
    assert isinstance(info.value, ValueError)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.csv")
