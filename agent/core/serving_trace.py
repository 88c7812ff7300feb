"""A serving job's load over time on one node: what its steady-state window is found in.

Whole-job energy per token counts warm-up, ramp-up, the drain and idle gaps, so the same
server measured for 2 minutes and for 20 gives different figures (issue 49). The
ML.ENERGY benchmark instead divides the energy inside a *steady-state window* by the
tokens generated in it. Finding that window needs the job's energy and its tokens at a
time resolution finer than the store's rows (a flush's ticks, then minutes), so the agent
keeps, per serving job, one point per tick: the job's cumulative energy and counted
tokens and requests, the engine's running and waiting requests at its last answer, and
how many of the seconds so far had a measured power tick and a fresh metrics answer.
:mod:`joulestat.reports.steady_state` finds the window and judges it from this trace.

Everything but the two gauges is cumulative, so a window's figures are differences of
two points, and a trace that has grown past :data:`MAX_POINTS` halves its resolution by
dropping every other point without losing a joule or a token: a 1 s tick keeps full
resolution for 17 minutes, 2 s for the next 17, and so on. The histograms of prompt and
output lengths per request (vLLM's ``request_prompt_tokens`` and
``request_generation_tokens``, TGI's ``request_input_length`` and
``request_generated_tokens``) are the job's since its first sample, summed over models:
what the energy per request's percentiles are read from.

Stored as JSON on the job's ``job_nodes`` row (``serving_trace``), with times relative to
the first point and figures rounded to what a meter resolves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from joulestat.core.histogram import Histogram, histogram_from_json, histogram_to_json

# Points kept per job and node: about 90 KB of JSON, rewritten with the job's row once
# a flush while it runs.
MAX_POINTS = 1024
FORMAT = 1

@dataclass(frozen=True, slots=True)
class TracePoint:
    """The job at one tick's end (``t_s``, Unix seconds): cumulative figures since it
    was first seen serving, and the engine's gauges at its latest answer (None where
    the engine exposes none)."""

    t_s: float
    energy_j: float
    output_tokens: float
    prompt_tokens: float
    requests: float
    running: float | None
    waiting: float | None
    power_s: float  # seconds so far covered by a measured power tick
    answered_s: float  # seconds so far covered by a fresh answer of the engine


@dataclass(frozen=True, slots=True)
class ServingTrace:
    """One job's points on one node, oldest first, at ``interval_s`` apart (or a power
    of two times it, once halved), and its per-request length histograms."""

    interval_s: float
    points: tuple[TracePoint, ...]
    prompt_lengths: Histogram | None = None
    output_lengths: Histogram | None = None

    @property
    def span_s(self) -> float:
        return self.points[-1].t_s - self.points[0].t_s if self.points else 0.0


@dataclass
class TraceBuilder:
    """A running job's trace as the agent grows it, a point per tick."""

    interval_s: float
    max_points: int = MAX_POINTS
    points: list[TracePoint] = field(default_factory=list)
    prompt_lengths: Histogram | None = None
    output_lengths: Histogram | None = None

    def append(self, point: TracePoint) -> None:
        """Add the newest point; past ``max_points``, keep every other one (the newest
        always), so the points stay evenly spread over the job's life."""
        self.points.append(point)
        if len(self.points) > self.max_points:
            newest = self.points[-1]
            kept = self.points[::2]
            if kept[-1] is not newest:
                kept.append(newest)
            self.points = kept

    def trace(self) -> ServingTrace:
        return ServingTrace(self.interval_s, tuple(self.points), self.prompt_lengths,
                            self.output_lengths)


_COLUMNS = ("energy_j", "output_tokens", "prompt_tokens", "requests", "running", "waiting",
            "power_s", "answered_s")


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def trace_to_json(trace: ServingTrace) -> dict[str, Any]:
    """Columns of numbers, times from the first point: what ``job_nodes.serving_trace``
    holds."""
    base = trace.points[0].t_s if trace.points else 0.0
    out: dict[str, Any] = {"format": FORMAT, "interval_s": trace.interval_s,
                           "t0_s": round(base, 3),
                           "t": [round(p.t_s - base, 3) for p in trace.points]}
    for name in _COLUMNS:
        digits = 4 if name == "energy_j" else 3
        out[name] = [_rounded(getattr(p, name), digits) for p in trace.points]
    for name in ("prompt_lengths", "output_lengths"):
        histogram = getattr(trace, name)
        if histogram is not None:
            out[name] = histogram_to_json(histogram)
    return out


def _length_histogram(stored: Mapping[str, Any] | None) -> Histogram | None:
    return None if stored is None else histogram_from_json(stored)


def trace_from_json(stored: Mapping[str, Any]) -> ServingTrace:
    """:func:`trace_to_json` read back; ValueError naming what is wrong otherwise."""
    try:
        if stored.get("format") != FORMAT:
            raise ValueError(f"serving trace format {stored.get('format')!r}, not {FORMAT}")
        base = float(stored["t0_s"])
        times: Sequence[float] = stored["t"]
        columns = {name: stored[name] for name in _COLUMNS}
        if any(len(values) != len(times) for values in columns.values()):
            raise ValueError("serving trace columns of different lengths")
        points = tuple(
            TracePoint(base + float(t), *(None if columns[name][i] is None
                                          else float(columns[name][i]) for name in _COLUMNS))
            for i, t in enumerate(times))
        return ServingTrace(float(stored["interval_s"]), points,
                            _length_histogram(stored.get("prompt_lengths")),
                            _length_histogram(stored.get("output_lengths")))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a serving trace: {exc!r}") from None
