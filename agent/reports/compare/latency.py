"""Latency beside energy: a serving setup's TTFT and inter-token latency percentiles, and
the latency target that picks the setup to run (``compare --latency-target``).

Energy per token means little without the latency it was served at: ML.ENERGY's
leaderboard reports the lowest-energy configuration that meets a latency limit. The same
rule, on a team's own jobs: among the rows whose percentiles meet every target, the one
with the least energy per unit. The percentiles come from the histograms the serving
engine reported while the job ran (``--serving-metrics``: agent/runtime/serving.py), added
over the rows' jobs, nodes and models before a percentile is read (percentiles of parts
cannot be averaged), with Prometheus' ``histogram_quantile`` interpolation: a percentile
is only as fine as the engine's buckets, which the docs say.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from joulestat.core.histogram import (
    Histogram,
    Latency,
    histogram_add,
    histogram_from_json,
    histogram_quantile,
)

__all__ = ["LatencyTarget", "TargetOutcome", "job_latency", "meet_targets", "parse_target",
           "row_latency"]

QUANTILES = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
SHOWN = ("p50", "p99")
_TARGET_RE = re.compile(r"^(?P<kind>[a-z0-9]+)_(?P<q>p[0-9]+)=(?P<limit>[0-9.eE+-]+)$")


def job_latency(parts: Iterable[Any]) -> dict[Latency, Histogram]:
    """A job's histograms per kind, over its nodes (``JobNodePart.latency``) and models."""
    merged: dict[Latency, Histogram] = {}
    for part in parts:
        for per_kind in (getattr(part, "latency", None) or {}).values():
            for kind, stored in per_kind.items():
                try:
                    latency, histogram = Latency(kind), histogram_from_json(stored)
                except (ValueError, KeyError, TypeError):
                    continue  # a kind or a shape this version does not know
                merged[latency] = histogram_add(merged.get(latency), histogram)
    return merged


def latency_by_job(rows: Iterable[tuple[str, Mapping[str, Any]]]
                   ) -> dict[str, dict[Latency, Histogram]]:
    """Per job, its histograms per kind over its nodes and models, from
    :func:`joulestat.store.jobs.job_node_latency`'s rows (the dashboard's read, which
    starts from job totals rather than details)."""
    by_job: dict[str, list[Any]] = {}
    for job_id, latency in rows:
        by_job.setdefault(job_id, []).append(_Part(latency))
    return {job_id: job_latency(parts) for job_id, parts in by_job.items()}


@dataclass(frozen=True, slots=True)
class _Part:
    latency: Mapping[str, Any]


def served_latency(parts: Iterable[Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """A report's ``latency``: per model, per kind, the p50 and p99 in seconds, the mean
    and the number of observations, over the job's nodes; {} for a job that served
    nothing through ``--serving-metrics``."""
    merged: dict[str, dict[Latency, Histogram]] = {}
    for part in parts:
        for model, per_kind in (getattr(part, "latency", None) or {}).items():
            for kind, stored in per_kind.items():
                try:
                    latency, histogram = Latency(kind), histogram_from_json(stored)
                except (ValueError, KeyError, TypeError):
                    continue
                mine = merged.setdefault(model, {})
                mine[latency] = histogram_add(mine.get(latency), histogram)
    return {model: {kind.value: {
                "p50_s": histogram_quantile(0.5, h), "p99_s": histogram_quantile(0.99, h),
                "mean_s": h.sum / h.count if h.count > 0 else None, "count": h.count}
                for kind, h in sorted(per_kind.items())}
            for model, per_kind in sorted(merged.items())}


def row_latency(members: Iterable[Mapping[Latency, Histogram]]
                ) -> dict[str, dict[str, float | None]]:
    """``{"ttft": {"p50": s, "p99": s}, ...}`` of the rows' jobs added up; {} without any."""
    merged: dict[Latency, Histogram] = {}
    for latency in members:
        for kind, histogram in latency.items():
            merged[kind] = histogram_add(merged.get(kind), histogram)
    # In the enum's order (TTFT, ITL, end-to-end): what a user waits for first, first.
    return {kind.value: {name: histogram_quantile(QUANTILES[name], merged[kind])
                         for name in SHOWN}
            for kind in Latency if kind in merged and merged[kind].count > 0}


@dataclass(frozen=True, slots=True)
class LatencyTarget:
    """``ttft_p99=0.5``: the 99th percentile of time to first token at most 0.5 s."""

    kind: Latency
    quantile: str  # p50, p90, p95, p99
    limit_s: float

    def __str__(self) -> str:
        return f"{self.kind.value}_{self.quantile} <= {self.limit_s:g} s"


def parse_target(text: str) -> LatencyTarget:
    """A ``KIND_PXX=SECONDS`` target; ValueError naming what is wrong."""
    found = _TARGET_RE.match(text.strip())
    kinds = ", ".join(k.value for k in Latency)
    if found is None:
        raise ValueError(f"{text!r}: expected KIND_PXX=SECONDS, KIND one of {kinds} and "
                         f"PXX one of {', '.join(QUANTILES)} (e.g. ttft_p99=0.5)")
    try:
        kind = Latency(found["kind"])
    except ValueError:
        raise ValueError(f"{text!r}: unknown latency {found['kind']!r}; one of {kinds}"
                         ) from None
    if found["q"] not in QUANTILES:
        raise ValueError(f"{text!r}: percentile {found['q']!r} is not one of "
                         f"{', '.join(QUANTILES)}")
    try:
        limit = float(found["limit"])
    except ValueError:
        raise ValueError(f"{text!r}: {found['limit']!r} is not a number of seconds") from None
    if not limit > 0:
        raise ValueError(f"{text!r}: the limit must be above 0 s")
    return LatencyTarget(kind, found["q"], limit)


@dataclass(frozen=True, slots=True)
class TargetOutcome:
    """What the targets made of the rows: those meeting every one, the cheapest of them
    in energy per unit (None: none meets them, or none has energy per unit), and why
    each other row fell out."""

    targets: tuple[LatencyTarget, ...]
    meeting: tuple[str, ...]
    cheapest: str | None
    missed: tuple[tuple[str, str], ...]  # (row label, why)


def meet_targets(rows: Sequence[Any], targets: Sequence[LatencyTarget],
                 latency_of: Mapping[str, Mapping[Latency, Histogram]]) -> TargetOutcome:
    """Apply ``targets`` to ``rows`` (``ComparisonRow``s), whose jobs' histograms
    ``latency_of`` gives by job id: a row's percentile is read from its jobs' histograms
    added up, and a row without the histogram a target needs does not meet it."""
    meeting: list[Any] = []
    missed: list[tuple[str, str]] = []
    for row in rows:
        merged: dict[Latency, Histogram] = {}
        for job_id in row.job_ids:
            for kind, histogram in latency_of.get(job_id, {}).items():
                merged[kind] = histogram_add(merged.get(kind), histogram)
        why = []
        for target in targets:
            histogram = merged.get(target.kind)
            value = None if histogram is None else histogram_quantile(
                QUANTILES[target.quantile], histogram)
            if value is None:
                why.append(f"no {target.kind.value} latency recorded")
            elif value > target.limit_s:
                why.append(f"{target.kind.value}_{target.quantile} {value:.3g} s")
        if why:
            missed.append((row.label, "; ".join(why)))
        else:
            meeting.append(row)
    priced = [r for r in meeting if r.energy_per_unit_j is not None]
    cheapest = min(priced, key=lambda r: r.energy_per_unit_j).label if priced else None
    return TargetOutcome(tuple(targets), tuple(r.label for r in meeting), cheapest,
                         tuple(missed))


def outcome_json(outcome: TargetOutcome) -> dict[str, Any]:
    """``compare --json``'s ``latency_target``: the targets, the rows meeting them, the
    cheapest of those in energy per unit, and why each other row does not."""
    return {"targets": [str(t) for t in outcome.targets], "meeting": list(outcome.meeting),
            "cheapest": outcome.cheapest,
            "missed": [{"row": row, "why": why} for row, why in outcome.missed]}


def latency_text(table: Any, outcome: TargetOutcome | None) -> str:
    """The rows' served latency (p50 / p99 per kind) and, with targets, which rows meet
    them and the cheapest in energy per unit among those; "" when no row has latency."""
    rows = [r for r in table.rows if r.latency_s]
    lines: list[str] = []
    if rows:
        lines.append("served latency, p50 / p99 (the serving engine's histograms):")
        for row in rows:
            parts = [f"{kind} {_s(v.get('p50'))} / {_s(v.get('p99'))}"
                     for kind, v in row.latency_s.items()]
            lines.append(f"  {row.label}: {', '.join(parts)}")
    if outcome is not None:
        targets = " and ".join(str(t) for t in outcome.targets)
        if outcome.meeting:
            lines.append(f"meeting {targets}: {', '.join(outcome.meeting)}")
        else:
            lines.append(f"no row meets {targets}")
        for row, why in outcome.missed:
            lines.append(f"  not {row}: {why}")
        if outcome.cheapest is not None:
            lines.append(f"least energy per {table.unit} among them: {outcome.cheapest}")
    return "\n".join(lines)


def _s(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
