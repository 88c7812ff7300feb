"""The steady-state window of a serving trace, its verdict, the prefill/decode split and
request energy (joulestat.reports.steady_state), on traces from a fake server and a fake
power source whose true costs are known."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from joulestat.core.histogram import Histogram
from joulestat.core.serving_trace import (
    ServingTrace,
    TraceBuilder,
    TracePoint,
    trace_from_json,
    trace_to_json,
)
from joulestat.reports.steady_state import (
    MAX_CV,
    RequestEstimate,
    ServingAnalysis,
    SteadyWindow,
    TokenSplit,
    Verdict,
    WindowRule,
    analyse,
    analysis_to_json,
    estimate_request_j,
    histogram_quantile,
)

T0_S = 1_700_000_000.0
PROMPT_LENGTHS = Histogram(
    ((128.0, 30.0), (512.0, 70.0), (1024.0, 95.0), (2048.0, 100.0), (math.inf, 100.0)),
    sum=52_000.0, count=100.0)
OUTPUT_LENGTHS = Histogram(
    ((64.0, 10.0), (256.0, 60.0), (1024.0, 98.0), (4096.0, 100.0), (math.inf, 100.0)),
    sum=30_000.0, count=100.0)


@dataclass(frozen=True, slots=True)
class Fake:
    """A fake server's trace and the truth behind it."""

    trace: ServingTrace
    steady_start_s: float  # seconds after the first point
    steady_end_s: float
    steady_j_per_output_token: float


def load_share(t_s: float, ramp_s: float, steady_s: float, drain_s: float) -> float:
    """The server's load (0..1) at ``t_s`` seconds after the first point: a linear ramp,
    a plateau, a linear drain."""
    if t_s <= 0:
        return 0.0
    if t_s < ramp_s:
        return t_s / ramp_s
    if t_s <= ramp_s + steady_s:
        return 1.0
    return max(0.0, 1.0 - (t_s - ramp_s - steady_s) / drain_s)


def fake_server(*, ramp_s: float = 30, steady_s: float = 60, drain_s: float = 30,
                gauges: bool = True, rate: float = 800.0, base_w: float = 400.0,
                j_prompt: float = 0.02, j_output: float = 0.1, peak_running: int = 16,
                power_gap: tuple[float, float] | None = None,
                swing: Callable[[float], float] | None = None, seed: int = 7) -> Fake:
    """1 s ticks: output tokens at ``rate`` × load (2 % noise), prompt tokens at half
    that (5 % noise), power ``base_w + j_prompt·prompt_rate + j_output·output_rate``
    (1 % noise, times ``swing(t)``); power_s stands still inside ``power_gap``."""
    rng = random.Random(seed)
    total_s = int(ramp_s + steady_s + drain_s)
    points = []
    energy = output = prompt = requests = power_s = answered_s = 0.0
    for t in range(total_s + 1):
        load = load_share(t - 0.5, ramp_s, steady_s, drain_s)
        out = max(0.0, round(rate * load * (1 + rng.gauss(0, 0.02))))
        pro = max(0.0, round(0.5 * rate * load * (1 + rng.gauss(0, 0.05))))
        power = (base_w + j_prompt * pro + j_output * out) * (1 + rng.gauss(0, 0.01))
        energy += power * (swing(t) if swing else 1.0)
        output, prompt, requests = output + out, prompt + pro, requests + out / 300
        if not (power_gap and power_gap[0] < t <= power_gap[1]):
            power_s += 1.0
        answered_s += 1.0
        running = waiting = None
        if gauges:
            running = float(round(peak_running * load_share(t, ramp_s, steady_s, drain_s)))
            waiting = 0.0 if t >= ramp_s + steady_s else float(
                max(1, round(50 * (1 - t / (ramp_s + steady_s)))))
        points.append(TracePoint(T0_S + t, energy, output, prompt, requests, running,
                                 waiting, power_s, answered_s))
    start, end = int(ramp_s), int(ramp_s + steady_s)
    truth = ((points[end].energy_j - points[start].energy_j)
             / (points[end].output_tokens - points[start].output_tokens))
    trace = ServingTrace(1.0, tuple(points), PROMPT_LENGTHS, OUTPUT_LENGTHS)
    return Fake(trace, ramp_s, ramp_s + steady_s, truth)


def split_server(*, j_prompt: float = 0.1, j_output: float = 0.4, base_w: float = 50.0,
                 together: bool = False, duration_s: int = 600, seed: int = 11) -> ServingTrace:
    """Prompt and output rates varying on their own (incommensurate periods plus noise),
    or prompt = 0.25 × output when ``together``; power 2 % noise."""
    rng = random.Random(seed)
    points = []
    energy = output = prompt = requests = 0.0
    for t in range(duration_s + 1):
        out = max(0.0, 400 + 250 * math.sin(2 * math.pi * t / 61 + 1) + rng.gauss(0, 40))
        if together:
            pro = 0.25 * out
        else:
            pro = max(0.0, 1000 + 600 * math.sin(2 * math.pi * t / 97) + rng.gauss(0, 100))
        energy += (base_w + j_prompt * pro + j_output * out) * (1 + rng.gauss(0, 0.02))
        output, prompt, requests = output + out, prompt + pro, requests + out / 300
        points.append(TracePoint(T0_S + t, energy, output, prompt, requests, 8.0, 2.0,
                                 float(t + 1), float(t + 1)))
    return ServingTrace(1.0, tuple(points), PROMPT_LENGTHS, OUTPUT_LENGTHS)


def window_of(trace: ServingTrace) -> tuple[ServingAnalysis, SteadyWindow]:
    analysis = analyse(trace)
    assert analysis is not None and analysis.window is not None
    return analysis, analysis.window


# --- the window ---------------------------------------------------------------------


@pytest.mark.parametrize(("gauges", "rule"), [(True, WindowRule.BATCH_FULL),
                                              (False, WindowRule.TOKEN_RATE)])
def test_window_finds_the_steady_state_the_whole_job_misses(gauges: bool,
                                                            rule: WindowRule) -> None:
    fake = fake_server(gauges=gauges)
    analysis, window = window_of(fake.trace)
    assert window.rule is rule
    assert abs(window.span.start_s - T0_S - fake.steady_start_s) <= 3.0
    assert abs(window.span.end_s - T0_S - fake.steady_end_s) <= 3.0
    per_token = window.span.j_per_output_token
    assert per_token == pytest.approx(fake.steady_j_per_output_token, rel=0.05)
    whole = analysis.whole.j_per_output_token
    assert whole is not None
    assert abs(whole / fake.steady_j_per_output_token - 1) > 0.15
    assert window.verdict is Verdict.VALID and window.reason is None
    assert window.cv is not None and window.cv < MAX_CV and window.parts >= 5
    assert window.span.power_coverage == pytest.approx(1.0)
    assert window.span.metrics_coverage == pytest.approx(1.0)


def test_window_figures_per_token_and_request() -> None:
    _, window = window_of(fake_server().trace)
    span = window.span
    assert span.total_tokens == span.output_tokens + span.prompt_tokens
    assert span.j_per_prompt_token == pytest.approx(span.energy_j / span.prompt_tokens)
    assert span.j_per_total_token == pytest.approx(span.energy_j / span.total_tokens)
    assert span.j_per_request == pytest.approx(span.energy_j / span.requests)
    assert span.mean_power_w == pytest.approx(span.energy_j / span.length_s)


def test_missing_power_ticks_make_the_window_unstable() -> None:
    # 12 s of the 60 s steady stretch without a measured power tick: 80 % coverage
    _, window = window_of(fake_server(power_gap=(50.0, 62.0)).trace)
    assert window.verdict is Verdict.UNSTABLE
    assert window.span.power_coverage == pytest.approx(0.8, abs=0.03)
    assert window.reason is not None and "power" in window.reason
    assert "80" in window.reason


def test_swinging_power_makes_the_window_unstable() -> None:
    # ±10 % power, 20 s high then 20 s low, while the tokens stay steady
    fake = fake_server(swing=lambda t: 1.1 if (t // 20) % 2 == 0 else 0.9)
    _, window = window_of(fake.trace)
    assert window.verdict is Verdict.UNSTABLE
    assert window.cv is not None and window.cv > 2 * MAX_CV
    assert window.reason is not None and f"{window.cv * 100:.1f}" in window.reason


def test_short_steady_stretch_is_too_short() -> None:
    _, window = window_of(fake_server(steady_s=15).trace)
    assert window.verdict is Verdict.TOO_SHORT
    assert window.span.length_s < 30
    assert window.reason is not None and "15" in window.reason


def test_short_steady_stretch_is_too_short_without_gauges() -> None:
    _, window = window_of(fake_server(steady_s=15, gauges=False).trace)
    assert window.verdict is Verdict.TOO_SHORT


def test_halved_trace_still_finds_the_window() -> None:
    fake = fake_server()
    for gauges in (True, False):
        builder = TraceBuilder(1.0, max_points=64)
        for point in fake_server(gauges=gauges).trace.points:
            builder.append(point)
        trace = builder.trace()
        assert len(trace.points) < len(fake.trace.points) / 1.5
        times = [p.t_s for p in trace.points]
        coarsest_s = max(b - a for a, b in zip(times, times[1:], strict=False))
        _, window = window_of(trace)
        assert abs(window.span.start_s - T0_S - fake.steady_start_s) <= 2 * coarsest_s
        assert abs(window.span.end_s - T0_S - fake.steady_end_s) <= 2 * coarsest_s
        assert window.span.j_per_output_token == pytest.approx(
            fake.steady_j_per_output_token, rel=0.05)


def test_round_trip_through_json_gives_the_same_analysis() -> None:
    trace = fake_server().trace
    back = trace_from_json(json.loads(json.dumps(trace_to_json(trace))))
    first, second = analyse(trace), analyse(back)
    assert first is not None and second is not None
    a, b = analysis_to_json(first), analysis_to_json(second)
    assert a.keys() == b.keys()
    for part in ("steady_window", "whole_job", "token_split", "request_energy"):
        for key, value in a[part].items():
            if isinstance(value, float):
                assert b[part][key] == pytest.approx(value, rel=1e-3, abs=1e-6), (part, key)
            else:
                assert b[part][key] == value, (part, key)


def test_empty_and_one_point_traces_give_nothing() -> None:
    assert analyse(ServingTrace(1.0, ())) is None
    point = TracePoint(T0_S, 10.0, 5.0, 5.0, 1.0, 1.0, 0.0, 1.0, 1.0)
    assert analyse(ServingTrace(1.0, (point,))) is None


def test_no_tokens_means_no_window_or_no_load() -> None:
    idle = tuple(TracePoint(T0_S + t, 50.0 * t, 0.0, 0.0, 0.0, None, None, t, t)
                 for t in range(60))
    analysis = analyse(ServingTrace(1.0, idle))
    assert analysis is not None and analysis.window is None
    assert analysis.no_window is not None
    assert analysis.whole.j_per_output_token is None
    assert not analysis.split.separable
    assert analysis_to_json(analysis)["steady_window"] is None
    # gauges say the batch is full, but no token is counted
    busy = tuple(TracePoint(T0_S + t, 50.0 * t, 0.0, 0.0, 0.0, 8.0, 1.0, t, t)
                 for t in range(60))
    analysis = analyse(ServingTrace(1.0, busy))
    assert analysis is not None and analysis.window is not None
    assert analysis.window.verdict is Verdict.NO_LOAD
    assert analysis.window.span.j_per_output_token is None


# --- prefill versus decode ----------------------------------------------------------


def test_split_recovers_the_costs_of_prefill_and_decode() -> None:
    analysis = analyse(split_server())
    assert analysis is not None
    split = analysis.split
    assert split.separable and split.reason is None
    assert split.j_per_prefill_token == pytest.approx(0.1, rel=0.15)
    assert split.j_per_decode_token == pytest.approx(0.4, rel=0.15)
    assert split.base_w == pytest.approx(50.0, rel=0.15)
    assert split.bins == 120
    assert split.rate_correlation is not None and abs(split.rate_correlation) < 0.5
    for estimate, se in ((split.j_per_prefill_token, split.j_per_prefill_token_se),
                         (split.j_per_decode_token, split.j_per_decode_token_se)):
        assert estimate is not None and se is not None and 0 < se < 0.1 * estimate


def test_rates_moving_together_are_not_separable() -> None:
    analysis = analyse(split_server(together=True))
    assert analysis is not None
    split = analysis.split
    assert not split.separable and split.reason
    assert split.j_per_prefill_token is None and split.j_per_decode_token is None
    assert split.j_per_prefill_token_se is None and split.base_w is None
    assert analysis.requests.p50 is None and analysis.requests.reason
    figures = analysis_to_json(analysis)["token_split"]
    assert figures["separable"] is False and figures["j_per_decode_token"] is None


def test_split_skips_parts_without_measured_power() -> None:
    trace = split_server()
    # power_s stands still for the second half: those parts are left out
    half = len(trace.points) // 2
    points = tuple(p if i <= half else TracePoint(
        p.t_s, p.energy_j, p.output_tokens, p.prompt_tokens, p.requests, p.running,
        p.waiting, trace.points[half].power_s, p.answered_s)
        for i, p in enumerate(trace.points))
    analysis = analyse(ServingTrace(1.0, points))
    assert analysis is not None
    assert analysis.split.bins == 60
    assert analysis.split.j_per_decode_token == pytest.approx(0.4, rel=0.15)


# --- per request --------------------------------------------------------------------


def test_request_estimate_is_the_costs_times_the_lengths() -> None:
    analysis = analyse(split_server())
    assert analysis is not None
    split = analysis.split
    assert split.j_per_prefill_token is not None and split.j_per_decode_token is not None
    estimate = estimate_request_j(split, 1000, 250)
    assert estimate.energy_j == pytest.approx(
        1000 * split.j_per_prefill_token + 250 * split.j_per_decode_token)
    assert estimate.energy_j == pytest.approx(1000 * 0.1 + 250 * 0.4, rel=0.15)
    assert estimate.low_j < estimate.energy_j < estimate.high_j
    assert estimate_request_j(split, 0, 0) == RequestEstimate(0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="0 or more"):
        estimate_request_j(split, -1, 10)
    with pytest.raises(ValueError, match="not known"):
        estimate_request_j(TokenSplit(False, "rates move together", 10, 0.99), 10, 10)


def test_request_bounds_clip_at_zero() -> None:
    split = TokenSplit(True, None, 20, 0.1, 0.1, 0.04, 0.4, 0.19, 50.0, 1.0, 0.0)
    estimate = estimate_request_j(split, 0, 10)
    assert estimate.energy_j == pytest.approx(4.0)
    assert estimate.low_j == pytest.approx(0.2)
    assert estimate.high_j == pytest.approx(7.8)
    assert estimate_request_j(split, 100, 0).low_j == pytest.approx(2.0)
    assert estimate_request_j(
        TokenSplit(True, None, 20, 0.1, 0.1, 0.06, 0.4, 0.1, 50.0, 1.0, 0.0), 100, 0
    ).low_j == 0.0


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    # rank 50 falls in (128, 512] between 30 and 70: 128 + 384 × 20/40
    assert histogram_quantile(0.5, PROMPT_LENGTHS) == pytest.approx(320.0)
    # rank 99 in (1024, 2048] between 95 and 100: 1024 + 1024 × 4/5
    assert histogram_quantile(0.99, PROMPT_LENGTHS) == pytest.approx(1843.2)
    # rank 5 in the first bucket, from 0
    assert histogram_quantile(0.05, OUTPUT_LENGTHS) == pytest.approx(32.0)
    beyond = Histogram(((10.0, 50.0), (math.inf, 100.0)), 0.0, 100.0)
    assert histogram_quantile(0.9, beyond) == 10.0
    assert histogram_quantile(0.5, Histogram(((math.inf, 0.0),), 0.0, 0.0)) is None
    with pytest.raises(ValueError):
        histogram_quantile(1.5, PROMPT_LENGTHS)


def test_p50_and_p99_request_energy_from_the_histograms() -> None:
    analysis = analyse(split_server())
    assert analysis is not None
    split, requests = analysis.split, analysis.requests
    assert split.j_per_prefill_token is not None and split.j_per_decode_token is not None
    prompt_50, output_50 = 320.0, 64.0 + 192.0 * 40 / 50
    prompt_99, output_99 = 1843.2, 1024.0 + 3072.0 * 1 / 2
    assert requests.p50_prompt_tokens == pytest.approx(prompt_50)
    assert requests.p50_output_tokens == pytest.approx(output_50)
    assert requests.p99_output_tokens == pytest.approx(output_99)
    assert requests.p50 is not None and requests.p99 is not None
    assert requests.p50.energy_j == pytest.approx(
        split.j_per_prefill_token * prompt_50 + split.j_per_decode_token * output_50)
    assert requests.p99.energy_j == pytest.approx(
        split.j_per_prefill_token * prompt_99 + split.j_per_decode_token * output_99)
    assert requests.p99.energy_j == pytest.approx(0.1 * prompt_99 + 0.4 * output_99, rel=0.15)
    assert requests.p50.low_j <= requests.p50.energy_j <= requests.p50.high_j
    # ML.ENERGY's figure: the window's J per output token × the mean output length (300)
    assert analysis.window is not None
    per_token = analysis.window.span.j_per_output_token
    assert per_token is not None
    assert requests.mean_output_tokens == pytest.approx(300.0)
    assert requests.ml_energy_j == pytest.approx(per_token * 300.0)


def test_no_histograms_no_percentiles() -> None:
    trace = split_server()
    analysis = analyse(ServingTrace(1.0, trace.points))
    assert analysis is not None and analysis.split.separable
    assert analysis.requests.p50 is None and analysis.requests.p99 is None
    assert analysis.requests.reason
    # the mean output length then comes from the counted tokens and requests (300 each)
    assert analysis.requests.mean_output_tokens == pytest.approx(300.0, rel=0.01)


def test_json_has_the_documented_keys() -> None:
    analysis = analyse(fake_server().trace)
    assert analysis is not None
    out = analysis_to_json(analysis)
    json.dumps(out, allow_nan=False)
    steady = out["steady_window"]
    for key in ("start_s", "end_s", "length_s", "offset_s", "rule", "energy_j",
                "output_tokens", "prompt_tokens", "total_tokens", "requests",
                "j_per_output_token", "j_per_prompt_token", "j_per_total_token",
                "j_per_request", "power_coverage", "metrics_coverage", "cv", "parts",
                "verdict", "reason"):
        assert key in steady
    assert steady["rule"] == "batch_full" and steady["verdict"] == "valid"
    assert steady["offset_s"] == pytest.approx(30.0, abs=3.0)
    assert set(out) == {"steady_window", "no_window_reason", "whole_job", "token_split",
                        "request_energy"}
    assert out["whole_job"]["length_s"] == pytest.approx(120.0)
    for key in ("separable", "reason", "j_per_prefill_token", "j_per_prefill_token_se",
                "j_per_decode_token", "j_per_decode_token_se", "base_w", "base_w_se"):
        assert key in out["token_split"]
    for key in ("p50_j", "p50_low_j", "p50_high_j", "p99_j", "p99_low_j", "p99_high_j",
                "ml_energy_j", "mean_output_tokens"):
        assert key in out["request_energy"]
