"""The Load curve page's rows: energy per unit, rate and latency per load level, grouped
by setup or by model.

By setup, a row is :func:`joulestat.dashboard.analysis.load_curve`'s point: the inference jobs of
one setup at one level, summed. By model, each job of a multi-model server counts once
per model, with that model's energy (its share of the job's, by busy time:
:mod:`joulestat.store.model_split`) and units, through the same
:func:`~joulestat.dashboard.analysis.load_curve`, so both groupings read levels, leave out runs
and sum jobs alike; a model's rate is its units over the job's wall time. The energy no
model was busy for (``idle``) has no units and no row; :func:`idle_share` says how much
of the jobs' energy that is.

Latency comes from job labels, where a load test puts what only it can measure
(``p50_ms``, ``p99_ms``: examples/inference/locustfile.py): any label ``p<N>_ms`` or
``p<N>_s`` (``p99_9_ms`` for p99.9) becomes a column. A row that sums several jobs shows
the highest of their values, the worst its jobs saw, since percentiles of separate runs
cannot be pooled. A job's latency is the whole server's, so every model of a job shows
the same.

Served latency (jobs measured with ``--serving-metrics``) comes from the serving
engine's histograms instead: a row's jobs' histograms are added up and then read
(``ttft p50 (s)``, ``ttft p99 (s)``, ...), exact for a row of several jobs.

Each row carries the sources of its jobs' nodes (``rapl``, ``model:ccf-vcpu``), so the
page can say which lines are estimates: a c6i's modelled energy per request drawn
beside a g5's measured one reads as their equal unless the line says otherwise.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from joulestat.core.histogram import Histogram, Latency
from joulestat.dashboard import analysis
from joulestat.reports.compare.latency import row_latency

if TYPE_CHECKING:  # the store's records, taken from state as the pages take them
    from joulestat.dashboard.state import JobTotals, ModelSplit

BY_SETUP, BY_MODEL = "setup", "model"
LATENCY_KEY = re.compile(r"^p(\d{1,2})(?:_(\d+))?_(ms|s)$")


@dataclass(frozen=True, slots=True)
class LoadRow(analysis.LoadFigures):
    """Jobs of one group (a setup, or a model) on one setup at one level, summed."""

    group: str
    setup: str
    level: float
    jobs: int
    units: float
    energy_j: float
    run_s: float
    latency: tuple[tuple[str, float | None], ...] = ()  # (label key, worst of its jobs)
    sources: tuple[str, ...] = ()  # of its jobs' nodes: rapl, model:ccf-vcpu...


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def latency_keys(jobs: Iterable[JobTotals], level_key: str) -> list[str]:
    """Latency label keys (``p50_ms``...) with a number on some job, lowest percentile
    first; never the label that is the load level."""
    found = {key for job in jobs for key, value in job.labels.items()
             if LATENCY_KEY.match(key) and key != level_key and _number(value) is not None}

    def order(key: str) -> tuple[float, str]:
        match = LATENCY_KEY.match(key)
        assert match is not None
        whole, tenths, _unit = match.groups()
        return float(f"{whole}.{tenths or 0}"), key

    return sorted(found, key=order)


def _members(jobs: Iterable[JobTotals], unit: str, level_key: str,
             left_out: Collection[str]) -> dict[tuple[str, float], list[JobTotals]]:
    """The jobs behind each (setup, level) point, chosen as load_curve chooses them."""
    members: defaultdict[tuple[str, float], list[JobTotals]] = defaultdict(list)
    for job in jobs:
        level = _number(job.labels.get(level_key))
        if level is None or level <= 0 or job.units.get(unit, 0) <= 0 or job.id in left_out:
            continue
        members[(analysis.setup_of(job), level)].append(job)
    return members


def _worst(jobs: list[JobTotals], keys: list[str]) -> tuple[tuple[str, float | None], ...]:
    values = []
    for key in keys:
        found = [v for v in (_number(job.labels.get(key)) for job in jobs) if v is not None]
        values.append((key, max(found) if found else None))
    return tuple(values)


def _sources(jobs: list[JobTotals], by_node: Mapping[str, Iterable[str]]
             ) -> tuple[str, ...]:
    return tuple(sorted({s for job in jobs for node, _t in job.nodes
                         for s in by_node.get(node, ())}))


def served_key(kind: str, quantile: str) -> str:
    """The column of a served latency percentile: ``ttft p99 (s)``."""
    return f"{kind} {quantile} (s)"


def _served(jobs: list[JobTotals], served: Mapping[str, Mapping[Latency, Histogram]]
            ) -> tuple[tuple[str, float | None], ...]:
    """Served latency (``--serving-metrics``) of a row's jobs: their histograms added up,
    then read, so a row of several jobs is exact (unlike percentile labels)."""
    merged = row_latency(served[job.id] for job in jobs if job.id in served)
    return tuple((served_key(kind, q), value) for kind, values in merged.items()
                 for q, value in values.items())


def _rows(group_of: str | None, points: list[analysis.LoadPoint],
          members: Mapping[tuple[str, float], list[JobTotals]], keys: list[str],
          by_node: Mapping[str, Iterable[str]],
          served: Mapping[str, Mapping[Latency, Histogram]]) -> list[LoadRow]:
    rows = [LoadRow(group_of or p.setup, p.setup, p.level, p.jobs, p.units, p.energy_j,
                    p.run_s, _worst(members.get((p.setup, p.level), []), keys)
                    + _served(members.get((p.setup, p.level), []), served),
                    _sources(members.get((p.setup, p.level), []), by_node))
            for p in points]
    # Every row the same columns: a served percentile one row lacks is unknown there.
    columns = list(dict.fromkeys(k for row in rows for k, _v in row.latency))
    return [replace(row, latency=tuple((k, dict(row.latency).get(k)) for k in columns))
            for row in rows]


def load_rows(jobs: list[JobTotals], unit: str, now_s: float, level_key: str,
              left_out: Collection[str] = (), by: str = BY_SETUP,
              splits: Mapping[str, ModelSplit] | None = None,
              sources: Mapping[str, Iterable[str]] | None = None,
              served: Mapping[str, Mapping[Latency, Histogram]] | None = None
              ) -> tuple[list[LoadRow], int]:
    """Rows by setup or by model (``splits``: :func:`joulestat.dashboard.state.splits` of ``jobs``;
    jobs without one have no model and no row by model), and how many jobs were left out
    for a level that is not a positive number. ``sources``: node -> its energy's sources
    (:func:`joulestat.dashboard.state.energy_sources`), each row's from its jobs' nodes."""
    by_node = sources or {}
    points, skipped = analysis.load_curve(jobs, unit, now_s, level_key, left_out)
    keys = latency_keys(jobs, level_key)
    members = _members(jobs, unit, level_key, left_out)
    if by != BY_MODEL:
        return _rows(None, points, members, keys, by_node, served or {}), skipped
    rows: list[LoadRow] = []
    models = sorted({share.model for split in (splits or {}).values() for share in split.models})
    for model in models:
        parts = []
        for job in jobs:
            share = (splits or {}).get(job.id)
            found = share.model(model) if share is not None else None
            if found is not None:
                parts.append(replace(job, units={unit: found.units.get(unit, 0.0)},
                                     total_j=found.energy_j))
        model_points, _skipped = analysis.load_curve(parts, unit, now_s, level_key, left_out)
        rows += _rows(model, model_points, members, keys, by_node, served or {})
    return rows, skipped


def idle_share(jobs: Iterable[JobTotals], splits: Mapping[str, ModelSplit],
               left_out: Collection[str] = ()) -> float | None:
    """The part of the split jobs' energy no model was busy for; None without any."""
    chosen = [splits[job.id] for job in jobs if job.id in splits and job.id not in left_out]
    energy = sum(split.energy_j for split in chosen)
    return sum(split.idle_j for split in chosen) / energy if energy > 0 else None
