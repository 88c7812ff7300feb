"""A serving job's energy per token in its steady state, and per prompt and output token.

Why: whole-job energy per token counts warm-up, ramp-up, the drain and idle gaps, in
which the node's base power is spread over few tokens, so the same server measured for
2 minutes and for 20 gives different figures (issue 49). The ML.ENERGY benchmark
(ml-energy/benchmark, leaderboard v3) instead divides the energy inside a *steady-state
window* by the tokens generated in it: the window opens once the batch is full and
closes when the queue starts to drain. This module finds that window in a job's
:class:`~joulestat.core.serving_trace.ServingTrace`, judges whether its figure can be
trusted, and splits the job's energy into a cost per prefill (prompt) token and per
decode (output) token, from which a request's energy follows from its lengths.

**The window.** Two rules, the first that applies:

* ``batch_full`` (the engine exposes its gauges: ``running`` known at half the points or
  more, and above 0 somewhere): the plateau is 95 % of the highest ``running`` seen
  (:data:`BATCH_FULL_SHARE`; ``max_num_seqs`` in ML.ENERGY's terms, less a margin for a
  request finishing before the next is scheduled). The window is the longest stretch of
  points at the plateau, a dip of at most :data:`MERGE_GAP_S` not ending it: it opens at
  the first point where the batch is full and closes at the last one before ``running``
  falls below the plateau for good, which is when the queue has drained (``waiting`` 0)
  and requests finish without being replaced.
* ``token_rate`` (no gauges): the output-token rate smoothed over a centred
  :data:`SMOOTH_S` span (centred, so a ramp's edge is not shifted), the plateau rate being
  the median of the smoothed rates at or above half the highest one (the upper part: the
  ramps' lower halves and idle gaps do not drag it down), then re-read
  :data:`PLATEAU_ROUNDS` times as the median of the rates at or above 90 % of it (a short
  plateau between long ramps would otherwise be read low, and the window widened into
  the ramps). The window is the longest
  stretch at or above 90 % of the plateau (:data:`RATE_STAY_SHARE`; short dips merged as
  above), trimmed at both ends to the first and last point at or above 95 %
  (:data:`RATE_ENTER_SHARE`). This hysteresis keeps a stretch whole through the noise of
  a steady rate, while its ends, where a ramp meets the plateau, are placed within a
  tick or two of the corner rather than 10 % of the ramp's length early.

**Its figures and verdict.** Inside the window (differences of its two end points, as
the trace is cumulative): energy, output, prompt and total tokens, requests, and J per
output, prompt and total token and per request (None where the count is 0), beside the
same figures for the whole trace (first point to last). The window is judged:

* ``no_load``: no output token was counted in it;
* ``too_short``: shorter than :data:`MIN_WINDOW_S`, or fewer than
  :data:`MIN_SUB_WINDOWS` parts (below);
* ``unstable``: power measured (``power_s``) or the engine answering (``answered_s``) for
  less than :data:`MIN_COVERAGE` of it, or J per output token varying by
  :data:`MAX_CV` or more between its parts (Aitra Meter's rule: a figure is stable when
  the coefficient of variation is under 3 %). The parts are consecutive, equal and
  non-overlapping, each :data:`SUB_WINDOW_S` or longer, and at least
  :data:`MIN_SUB_WINDOW_INTERVALS` trace intervals, so a trace halved to coarse ticks
  still compares parts of several points; CV = sample standard deviation / mean;
* ``valid`` otherwise. The reason names the figure that failed, in a short sentence.

**Prefill versus decode.** Over the whole trace, consecutive points are binned into
parts of :data:`SPLIT_BIN_S` or more (single ticks are too noisy), parts without tokens
(idle: a different base power) or with power or metrics coverage under
:data:`MIN_COVERAGE` are left out, and a weighted least-squares fit of mean power on the
token rates, ``P = base_w + j_prefill·prompt_rate + j_decode·output_rate`` (weights:
each part's seconds, i.e. ``ΔE = base_w·Δt + j_prefill·Δprompt + j_decode·Δoutput``),
gives the two costs with standard errors from the residual variance and
``(XᵀWX)⁻¹`` (3×3, solved here by cofactors). The split is reported only when it is
separable: at least :data:`MIN_SPLIT_BINS` parts, prompt and output rates not moving
together (|correlation| at most :data:`MAX_RATE_CORRELATION`, normalised ``XᵀWX`` not
near-singular), both costs positive, and each standard error at most
:data:`MAX_RELATIVE_SE` of its estimate. Otherwise the figures are None and the reason
says why: a split of collinear rates is any split at all, and printing one would mislead.

**Per request.** A request of ``p`` prompt and ``o`` output tokens costs
``p·j_prefill + o·j_decode``, bounded by ± :data:`BOUND_SE` standard errors (with the two
costs' covariance; low clipped at 0). This is the energy the request *adds*: the base
power is not in it. The p50 and p99 requests' energies take the p-quantile of each length
histogram (Prometheus ``histogram_quantile``: linear inside a bucket) and add them, which
assumes prompt and output lengths comonotone (the longest prompts also have the longest
outputs); for independent lengths the true p99 of the sum is lower, so it is an upper
reading. ML.ENERGY's own per-request figure is beside them: the window's J per output
token times the mean output length, base power included.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from joulestat.core.histogram import Histogram
from joulestat.core.histogram import histogram_quantile as served_quantile
from joulestat.core.serving_trace import ServingTrace, TracePoint

__all__ = [
    "RequestEnergy", "RequestEstimate", "ServingAnalysis", "Span", "SteadyWindow", "TokenSplit",
    "Verdict", "WindowRule", "analyse", "analysis_to_json", "estimate_request_j",
    "histogram_quantile",
]

# The window.
BATCH_FULL_SHARE = 0.95  # of the highest `running` seen: the batch is full
GAUGE_SHARE = 0.5  # of the points with `running` known, for batch_full to apply
SMOOTH_S = 5.0  # centred span the output-token rate is smoothed over (token_rate)
PLATEAU_FLOOR_SHARE = 0.5  # of the highest smoothed rate: the upper part the plateau is read from
RATE_STAY_SHARE = 0.90  # of the plateau rate: a stretch continues while the rate stays above
RATE_ENTER_SHARE = 0.95  # of the plateau rate: where the stretch's ends are placed
PLATEAU_ROUNDS = 3  # times the plateau rate is re-read from the rates near it
MERGE_GAP_S = 10.0  # a dip at most this long does not end a window
# Its verdict.
MIN_WINDOW_S = 30.0
SUB_WINDOW_S = 10.0
MIN_SUB_WINDOW_INTERVALS = 2
MIN_SUB_WINDOWS = 3
MAX_CV = 0.03
MIN_COVERAGE = 0.95
# Prefill versus decode.
SPLIT_BIN_S = 5.0
MIN_SPLIT_BINS = 6
MAX_RATE_CORRELATION = 0.95
NEAR_SINGULAR_DET = 1e-8
MAX_RELATIVE_SE = 0.5
BOUND_SE = 2.0  # request bounds: this many standard errors either side

_EPS_S = 1e-6


class WindowRule(StrEnum):
    """How the steady window was found."""

    BATCH_FULL = "batch_full"
    TOKEN_RATE = "token_rate"


class Verdict(StrEnum):
    """Whether a steady window's figures can be read as the job's steady state."""

    VALID = "valid"
    UNSTABLE = "unstable"
    TOO_SHORT = "too_short"
    NO_LOAD = "no_load"


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


@dataclass(frozen=True, slots=True)
class Span:
    """The job between two trace points: the differences of their cumulative figures."""

    start_s: float  # Unix seconds
    end_s: float
    energy_j: float
    output_tokens: float
    prompt_tokens: float
    requests: float
    power_s: float  # seconds of it covered by a measured power tick
    answered_s: float  # seconds of it covered by a fresh answer of the engine

    @classmethod
    def between(cls, first: TracePoint, last: TracePoint) -> Span:
        return cls(first.t_s, last.t_s, last.energy_j - first.energy_j,
                   last.output_tokens - first.output_tokens,
                   last.prompt_tokens - first.prompt_tokens, last.requests - first.requests,
                   last.power_s - first.power_s, last.answered_s - first.answered_s)

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def total_tokens(self) -> float:
        return self.output_tokens + self.prompt_tokens

    @property
    def j_per_output_token(self) -> float | None:
        return _ratio(self.energy_j, self.output_tokens)

    @property
    def j_per_prompt_token(self) -> float | None:
        return _ratio(self.energy_j, self.prompt_tokens)

    @property
    def j_per_total_token(self) -> float | None:
        return _ratio(self.energy_j, self.total_tokens)

    @property
    def j_per_request(self) -> float | None:
        return _ratio(self.energy_j, self.requests)

    @property
    def mean_power_w(self) -> float | None:
        return _ratio(self.energy_j, self.length_s)

    @property
    def power_coverage(self) -> float | None:
        share = _ratio(self.power_s, self.length_s)
        return None if share is None else min(max(share, 0.0), 1.0)

    @property
    def metrics_coverage(self) -> float | None:
        share = _ratio(self.answered_s, self.length_s)
        return None if share is None else min(max(share, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class SteadyWindow:
    """The steady-state window, its figures and whether they can be trusted (``reason``
    names what failed; None when valid)."""

    span: Span
    rule: WindowRule
    cv: float | None  # of J per output token between the parts
    part_s: float  # the parts' length
    parts: int
    verdict: Verdict
    reason: str | None


@dataclass(frozen=True, slots=True)
class TokenSplit:
    """Energy per prefill and per decode token and the base power, with standard errors;
    all None unless ``separable`` (``reason`` says why not)."""

    separable: bool
    reason: str | None
    bins: int  # parts of the trace the fit used
    rate_correlation: float | None  # of the parts' prompt and output token rates
    j_per_prefill_token: float | None = None
    j_per_prefill_token_se: float | None = None
    j_per_decode_token: float | None = None
    j_per_decode_token_se: float | None = None
    base_w: float | None = None
    base_w_se: float | None = None
    prefill_decode_cov: float | None = None  # covariance of the two costs, J² per token²


@dataclass(frozen=True, slots=True)
class RequestEstimate:
    """A request's energy and its bounds (± :data:`BOUND_SE` standard errors)."""

    energy_j: float
    low_j: float
    high_j: float


@dataclass(frozen=True, slots=True)
class RequestEnergy:
    """Energy per request: the p50 and p99 requests' from the split and the length
    histograms, and ML.ENERGY's figure (window J per output token × mean output length);
    ``reason`` says why the percentiles are missing."""

    p50: RequestEstimate | None
    p99: RequestEstimate | None
    p50_prompt_tokens: float | None
    p50_output_tokens: float | None
    p99_prompt_tokens: float | None
    p99_output_tokens: float | None
    mean_output_tokens: float | None
    ml_energy_j: float | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class ServingAnalysis:
    """One trace analysed: the steady window (None when none was found, ``no_window``
    saying why), the whole trace's figures, the prefill/decode split and request
    figures."""

    window: SteadyWindow | None
    no_window: str | None
    whole: Span
    split: TokenSplit
    requests: RequestEnergy


# --- the window ---------------------------------------------------------------------


def _stretches(flags: Sequence[bool], times: Sequence[float]) -> list[tuple[int, int]]:
    """Maximal stretches of flagged points as (first, last) indices, two stretches at most
    :data:`MERGE_GAP_S` apart merged."""
    found: list[tuple[int, int]] = []
    start: int | None = None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            found.append((start, i - 1))
            start = None
    if start is not None:
        found.append((start, len(flags) - 1))
    merged: list[tuple[int, int]] = []
    for first, last in found:
        if merged and times[first] - times[merged[-1][1]] <= MERGE_GAP_S + _EPS_S:
            merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return merged


def _longest(stretches: list[tuple[int, int]], times: Sequence[float]) -> tuple[int, int] | None:
    if not stretches:
        return None
    return max(stretches, key=lambda s: (times[s[1]] - times[s[0]], s[1] - s[0], -s[0]))


def _batch_full(points: Sequence[TracePoint], times: Sequence[float]) -> tuple[int, int] | None:
    running = [p.running for p in points]
    known = [r for r in running if r is not None]
    if len(known) < GAUGE_SHARE * len(points) or max(known, default=0.0) <= 0:
        return None
    level = BATCH_FULL_SHARE * max(known)
    return _longest(_stretches([r is not None and r >= level for r in running], times), times)


def _smoothed_rates(points: Sequence[TracePoint], times: Sequence[float]) -> list[float]:
    """Output tokens per second over a centred :data:`SMOOTH_S` span around each point
    (one neighbour each side at least)."""
    half = SMOOTH_S / 2
    last = len(points) - 1
    rates = []
    for i, t in enumerate(times):
        lo = bisect.bisect_left(times, t - half - _EPS_S)
        hi = bisect.bisect_right(times, t + half + _EPS_S) - 1
        lo, hi = min(lo, max(i - 1, 0)), max(hi, min(i + 1, last))
        span_s = times[hi] - times[lo]
        tokens = points[hi].output_tokens - points[lo].output_tokens
        rates.append(max(tokens, 0.0) / span_s if span_s > 0 else 0.0)
    return rates


def _token_rate(points: Sequence[TracePoint], times: Sequence[float]) -> tuple[int, int] | None:
    rates = _smoothed_rates(points, times)
    top = max(rates)
    if top <= 0:
        return None
    plateau = statistics.median(r for r in rates if r >= PLATEAU_FLOOR_SHARE * top)
    for _ in range(PLATEAU_ROUNDS):  # re-centre on the plateau: short ones drag the first down
        plateau = statistics.median(r for r in rates if r >= RATE_STAY_SHARE * plateau)
    found = _longest(_stretches([r >= RATE_STAY_SHARE * plateau for r in rates], times), times)
    if found is None:
        return None
    first, last = found
    inside = [i for i in range(first, last + 1) if rates[i] >= RATE_ENTER_SHARE * plateau]
    return (inside[0], inside[-1]) if inside else found


def _typical_interval_s(times: Sequence[float], fallback_s: float) -> float:
    steps = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    return statistics.median(steps) if steps else fallback_s


def _parts(times: Sequence[float], first: int, last: int,
           part_s: float) -> list[tuple[int, int]]:
    """The window cut into equal consecutive parts at least ``part_s`` long, each ending
    at the point nearest its boundary."""
    length_s = times[last] - times[first]
    count = int(length_s / part_s + 1e-9) if part_s > 0 else 0
    if count < 1:
        return []
    bounds = [first]
    for k in range(1, count):
        target = times[first] + k * length_s / count
        j = bisect.bisect_left(times, target, first, last + 1)
        if j > first and (j > last or target - times[j - 1] <= times[j] - target):
            j -= 1
        if bounds[-1] < j < last:
            bounds.append(j)
    bounds.append(last)
    return list(zip(bounds, bounds[1:], strict=False))


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _judge(points: Sequence[TracePoint], times: Sequence[float], first: int, last: int,
           rule: WindowRule, interval_s: float) -> SteadyWindow:
    span = Span.between(points[first], points[last])
    part_s = max(SUB_WINDOW_S, MIN_SUB_WINDOW_INTERVALS * interval_s)
    parts = _parts(times, first, last, part_s)
    per_token = [_ratio(points[b].energy_j - points[a].energy_j,
                        points[b].output_tokens - points[a].output_tokens) for a, b in parts]
    cv = None
    if len(per_token) >= 2 and all(v is not None for v in per_token):
        values = [v for v in per_token if v is not None]
        mean = statistics.fmean(values)
        cv = statistics.stdev(values) / mean if mean > 0 else None

    def window(verdict: Verdict, reasons: list[str]) -> SteadyWindow:
        return SteadyWindow(span, rule, cv, part_s, len(parts), verdict,
                            "; ".join(reasons) if reasons else None)

    if span.output_tokens <= 0:
        return window(Verdict.NO_LOAD, ["no output token counted in the window"])
    short = []
    if span.length_s < MIN_WINDOW_S - _EPS_S:
        short.append(f"steady window lasts {span.length_s:.0f} s "
                     f"(at least {MIN_WINDOW_S:.0f} s needed)")
    if len(parts) < MIN_SUB_WINDOWS:
        plural = "" if len(parts) == 1 else "s"
        short.append(f"{len(parts)} part{plural} of {part_s:.0f} s in the window "
                     f"(at least {MIN_SUB_WINDOWS} needed)")
    if short:
        return window(Verdict.TOO_SHORT, short)
    unstable = []
    power, metrics = span.power_coverage or 0.0, span.metrics_coverage or 0.0
    if power < MIN_COVERAGE:
        unstable.append(f"power measured for {_pct(power)} of the window "
                        f"(at least {_pct(MIN_COVERAGE)} needed)")
    if metrics < MIN_COVERAGE:
        unstable.append(f"engine metrics answered for {_pct(metrics)} of the window "
                        f"(at least {_pct(MIN_COVERAGE)} needed)")
    if any(v is None for v in per_token):
        unstable.append(f"no output token in some {part_s:.0f} s parts of the window")
    elif cv is None or cv >= MAX_CV:
        shown = "an undefined amount" if cv is None else f"{cv * 100:.1f} %"
        unstable.append(f"J per output token varies {shown} between {part_s:.0f} s parts "
                        f"(under {MAX_CV * 100:.0f} % needed)")
    return window(Verdict.UNSTABLE if unstable else Verdict.VALID, unstable)


# --- prefill versus decode ----------------------------------------------------------


def _det3(m: Sequence[Sequence[float]]) -> float:
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))


def _inverse3(m: Sequence[Sequence[float]]) -> list[list[float]] | None:
    det = _det3(m)
    if det == 0 or not math.isfinite(det):
        return None
    cofactor = [[(m[(i + 1) % 3][(j + 1) % 3] * m[(i + 2) % 3][(j + 2) % 3]
                  - m[(i + 1) % 3][(j + 2) % 3] * m[(i + 2) % 3][(j + 1) % 3])
                 for j in range(3)] for i in range(3)]
    return [[cofactor[j][i] / det for j in range(3)] for i in range(3)]


def _split_rows(points: Sequence[TracePoint],
                times: Sequence[float]) -> list[tuple[float, float, float, float]]:
    """(seconds, prompt rate, output rate, mean power) of each part with load and
    measured power."""
    rows = []
    first = 0
    for last in range(1, len(points)):
        if times[last] - times[first] < SPLIT_BIN_S - _EPS_S:
            continue
        span = Span.between(points[first], points[last])
        first = last
        if span.total_tokens <= 0:
            continue
        if (span.power_coverage or 0.0) < MIN_COVERAGE:
            continue
        if (span.metrics_coverage or 0.0) < MIN_COVERAGE:
            continue
        seconds = span.length_s
        rows.append((seconds, span.prompt_tokens / seconds, span.output_tokens / seconds,
                     span.energy_j / seconds))
    return rows


def _split(points: Sequence[TracePoint], times: Sequence[float]) -> TokenSplit:
    rows = _split_rows(points, times)
    bins = len(rows)

    def no(reason: str, correlation: float | None = None) -> TokenSplit:
        return TokenSplit(False, reason, bins, correlation)

    if bins < MIN_SPLIT_BINS:
        return no(f"{bins} parts of {SPLIT_BIN_S:.0f} s with load and measured power "
                  f"(at least {MIN_SPLIT_BINS} needed)")
    prompt = [r[1] for r in rows]
    output = [r[2] for r in rows]
    try:
        correlation = statistics.correlation(prompt, output)
    except statistics.StatisticsError:
        which = "prompt" if max(prompt) == min(prompt) else "output"
        return no(f"the {which} token rate does not vary, so its cost cannot be told "
                  "from the base power")
    if abs(correlation) > MAX_RATE_CORRELATION:
        return no(f"prompt and output token rates move together (correlation "
                  f"{correlation:.2f}, at most {MAX_RATE_CORRELATION:.2f} to separate them)",
                  correlation)
    xs = [(1.0, r[1], r[2]) for r in rows]
    weights = [r[0] for r in rows]
    ys = [r[3] for r in rows]
    xtx = [[sum(w * x[i] * x[j] for w, x in zip(weights, xs, strict=True)) for j in range(3)]
           for i in range(3)]
    xty = [sum(w * x[i] * y for w, x, y in zip(weights, xs, ys, strict=True)) for i in range(3)]
    scale = [math.sqrt(xtx[i][i]) for i in range(3)]
    normalised = [[xtx[i][j] / (scale[i] * scale[j]) for j in range(3)] for i in range(3)]
    inverse = _inverse3(xtx)
    if inverse is None or _det3(normalised) < NEAR_SINGULAR_DET:
        return no("the token rates are nearly constant or proportional: the fit is "
                  "near-singular", correlation)
    beta = [sum(inverse[i][j] * xty[j] for j in range(3)) for i in range(3)]
    residual = sum(w * (y - sum(b * xi for b, xi in zip(beta, x, strict=True))) ** 2
                   for w, x, y in zip(weights, xs, ys, strict=True))
    variance = residual / (bins - 3)
    se = [math.sqrt(max(variance * inverse[i][i], 0.0)) for i in range(3)]
    for index, name in ((1, "prefill"), (2, "decode")):
        if beta[index] <= 0:
            return no(f"the fitted energy per {name} token is not positive "
                      f"({beta[index]:.3g} J)", correlation)
        if se[index] > MAX_RELATIVE_SE * beta[index]:
            return no(f"energy per {name} token uncertain: its standard error is "
                      f"{_pct(se[index] / beta[index])} of the estimate "
                      f"(at most {_pct(MAX_RELATIVE_SE)})", correlation)
    return TokenSplit(True, None, bins, correlation, beta[1], se[1], beta[2], se[2], beta[0],
                      se[0], variance * inverse[1][2])


# --- per request --------------------------------------------------------------------


def estimate_request_j(split: TokenSplit, prompt_tokens: float,
                       output_tokens: float) -> RequestEstimate:
    """The energy a request of these lengths adds (base power not included), with bounds
    ± :data:`BOUND_SE` standard errors; ValueError when the split is not separable or a
    length is negative."""
    if (not split.separable or split.j_per_prefill_token is None
            or split.j_per_decode_token is None):
        raise ValueError("energy per prefill and decode token not known for this trace: "
                         f"{split.reason or 'not separable'}")
    if not (prompt_tokens >= 0 and output_tokens >= 0):  # also refuses NaN
        raise ValueError(f"token counts must be 0 or more, not prompt {prompt_tokens!r} and "
                         f"output {output_tokens!r}")
    energy = prompt_tokens * split.j_per_prefill_token + output_tokens * split.j_per_decode_token
    se_prefill = split.j_per_prefill_token_se or 0.0
    se_decode = split.j_per_decode_token_se or 0.0
    variance = (prompt_tokens ** 2 * se_prefill ** 2 + output_tokens ** 2 * se_decode ** 2
                + 2 * prompt_tokens * output_tokens * (split.prefill_decode_cov or 0.0))
    spread = BOUND_SE * math.sqrt(max(variance, 0.0))
    return RequestEstimate(energy, max(energy - spread, 0.0), energy + spread)


def histogram_quantile(q: float, histogram: Histogram) -> float | None:
    """The q-quantile of a length histogram as Prometheus' ``histogram_quantile`` reads
    it (:func:`joulestat.core.histogram.histogram_quantile`, the one reading of a
    served histogram: latency percentiles use it too)."""
    return served_quantile(q, histogram)


def _request_energy(trace: ServingTrace, whole: Span, window: SteadyWindow | None,
                    split: TokenSplit) -> RequestEnergy:
    mean_output = None
    if trace.output_lengths is not None and trace.output_lengths.count > 0:
        mean_output = trace.output_lengths.sum / trace.output_lengths.count
    elif whole.requests > 0:
        mean_output = whole.output_tokens / whole.requests
    per_token = window.span.j_per_output_token if window is not None else None
    ml_energy = per_token * mean_output if per_token is not None and mean_output is not None \
        else None
    lengths: dict[float, tuple[float, float] | None] = {0.5: None, 0.99: None}
    reason = None
    if trace.prompt_lengths is None or trace.output_lengths is None:
        reason = "the engine exposes no histogram of prompt and output lengths"
    else:
        for q in lengths:
            prompt = histogram_quantile(q, trace.prompt_lengths)
            output = histogram_quantile(q, trace.output_lengths)
            if prompt is not None and output is not None:
                lengths[q] = (prompt, output)
        if lengths[0.5] is None:
            reason = "no request counted in the length histograms"
    estimates: dict[float, RequestEstimate | None] = {0.5: None, 0.99: None}
    if not split.separable:
        reason = reason or f"energy per prefill and decode token unknown: {split.reason}"
    else:
        for q, pair in lengths.items():
            if pair is not None:
                estimates[q] = estimate_request_j(split, *pair)
    p50, p99 = lengths[0.5], lengths[0.99]
    return RequestEnergy(estimates[0.5], estimates[0.99], p50 and p50[0], p50 and p50[1],
                         p99 and p99[0], p99 and p99[1], mean_output, ml_energy, reason)


# --- the whole ----------------------------------------------------------------------


def analyse(trace: ServingTrace) -> ServingAnalysis | None:
    """The trace's steady window, whole-trace figures, prefill/decode split and request
    energy; None for a trace of fewer than 2 points."""
    points = trace.points
    if len(points) < 2:
        return None
    times = [p.t_s for p in points]
    whole = Span.between(points[0], points[-1])
    interval_s = _typical_interval_s(times, trace.interval_s)
    window = None
    no_window = None
    found = _batch_full(points, times)
    rule = WindowRule.BATCH_FULL
    if found is None:
        found, rule = _token_rate(points, times), WindowRule.TOKEN_RATE
    if found is None:
        no_window = "no output token counted in the trace"
    else:
        window = _judge(points, times, found[0], found[1], rule, interval_s)
    split = _split(points, times)
    return ServingAnalysis(window, no_window, whole, split,
                           _request_energy(trace, whole, window, split))


def _span_json(span: Span) -> dict[str, Any]:
    return {"start_s": span.start_s, "end_s": span.end_s, "length_s": span.length_s,
            "energy_j": span.energy_j, "output_tokens": span.output_tokens,
            "prompt_tokens": span.prompt_tokens, "total_tokens": span.total_tokens,
            "requests": span.requests, "mean_power_w": span.mean_power_w,
            "j_per_output_token": span.j_per_output_token,
            "j_per_prompt_token": span.j_per_prompt_token,
            "j_per_total_token": span.j_per_total_token, "j_per_request": span.j_per_request,
            "power_coverage": span.power_coverage, "metrics_coverage": span.metrics_coverage}


def _estimate_json(name: str, estimate: RequestEstimate | None) -> dict[str, Any]:
    return {f"{name}_j": estimate and estimate.energy_j,
            f"{name}_low_j": estimate and estimate.low_j,
            f"{name}_high_j": estimate and estimate.high_j}


def analysis_to_json(analysis: ServingAnalysis) -> dict[str, Any]:
    """The analysis as plain JSON-able values; times in Unix seconds, ``offset_s`` from
    the trace's first point."""
    window = analysis.window
    steady = None
    if window is not None:
        steady = _span_json(window.span) | {
            "offset_s": window.span.start_s - analysis.whole.start_s,
            "rule": window.rule.value, "cv": window.cv, "part_s": window.part_s,
            "parts": window.parts, "verdict": window.verdict.value, "reason": window.reason}
    split = analysis.split
    requests = analysis.requests
    return {
        "steady_window": steady,
        "no_window_reason": analysis.no_window,
        "whole_job": _span_json(analysis.whole),
        "token_split": {
            "separable": split.separable, "reason": split.reason, "bins": split.bins,
            "rate_correlation": split.rate_correlation,
            "j_per_prefill_token": split.j_per_prefill_token,
            "j_per_prefill_token_se": split.j_per_prefill_token_se,
            "j_per_decode_token": split.j_per_decode_token,
            "j_per_decode_token_se": split.j_per_decode_token_se,
            "base_w": split.base_w, "base_w_se": split.base_w_se},
        "request_energy": _estimate_json("p50", requests.p50)
        | _estimate_json("p99", requests.p99) | {
            "p50_prompt_tokens": requests.p50_prompt_tokens,
            "p50_output_tokens": requests.p50_output_tokens,
            "p99_prompt_tokens": requests.p99_prompt_tokens,
            "p99_output_tokens": requests.p99_output_tokens,
            "mean_output_tokens": requests.mean_output_tokens,
            "ml_energy_j": requests.ml_energy_j, "reason": requests.reason},
    }
