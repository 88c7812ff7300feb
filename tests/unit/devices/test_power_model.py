"""The bundled coefficients and the pure power functions built on them."""

from __future__ import annotations

import copy
import math
import tomllib
from typing import Any

import pytest

from joulestat.devices.power_model import (
    METHOD_CCF_VCPU,
    METHOD_TDP_CURVE,
    choose_cpu_method,
    cpu_power_w,
    default_models_path,
    dram_power_w,
    load_power_models,
    parse_power_models,
)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    with default_models_path().open("rb") as fh:
        return tomllib.load(fh)


def test_every_coefficient_table_has_a_citation(raw: dict[str, Any]) -> None:
    models = load_power_models()
    citations = [models.tdp_curve.points_citation, models.tdp_curve.fit_citation,
                 models.dram.citation, *(v.citation for v in models.vcpu.values())]
    for c in citations:
        assert c.source and c.url.startswith("https://") and c.date and c.retrieved
    assert set(models.vcpu) == {"aws", "gcp", "azure"}


def test_fitted_curve_reproduces_the_published_points() -> None:
    curve = load_power_models().tdp_curve
    for load, ratio in zip(curve.loads, curve.tdp_ratios, strict=True):
        assert curve.ratio(load) == pytest.approx(ratio, abs=0.003), load


def test_curve_rises_and_is_concave() -> None:
    curve = load_power_models().tdp_curve
    values = [curve.ratio(i / 100) for i in range(101)]
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    assert all(s > 0 for s in steps)
    assert all(later < earlier for earlier, later in zip(steps, steps[1:], strict=False))


def test_tdp_curve_scales_tdp_and_sockets_not_threads(raw: dict[str, Any]) -> None:
    fit = raw["cpu"]["tdp_curve"]["fit"]
    expected = 200.0 * (fit["a"] * math.log(1 + fit["k"] * 0.3) + fit["d"])
    assert cpu_power_w(METHOD_TDP_CURVE, 0.3, threads=8, tdp_w=200.0) == pytest.approx(expected)
    assert cpu_power_w(METHOD_TDP_CURVE, 0.3, threads=96, tdp_w=200.0) == pytest.approx(expected)
    assert cpu_power_w(METHOD_TDP_CURVE, 0.3, threads=8, tdp_w=200.0, sockets=2) == (
        pytest.approx(2 * expected)
    )


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_ccf_vcpu_is_linear_between_min_and_max(raw: dict[str, Any], cloud: str) -> None:
    table = raw["cpu"]["ccf_vcpu"][cloud]
    lo, hi = table["min_w"], table["max_w"]
    assert cpu_power_w(METHOD_CCF_VCPU, 0.0, threads=4, cloud=cloud) == pytest.approx(4 * lo)
    assert cpu_power_w(METHOD_CCF_VCPU, 1.0, threads=4, cloud=cloud) == pytest.approx(4 * hi)
    assert cpu_power_w(METHOD_CCF_VCPU, 0.25, threads=4, cloud=cloud) == (
        pytest.approx(4 * (lo + 0.25 * (hi - lo)))
    )


def test_unknown_or_missing_cloud_gets_the_aws_averages(raw: dict[str, Any]) -> None:
    aws = raw["cpu"]["ccf_vcpu"]["aws"]
    assert raw["cpu"]["ccf_vcpu"]["default_cloud"] == "aws"
    for cloud in (None, "", "oracle", "AWS"):
        assert cpu_power_w(METHOD_CCF_VCPU, 0.5, threads=2, cloud=cloud) == (
            pytest.approx(2 * (aws["min_w"] + 0.5 * (aws["max_w"] - aws["min_w"])))
        )


def test_idle_power_is_the_zero_load_estimate(raw: dict[str, Any]) -> None:
    d = raw["cpu"]["tdp_curve"]["fit"]["d"]
    assert cpu_power_w(METHOD_TDP_CURVE, 0.0, 16, tdp_w=150.0) == pytest.approx(150.0 * d)
    aws_min = raw["cpu"]["ccf_vcpu"]["aws"]["min_w"]
    assert cpu_power_w(METHOD_CCF_VCPU, 0.0, 16) == pytest.approx(16 * aws_min)


@pytest.mark.parametrize("load", [-0.01, 1.01, math.nan, math.inf])
def test_load_outside_zero_to_one_is_rejected(load: float) -> None:
    with pytest.raises(ValueError, match="load"):
        cpu_power_w(METHOD_CCF_VCPU, load, threads=1)


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="TDP"):
        cpu_power_w(METHOD_TDP_CURVE, 0.5, threads=4)
    with pytest.raises(ValueError, match="threads"):
        cpu_power_w(METHOD_CCF_VCPU, 0.5, threads=0)
    with pytest.raises(ValueError, match="method"):
        cpu_power_w("magic", 0.5, threads=4)
    with pytest.raises(ValueError, match="sockets"):
        cpu_power_w(METHOD_TDP_CURVE, 0.5, threads=4, tdp_w=100.0, sockets=0)


def test_dram_converts_w_per_gb_to_w_per_gib(raw: dict[str, Any]) -> None:
    w_per_gb = raw["dram"]["w_per_gb"]
    assert load_power_models().dram.w_per_gib == pytest.approx(w_per_gb * 1.073741824)
    assert dram_power_w(16 * 2**30) == pytest.approx(16 * w_per_gb * 2**30 / 1e9)
    with pytest.raises(ValueError):
        dram_power_w(0)


def test_method_choice() -> None:
    assert choose_cpu_method(is_vm=True, tdp_w=240.0)[0] == METHOD_CCF_VCPU
    assert choose_cpu_method(is_vm=False, tdp_w=None)[0] == METHOD_CCF_VCPU
    assert choose_cpu_method(is_vm=False, tdp_w=240.0)[0] == METHOD_TDP_CURVE


def test_vm_slice_of_a_big_host_is_not_charged_its_tdp() -> None:
    """Why VMs use ccf-vcpu: the TDP curve would charge a 2-vCPU guest the whole package."""
    whole_package_w = cpu_power_w(METHOD_TDP_CURVE, 0.5, threads=2, tdp_w=240.0)
    per_vcpu_w = cpu_power_w(METHOD_CCF_VCPU, 0.5, threads=2)
    assert per_vcpu_w < whole_package_w / 10


def _broken(raw: dict[str, Any], path: tuple[str, ...], key: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(raw)
    node = data
    for part in path:
        node = node[part]
    if value is None:
        del node[key]
    else:
        node[key] = value
    return data


@pytest.mark.parametrize(
    "path, key, value, message",
    [
        (("cpu", "ccf_vcpu", "gcp"), "source", None, "cpu.ccf_vcpu.gcp.source"),
        (("cpu", "ccf_vcpu", "azure"), "max_w", 0.5, "min_w < max_w"),
        (("cpu", "ccf_vcpu"), "default_cloud", "oracle", "default_cloud"),
        (("cpu", "tdp_curve", "fit"), "k", "fast", "cpu.tdp_curve.fit.k"),
        (("cpu", "tdp_curve", "points"), "loads", [0.0, 0.5, 0.4, 1.0], "loads"),
        (("dram",), "date", "", "dram.date"),
    ],
)
def test_bad_coefficient_files_say_which_key(
    raw: dict[str, Any], path: tuple[str, ...], key: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")) as info:
        parse_power_models(_broken(raw, path, key, value), origin="test.toml")
    assert "test.toml" in str(info.value)
