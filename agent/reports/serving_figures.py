"""A serving job's steady-state figures, read from the store the one way every view reads
them: the report, ``joulestat compare``, the job API's figures, the pages and
``joulestat estimate request``.

A job's trace (:mod:`joulestat.core.serving_trace`, one per node it served on) is
analysed by :func:`joulestat.reports.steady_state.analyse`; a job that served on several
nodes is read from its longest trace (a server is one process on one node; a job whose
endpoint moved is rare, and its other parts keep their whole-job figures).

In a comparison a row's steady-state figure is its runs' valid windows added up:
energy in the windows over the units in them. Windows flagged unstable or too short are
left out of it and counted, so a row says how many of its runs gave a valid window, and
a row with none says so instead of a figure (issue 49: ``compare`` prefers valid
windows).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from joulestat.core.model_units import OUTPUT_TOKEN, PROMPT_TOKEN, REQUEST
from joulestat.core.serving_trace import ServingTrace
from joulestat.reports.steady_state import ServingAnalysis, Verdict, analyse, analysis_to_json
from joulestat.store.jobs import job_serving_traces

# The units a serving engine's metrics count (joulestat.runtime.serving), and what a
# window's span holds of each.
STEADY_UNITS: Mapping[str, str] = {OUTPUT_TOKEN: "output_tokens",
                                   PROMPT_TOKEN: "prompt_tokens", REQUEST: "requests"}


@dataclass(frozen=True, slots=True)
class JobSteady:
    """One job's steady-state window as a comparison pools it."""

    verdict: str
    reason: str | None
    start_s: float
    end_s: float
    energy_j: float
    output_tokens: float
    prompt_tokens: float
    requests: float

    def counted(self, unit: str) -> float:
        field = STEADY_UNITS.get(unit)
        return float(getattr(self, field)) if field is not None else 0.0


@dataclass(frozen=True, slots=True)
class SteadyRow:
    """A comparison row's steady-state figure: energy per unit over its runs' valid
    windows (None when no run has one: ``note`` says why), how many runs gave a valid
    window of how many, the windows' seconds, and the verdicts counted."""

    unit: str
    energy_per_unit_j: float | None
    valid_runs: int
    runs: int
    window_s: float
    verdicts: Mapping[str, int]
    note: str | None
    reasons: tuple[str, ...] = ()  # why its runs' windows are not valid, distinct


def trace_analysis(traces: Sequence[ServingTrace]) -> ServingAnalysis | None:
    """The analysis of a job's longest trace (None: no trace, or too short to read)."""
    if not traces:
        return None
    return analyse(max(traces, key=lambda trace: (len(trace.points), trace.span_s)))


def job_analyses(engine: Engine, job_ids: Sequence[str]) -> dict[str, ServingAnalysis]:
    """The analysis of each of ``job_ids`` that has a serving trace."""
    found = {}
    for job_id, traces in job_serving_traces(engine, job_ids).items():
        analysis = trace_analysis(traces)
        if analysis is not None:
            found[job_id] = analysis
    return found


def job_analysis(engine: Engine, job_id: str) -> ServingAnalysis | None:
    return job_analyses(engine, [job_id]).get(job_id)


def serving_json(analysis: ServingAnalysis | None, energy_j: float,
                 units: Mapping[str, float]) -> dict[str, Any] | None:
    """The report's ``serving`` section (None: not a traced serving job). Its
    ``whole_job`` figures are the job's own, ``energy_j`` and ``units`` as the store
    reads them for the report, ``jobs`` and ``compare``, so the whole job reads the
    same there as everywhere; the trace gives its span and coverage."""
    if analysis is None:
        return None
    out = analysis_to_json(analysis)
    output, prompt = units.get(OUTPUT_TOKEN, 0.0), units.get(PROMPT_TOKEN, 0.0)
    requests = units.get(REQUEST, 0.0)

    def per(count: float) -> float | None:
        return energy_j / count if count > 0 else None

    out["whole_job"] = {
        **out["whole_job"], "energy_j": energy_j, "output_tokens": output,
        "prompt_tokens": prompt, "total_tokens": output + prompt, "requests": requests,
        "j_per_output_token": per(output), "j_per_prompt_token": per(prompt),
        "j_per_total_token": per(output + prompt), "j_per_request": per(requests),
        "mean_power_w": None}
    return out


def job_steady(analysis: ServingAnalysis | None) -> JobSteady | None:
    """What a comparison pools of one job: its window (None: no trace, or no window)."""
    if analysis is None or analysis.window is None:
        return None
    window, span = analysis.window, analysis.window.span
    return JobSteady(str(window.verdict), window.reason, span.start_s, span.end_s,
                     span.energy_j, span.output_tokens, span.prompt_tokens, span.requests)


def steady_row(members: Iterable[JobSteady | None], unit: str | None,
               traced: int) -> SteadyRow | None:
    """A row's steady-state figure per ``unit`` from its runs' windows (None for a unit
    no engine counts, or when none of its runs was traced). ``traced``: how many of
    its runs have a trace (a trace without a window counts as a run without one)."""
    if unit not in STEADY_UNITS or traced == 0:
        return None
    windows = [m for m in members if m is not None]
    valid = [m for m in windows if m.verdict == Verdict.VALID]
    verdicts = dict(sorted(Counter(m.verdict for m in windows).items()))
    if traced > len(windows):
        verdicts["no_window"] = traced - len(windows)
    units = sum(m.counted(unit) for m in valid)
    energy_j = sum(m.energy_j for m in valid)
    reasons = tuple(sorted({m.reason for m in windows if m.reason and m not in valid}))
    if traced > len(windows):
        reasons += ("no steady-state window found",)
    note = None
    if not valid:
        note = "no valid steady-state window" + (f": {'; '.join(reasons)}" if reasons else "")
    return SteadyRow(unit, energy_j / units if valid and units > 0 else None, len(valid),
                     traced, sum(m.end_s - m.start_s for m in valid), verdicts, note, reasons)


def steady_text(rows: Iterable[Any]) -> str:
    """The rows' steady-state figures as ``joulestat compare`` prints them under its
    table ("" when no row has a serving trace): each row's energy per unit inside its
    runs' valid windows, or why it has none."""
    import textwrap

    from joulestat.core import units as fmt

    lines: list[str] = []
    for row in rows:
        steady = row.steady_state
        if steady is None:
            continue
        if steady.energy_per_unit_j is None:
            text = f"{row.label}: {steady.note}"
        else:
            text = (f"{row.label}: {fmt.energy(steady.energy_per_unit_j)} per {steady.unit} "
                    f"({steady.valid_runs} of {steady.runs} runs valid, "
                    f"{fmt.duration(steady.window_s)} of windows; whole job "
                    f"{fmt.energy(row.energy_per_unit_j)})")
        lines += textwrap.wrap(text, 100, initial_indent="  ", subsequent_indent="    ")
    if not lines:
        return ""
    return "\n".join(["steady state (the batch full, before the drain; valid windows only):",
                      *lines])
