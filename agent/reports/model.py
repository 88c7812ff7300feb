"""THE report of one job: a JSON-able dict, the source every format renders.

Why one dict: a PDF, an HTML page and a CSV row of the same job must never disagree,
and the JSON export must carry enough to rebuild the job in another store
(:mod:`joulestat.reports.importer`). So the figures are computed once, here, from the
store's reads and :func:`joulestat.carbon.footprint.footprint`, and the formats only lay
them out. Energy per unit is given twice, in all and above idle, with the idle policy the
agent attributed it under (``idle_policy``, :mod:`joulestat.reports.idle`; null when not
recorded): on a VM most of a small job's energy can be idle power. The shape is
documented by ``docs/report-schema.json`` (a test validates real reports against it);
every name carries its unit (``_j``, ``_g``, ``_usd``, ``_s``).

What a report never holds unless asked (``keep_secrets=True``, ``--no-redact``):
secrets. The store has no environment variables or command lines; job labels are
redacted by :func:`joulestat.core.redact.redact_labels` (credential-like keys, and URLs with a
password or bearer tokens in any value).

``job.labels`` are the user's only; what joulestat recorded about how it measured the
job (``cpu_source``, ``idle_policy``: :mod:`joulestat.attribution.agent_labels`) is
``job.agent_labels``, shown apart ("Recorded by joulestat"), so no format lists it as a
label the user gave.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine

from joulestat.carbon.footprint import (
    METHODOLOGY,
    CarbonSettings,
    Footprint,
    NodeFootprint,
    energy_points,
    footprint,
)
from joulestat.carbon.pricing import placements
from joulestat.carbon.units import j_to_kwh
from joulestat.core.redact import redact_labels
from joulestat.core.tick import Component
from joulestat.core.version import __version__
from joulestat.reports import narrative
from joulestat.reports.bounds import EnergyBounds, job_bounds, proportional
from joulestat.reports.compare.latency import served_latency
from joulestat.reports.external import external_figures
from joulestat.reports.idle import job_idle_policy
from joulestat.reports.provenance import node_provenance
from joulestat.reports.series import COMPONENT_ORDER, node_series, power_series, unit_series
from joulestat.reports.serving_figures import job_analysis, serving_json
from joulestat.reports.sources import energy_by_class
from joulestat.store.jobs import JobDetail, JobNodePart, job_detail
from joulestat.store.nodes import node_devices, source_models
from joulestat.store.provenance import (
    job_sources,
    jobs_energy_by_source,
    untracked_cpu_j,
)
from joulestat.store.series import job_energy_parts, job_energy_series, job_unit_rows

REPORT_FORMAT = "joulestat-report"
# 3: energy, CO2e and per-unit figures carry their bounds (``energy_bounds_j``...,
# issue 27); 2: the component "gpu" is "accelerator" (issue 14). The importer reads 2-3
# and refuses 1, the format of joulestat's development before its first release.
SCHEMA_VERSION = 3
PER_MILLION = 1_000_000.0
NO_OVERRIDES = CarbonSettings()  # every factor from the data

def iso_time(t_s: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (``2024-05-01T12:00:00.250Z``), None stays None."""
    if t_s is None:
        return None
    text = datetime.fromtimestamp(t_s, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def component_totals(dynamic_j: Mapping[str, float], idle_j: Mapping[str, float] | None = None
                     ) -> dict[str, float]:
    """``{cpu, dram, accelerator, net, other, total}`` in joules; ``other`` sums every other
    component (accelerators without a name of their own, ...)."""
    merged: dict[str, float] = {}
    for part in (dynamic_j, idle_j or {}):
        for component, joules in part.items():
            merged[component] = merged.get(component, 0.0) + float(joules)
    totals = {c: merged.get(c, 0.0) for c in COMPONENT_ORDER}
    totals[Component.OTHER] = sum((j for c, j in merged.items() if c not in COMPONENT_ORDER), 0.0)
    totals["total"] = sum(merged.values(), 0.0)
    return totals


def _effective(footprint_: Footprint) -> tuple[float | None, float | None]:
    """Job-wide PUE and intensity (gCO2e per facility kWh), weighted by energy, so that
    kWh x PUE x intensity gives the job's operational CO2e; with no energy, the nodes'
    common value, else None."""
    nodes = footprint_.nodes
    kwh = sum(n.energy_kwh for n in nodes)
    facility_kwh = sum(n.energy_kwh * n.pue.value for n in nodes)
    if kwh > 0 and facility_kwh > 0:
        return facility_kwh / kwh, footprint_.operational_co2e_g / facility_kwh
    pues = {n.pue.value for n in nodes}
    intensities = {n.intensity.g_per_kwh for n in nodes}
    return (pues.pop() if len(pues) == 1 else None,
            intensities.pop() if len(intensities) == 1 else None)


def _per_unit(units: Mapping[str, float], energy_j: float, dynamic_j: float, co2e_g: float,
              embodied_g: float | None, cost_usd: float | None, duration_s: float,
              bounds: EnergyBounds | None = None
              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, float | None]]:
    """per_unit, per_million_units and throughput_per_hour (units per hour of the job);
    energy per unit twice: all the job's (``energy_j``) and above idle
    (``dynamic_energy_j``); the energy's and CO2e's bounds per unit (counts are exact)."""
    total = bounds.total if bounds is not None else None
    co2e_bounds = proportional(total, energy_j, co2e_g)
    per_unit: dict[str, Any] = {}
    per_million: dict[str, Any] = {}
    throughput: dict[str, float | None] = {}
    for unit, count in sorted(units.items()):
        if count <= 0:
            continue
        cost = cost_usd / count if cost_usd is not None else None
        per_unit[unit] = {
            "energy_j": energy_j / count,
            "dynamic_energy_j": dynamic_j / count,
            "co2e_g": co2e_g / count,
            "cost_usd": cost,
            "sci_co2e_g": (co2e_g + embodied_g) / count if embodied_g is not None else None,
            "energy_bounds_j": None if total is None else total.scaled(1 / count).as_list(),
            "co2e_bounds_g": (None if co2e_bounds is None
                              else co2e_bounds.scaled(1 / count).as_list()),
        }
        per_million[unit] = {
            "energy_j": energy_j / count * PER_MILLION,
            "dynamic_energy_j": dynamic_j / count * PER_MILLION,
            "co2e_g": co2e_g / count * PER_MILLION,
            "cost_usd": cost * PER_MILLION if cost is not None else None,
        }
        throughput[unit] = count / (duration_s / 3600) if duration_s > 0 else None
    return per_unit, per_million, throughput


def _untracked_share(engine: Engine, part: JobNodePart, now_s: float) -> float | None:
    """Share of the node's busy CPU time (dynamic CPU energy) no job tracked while the
    job ran there; None where the store cannot say (no dynamic CPU energy, imports)."""
    found = untracked_cpu_j(engine, part.node, part.started_s, part.end_s(now_s))
    if found is None:
        return None
    untracked_j, total_j = found
    return untracked_j / total_j if total_j > 0 else None


def _node_entry(part: JobNodePart, node_fp: NodeFootprint | None, now_s: float,
                sources: dict[str, list[str]], extra: Mapping[str, Any]) -> dict[str, Any]:
    components = {
        c: {"dynamic_j": part.dynamic_j.get(c, 0.0), "idle_j": part.idle_j.get(c, 0.0)}
        for c in sorted(set(part.dynamic_j) | set(part.idle_j))
    }
    return {
        "node": part.node,
        "instance_type": part.instance_type,
        "region": part.region,
        "started_at": iso_time(part.started_s),
        "ended_at": iso_time(part.ended_s),
        "started_s": part.started_s,
        "ended_s": part.ended_s,
        "duration_s": part.held_s(now_s),
        "energy_j": component_totals(part.dynamic_j, part.idle_j),
        "components": components,
        "work_units": dict(part.units),
        "co2e_g": node_fp.operational_co2e_g if node_fp is not None else 0.0,
        "embodied_co2e_g": node_fp.embodied.g if node_fp is not None else None,
        "cost_usd": node_fp.cost_usd if node_fp is not None else None,
        "sources": sources,
        **extra,
    }


def intensity_uncertainty(nodes: list[NodeFootprint]) -> str:
    """What the CO2e bounds leave out: no intensity source joulestat reads (CodeCarbon's
    energy-mix and cloud tables, Electricity Maps, an override) publishes an
    uncertainty, so CO2e bounds carry the energy's alone, and say so."""
    sources = ", ".join(sorted({n.intensity.source for n in nodes})) or "none"
    return (f"energy's bounds only: the grid intensity's source ({sources}) publishes no "
            "uncertainty")


def _devices(engine: Engine, node: str) -> list[dict[str, str]]:
    """What each device of the node is ("AWS Inferentia2", "NVIDIA T4"), as the agent
    last recorded it, so a reader need not guess from "gpu0"."""
    return [{"component": d.component, "device": d.device, "model": d.model,
             "source": d.source} for d in node_devices(engine, node)]


def report_from_detail(engine: Engine, detail: JobDetail,
                       carbon: CarbonSettings = NO_OVERRIDES, keep_secrets: bool = False,
                       now_s: float | None = None, *, series: bool = True) -> dict[str, Any]:
    """The report of an already loaded job (see :func:`build_report`). ``series=False``
    leaves the per-tick series empty (``energy_series``, ``unit_series``,
    ``power_series``): every figure is the same, and the reads no longer grow with the
    job's length, which is what a caller asking every few seconds needs
    (:mod:`joulestat.reports.figures`)."""
    now = time.time() if now_s is None else float(now_s)
    points = [p for part in detail.per_node
              for p in energy_points(part.node, job_energy_series(engine, detail.id, part.node))]
    result = footprint(points, placements(detail.per_node, now), carbon, now_s=now)
    by_node = {n.node: n for n in result.nodes}
    end_s = detail.end_s(now)
    duration_s = detail.held_s(now)
    energy = component_totals(detail.dynamic_j, detail.idle_j)
    dynamic = component_totals(detail.dynamic_j)
    pue, intensity = _effective(result)
    # The job's energy per node, component and source, read once: its bounds
    # (joulestat.reports.bounds) and its energy by class come from the same rows.
    source_rows = jobs_energy_by_source(engine, [detail.id])[detail.id]
    bounds = job_bounds(source_rows, source_models(engine, {r.node for r in source_rows}))
    per_unit, per_million, throughput = _per_unit(
        detail.units, energy["total"], dynamic["total"], result.operational_co2e_g,
        result.embodied_co2e_g, result.cost_usd, duration_s, bounds)
    co2e_bounds = proportional(bounds.total, energy["total"], result.operational_co2e_g)
    cost_notes = [n for n in result.notes if n.startswith("cost unknown")]
    rows = job_energy_parts(engine, detail.id) if series else []
    per_node_series = node_series(rows, detail.started_s, end_s)
    per_node_units = unit_series(job_unit_rows(engine, detail.id), rows, detail.started_s,
                                 end_s) if series else {}
    by_source: dict[str, float] = {}
    for row in source_rows:
        by_source[row.source] = by_source.get(row.source, 0.0) + row.energy_j
    external = external_figures(detail.labels)
    report = {
        "format": REPORT_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "job": {
            "id": detail.id,
            "name": detail.name,
            "kind": detail.kind,
            "labels": redact_labels(detail.labels, keep=keep_secrets),
            "agent_labels": redact_labels(detail.agent_labels, keep=keep_secrets),
            "status": detail.status,
            "started_at": iso_time(detail.started_s),
            "ended_at": iso_time(detail.ended_s),
            "started_s": detail.started_s,
            "ended_s": detail.ended_s,
            "duration_s": duration_s,
        },
        "nodes": [_node_entry(part, by_node.get(part.node), now,
                              job_sources(engine, detail.id, part.node), {
                                  "untracked_cpu_share": _untracked_share(engine, part, now),
                                  "energy_series": per_node_series.get(part.node, []),
                                  "unit_series": per_node_units.get(part.node, []),
                                  "devices": _devices(engine, part.node),
                              })
                  for part in detail.per_node],
        "energy_j": energy,
        "energy_bounds_j": bounds.as_json(COMPONENT_ORDER + (Component.OTHER,)),
        "energy_kwh": j_to_kwh(energy["total"]),
        "dynamic_energy_j": dynamic,
        "idle_energy_j": component_totals(detail.idle_j),
        "idle_policy": job_idle_policy(detail),
        "co2e_g": result.operational_co2e_g,
        "co2e_bounds_g": None if co2e_bounds is None else co2e_bounds.as_list(),
        "bounds": {**bounds.basis_json(),
                   "co2e": intensity_uncertainty(list(result.nodes))},
        "embodied_co2e_g": result.embodied_co2e_g,
        "total_co2e_g": result.total_co2e_g,
        "carbon_intensity_g_per_kwh": intensity,
        "pue": pue,
        "cost_usd": result.cost_usd,
        "cost_note": "; ".join(cost_notes) if cost_notes else None,
        "work_units": dict(detail.units),
        "per_unit": per_unit,
        "per_million_units": per_million,
        "throughput_per_hour": throughput,
        "sources": job_sources(engine, detail.id),
        "energy_by_class": energy_by_class(by_source),
        "external_co2e": [figures.as_dict() for figures in external],
        "provenance": [node_provenance(n) for n in result.nodes],
        "notes": list(result.notes),
        "power_series": power_series(rows, detail.started_s, end_s),
        "latency": served_latency(detail.per_node),
        "serving": serving_json(job_analysis(engine, detail.id), energy["total"],
                                detail.units),
        "methodology": METHODOLOGY,
        "agent_version": __version__,
        "generated_at": iso_time(now),
        "generated_s": now,
    }
    report["notes"] = narrative.notes(report)
    report["headline"] = narrative.headline(report)
    return report


def build_report(engine: Engine, job_id: str, carbon: CarbonSettings = NO_OVERRIDES,
                 keep_secrets: bool = False, *, now_s: float | None = None,
                 series: bool = True) -> dict[str, Any]:
    """The report of ``job_id``; :class:`~joulestat.store.jobs.UnknownJobError` if the
    store has no such job. ``carbon``: the user's carbon and price overrides (the
    commands' section; none by default: the data's figures); ``now_s`` fixes "now" for
    running jobs (a running node is counted as held until then) and for
    ``generated_at``."""
    return report_from_detail(engine, job_detail(engine, job_id), carbon, keep_secrets,
                              now_s, series=series)
