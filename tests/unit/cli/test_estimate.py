"""``joulestat estimate`` as a user runs it, checked against hand computations: the CPU
curve and per-vCPU coefficients from the data files, defaults read from a fake
``/proc``, DRAM, the text that explains the number, and bad input (exit 2 naming the
flag, never a traceback). The real command runs in this process (tests/helpers/cli.py)."""

from __future__ import annotations

import csv
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import CliResult, invoke

REPO = Path(__file__).resolve().parents[3]
XEON = "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
XEON_ROW = "Intel Xeon Gold 6148"


def run(*args: str) -> CliResult:
    return invoke("estimate", *args)


def run_json(*args: str) -> dict[str, Any]:
    done = run(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def coefficients() -> dict[str, Any]:
    with (REPO / "agent" / "data" / "power_models.toml").open("rb") as fh:
        return tomllib.load(fh)


@pytest.fixture(scope="module")
def xeon_tdp_w() -> float:
    path = REPO / "agent" / "data" / "codecarbon" / "hardware" / "cpu_power.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        return next(float(r[1]) for r in csv.reader(fh) if r[0] == XEON_ROW)


@pytest.fixture()
def fake_proc(tmp_path: Path) -> Path:
    """A 6-thread, one-socket VM with 12 GiB, so defaults never depend on the test host."""
    root = tmp_path / "proc"
    root.mkdir()
    (root / "stat").write_text(
        "cpu  100 0 50 900 0 0 0 0 0 0\n" + "".join(f"cpu{n} 1 0 1 1 0 0 0 0 0 0\n"
                                                   for n in range(6))
    )
    (root / "cpuinfo").write_text("".join(
        f"processor\t: {n}\nmodel name\t: Fake Cloud CPU Z9\nphysical id\t: 0\n"
        f"flags\t\t: fpu sse2 hypervisor\n\n" for n in range(6)
    ))
    (root / "meminfo").write_text(f"MemTotal:       {12 * 1024 * 1024} kB\n")
    return root


def test_tdp_curve_matches_the_curve_computed_by_hand(
    coefficients: dict[str, Any], xeon_tdp_w: float, fake_proc: Path
) -> None:
    out = run_json("cpu", "--model", XEON, "--threads", "4", "--load", "50", "--bare-metal",
                   "--procfs-root", str(fake_proc))
    fit = coefficients["cpu"]["tdp_curve"]["fit"]
    expected = xeon_tdp_w * (fit["a"] * math.log(1 + fit["k"] * 0.5) + fit["d"])
    assert out["method"] == "tdp-curve"
    assert out["watts"] == pytest.approx(expected, rel=1e-9)
    assert out["idle_watts"] == pytest.approx(xeon_tdp_w * fit["d"], rel=1e-9)
    assert out["tdp"]["matched_name"] == XEON_ROW
    assert out["inputs"] | {"model": XEON, "threads": 4, "sockets": 1, "load_pct": 50.0} == (
        out["inputs"]
    )


def test_same_cpu_on_a_vm_uses_per_vcpu_coefficients(
    coefficients: dict[str, Any], fake_proc: Path
) -> None:
    out = run_json("cpu", "--model", XEON, "--threads", "4", "--load", "50",
                   "--procfs-root", str(fake_proc))  # the fake host is a VM
    aws = coefficients["cpu"]["ccf_vcpu"]["aws"]
    assert out["method"] == "ccf-vcpu"
    assert out["watts"] == pytest.approx(4 * (aws["min_w"] + 0.5 * (aws["max_w"] - aws["min_w"])))
    assert out["tdp"]["used"] is False


def test_cloud_flag_selects_that_clouds_coefficients(
    coefficients: dict[str, Any], fake_proc: Path
) -> None:
    out = run_json("cpu", "--threads", "2", "--load", "100", "--cloud", "gcp",
                   "--procfs-root", str(fake_proc))
    assert out["watts"] == pytest.approx(2 * coefficients["cpu"]["ccf_vcpu"]["gcp"]["max_w"])


def test_defaults_come_from_procfs(coefficients: dict[str, Any], fake_proc: Path) -> None:
    out = run_json("cpu", "--load", "0", "--procfs-root", str(fake_proc))
    assert out["inputs"]["model"] == "Fake Cloud CPU Z9"
    assert out["inputs"]["threads"] == 6 and out["inputs"]["is_vm"] is True
    assert out["watts"] == pytest.approx(6 * coefficients["cpu"]["ccf_vcpu"]["aws"]["min_w"])


def test_text_output_explains_the_number(fake_proc: Path, xeon_tdp_w: float) -> None:
    done = run("cpu", "--model", XEON, "--threads", "4", "--load", "50", "--bare-metal",
               "--procfs-root", str(fake_proc))
    assert done.returncode == 0, done.stderr
    assert "tdp-curve" in done.stdout
    assert XEON_ROW in done.stdout
    assert f"{xeon_tdp_w:g} W TDP x (" in done.stdout  # the formula with numbers filled in
    assert "Boavizta" in done.stdout


def test_dram_estimate(coefficients: dict[str, Any], fake_proc: Path) -> None:
    w_per_gib = coefficients["dram"]["w_per_gb"] * 2**30 / 1e9
    assert run_json("dram", "--gib", "16")["watts"] == pytest.approx(16 * w_per_gib)
    mine = run_json("dram", "--procfs-root", str(fake_proc))
    assert mine["watts"] == pytest.approx(12 * w_per_gib)


@pytest.mark.parametrize(
    "args, flag",
    [
        (("cpu", "--threads", "4", "--load", "150"), "--load"),
        (("cpu", "--threads", "4", "--load", "-1"), "--load"),
        (("cpu", "--threads", "0", "--load", "50"), "--threads"),
        (("dram", "--gib", "0"), "--gib"),
        (("cpu", "--model", "Fake Cloud CPU Z9", "--threads", "2", "--load", "5",
          "--method", "tdp-curve"), "--tdp"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(args: tuple[str, ...], flag: str,
                                           fake_proc: Path) -> None:
    done = run(*args, "--procfs-root", str(fake_proc))
    assert done.returncode == 2
    assert flag in done.stderr
    assert "Traceback" not in done.stderr


def test_help_describes_the_flags() -> None:
    done = run("cpu", "--help")
    assert done.returncode == 0
    for flag in ("--model", "--threads", "--load", "--method", "--cloud", "--json"):
        assert flag in done.stdout
