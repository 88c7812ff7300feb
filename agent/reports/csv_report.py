"""The CSV format: one row per job, for spreadsheets and ``report --all``.

The columns and their order are a contract (scripts index them): they are the
:data:`COLUMNS` below, in that order, documented in docs/reports.md. New columns are
only ever appended. Empty cell = unknown (null in JSON), never 0. Numbers are written
with full precision. Cells that hold one value per unit or per node read
``key=value`` pairs joined by ``; `` (units) or `` | `` (nodes, whose texts may hold
semicolons).
Text cells that would start a spreadsheet formula (``=``, ``+``, ``-``, ``@``, tab, CR)
get a leading ``'`` (:mod:`joulestat.core.csv_cells`); numeric columns never do.

    job_id, name, kind, status            the job
    labels                                k=v; ... (credential-like values redacted)
    started_at, ended_at, duration_s      ISO 8601 UTC; seconds from first start to last end
    nodes, instance_types, regions        node count; node=type | ...; node=region | ...
    energy_{cpu,dram,accelerator,net,other,total}_j   joules by component
                                      (energy_gpu_j until report schema 2)
    energy_kwh, dynamic_energy_j, idle_energy_j
    co2e_g, embodied_co2e_g, total_co2e_g operational, embodied (apart), their sum
    carbon_intensity_g_per_kwh, pue       job-wide effective values
    cost_usd, cost_note
    work_units                            unit=count; ...
    throughput_per_hour                   unit=units per hour; ...
    energy_j_per_unit, co2e_g_per_unit, cost_usd_per_unit, sci_co2e_g_per_unit
    co2e_g_per_million_units, cost_usd_per_million_units
    region_resolution, intensity_sources, intensity_years, pue_sources   per node
    energy_sources                        component=source,source; ...
    notes, agent_version, generated_at
    energy_by_class                       measured=J; estimated=J; ... (sources.py's classes)
    untracked_cpu_shares                  node=share | ... (empty: unknown)
    external_co2e_g                       tool=g: another tool's own CO2e (CodeCarbon's)
    dynamic_energy_j_per_unit             unit=J above idle per unit; ... (beside
                                          energy_j_per_unit, which includes the idle share)
    idle_policy                           share | exclude; empty: not recorded
    latency_{ttft,itl,e2e}_{p50,p99}_s    served latency, seconds, one figure a cell
                                          (--serving-metrics; empty where not served, or
                                          where several models were: see the JSON)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from joulestat.core.csv_cells import text_cell
from joulestat.core.tick import Component

Report = Mapping[str, Any]

ENERGY_COMPONENTS = (Component.CPU, Component.DRAM, Component.ACCELERATOR, Component.NET,
                     Component.OTHER, "total")


def _number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else _number(value)


def _pairs(mapping: Mapping[str, Any]) -> str:
    return "; ".join(f"{key}={_cell(value)}" for key, value in mapping.items())


def _per_node(report: Report, key: str, table: str = "provenance") -> str:
    return " | ".join(f"{entry['node']}={_cell(entry[key])}" for entry in report[table])


def _per_unit(report: Report, table: str, key: str) -> str:
    return _pairs({unit: figures[key] for unit, figures in report[table].items()})


def _sources(report: Report) -> str:
    return "; ".join(f"{component}={','.join(sources)}"
                     for component, sources in report["sources"].items())


def _energy(component: str) -> Callable[[Report], str]:
    return lambda r: _number(r["energy_j"][component])


LATENCY_CELLS = tuple((kind, quantile) for kind in ("ttft", "itl", "e2e")
                      for quantile in ("p50", "p99"))


def _latency(kind: str, quantile: str) -> Callable[[Report], str]:
    """One served-latency figure of a job that served one model (or none by name);
    empty otherwise (the JSON's ``latency`` has them per model)."""
    def cell(report: Report) -> str:
        served = report.get("latency") or {}
        if len(served) != 1:
            return ""
        [per_kind] = served.values()
        return _number((per_kind.get(kind) or {}).get(f"{quantile}_s"))
    return cell


_Column = tuple[str, Callable[[Report], Any]]

COLUMNS: tuple[_Column, ...] = (
    ("job_id", lambda r: r["job"]["id"]),
    ("name", lambda r: r["job"]["name"]),
    ("kind", lambda r: r["job"]["kind"]),
    ("status", lambda r: r["job"]["status"]),
    ("labels", lambda r: _pairs(r["job"]["labels"])),
    ("started_at", lambda r: r["job"]["started_at"]),
    ("ended_at", lambda r: r["job"]["ended_at"] or ""),
    ("duration_s", lambda r: _number(r["job"]["duration_s"])),
    ("nodes", lambda r: str(len(r["nodes"]))),
    ("instance_types", lambda r: _per_node(r, "instance_type", "nodes")),
    ("regions", lambda r: _per_node(r, "region", "nodes")),
    *((f"energy_{c}_j", _energy(c)) for c in ENERGY_COMPONENTS),
    ("energy_kwh", lambda r: _number(r["energy_kwh"])),
    ("dynamic_energy_j", lambda r: _number(r["dynamic_energy_j"]["total"])),
    ("idle_energy_j", lambda r: _number(r["idle_energy_j"]["total"])),
    ("co2e_g", lambda r: _number(r["co2e_g"])),
    ("embodied_co2e_g", lambda r: _number(r["embodied_co2e_g"])),
    ("total_co2e_g", lambda r: _number(r["total_co2e_g"])),
    ("carbon_intensity_g_per_kwh", lambda r: _number(r["carbon_intensity_g_per_kwh"])),
    ("pue", lambda r: _number(r["pue"])),
    ("cost_usd", lambda r: _number(r["cost_usd"])),
    ("cost_note", lambda r: r["cost_note"] or ""),
    ("work_units", lambda r: _pairs(r["work_units"])),
    ("throughput_per_hour", lambda r: _pairs(r["throughput_per_hour"])),
    ("energy_j_per_unit", lambda r: _per_unit(r, "per_unit", "energy_j")),
    ("co2e_g_per_unit", lambda r: _per_unit(r, "per_unit", "co2e_g")),
    ("cost_usd_per_unit", lambda r: _per_unit(r, "per_unit", "cost_usd")),
    ("sci_co2e_g_per_unit", lambda r: _per_unit(r, "per_unit", "sci_co2e_g")),
    ("co2e_g_per_million_units", lambda r: _per_unit(r, "per_million_units", "co2e_g")),
    ("cost_usd_per_million_units", lambda r: _per_unit(r, "per_million_units", "cost_usd")),
    ("region_resolution", lambda r: _per_node(r, "region_resolution")),
    ("intensity_sources", lambda r: _per_node(r, "intensity_source")),
    ("intensity_years", lambda r: _per_node(r, "intensity_year")),
    ("pue_sources", lambda r: _per_node(r, "pue_source")),
    ("energy_sources", _sources),
    ("notes", lambda r: " | ".join(r["notes"])),
    ("agent_version", lambda r: r["agent_version"]),
    ("generated_at", lambda r: r["generated_at"]),
    ("energy_by_class", lambda r: _pairs(r.get("energy_by_class") or {})),
    ("untracked_cpu_shares", lambda r: _per_node(r, "untracked_cpu_share", "nodes")),
    ("external_co2e_g", lambda r: _pairs({e["tool"]: e["co2e_g"]
                                          for e in r.get("external_co2e") or []})),
    # What joulestat recorded about how it measured the job, apart from ``labels``.
    ("agent_labels", lambda r: _pairs(r["job"].get("agent_labels") or {})),
    ("dynamic_energy_j_per_unit", lambda r: _pairs({
        unit: figures.get("dynamic_energy_j") for unit, figures in r["per_unit"].items()})),
    ("idle_policy", lambda r: r.get("idle_policy") or ""),
    *((f"latency_{kind}_{quantile}_s", _latency(kind, quantile))
      for kind, quantile in LATENCY_CELLS),
)
COLUMN_NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)
# Columns that hold one number (or nothing): written as they are, so ``-1.5`` stays a
# number. Every other column holds text from users (names, labels, node names, units of
# work as keys) and goes through :func:`joulestat.core.csv_cells.text_cell`.
NUMERIC_COLUMNS: frozenset[str] = frozenset({
    "duration_s", "nodes", *(f"energy_{c}_j" for c in ENERGY_COMPONENTS), "energy_kwh",
    "dynamic_energy_j", "idle_energy_j", "co2e_g", "embodied_co2e_g", "total_co2e_g",
    "carbon_intensity_g_per_kwh", "pue", "cost_usd",
    *(f"latency_{kind}_{quantile}_s" for kind, quantile in LATENCY_CELLS)})


def csv_row(report: Report) -> list[str]:
    """One job's cells, in :data:`COLUMN_NAMES` order; text cells that would start a
    spreadsheet formula get a leading ``'`` (OWASP's CSV injection rule)."""
    return [str(cell(report)) if name in NUMERIC_COLUMNS else text_cell(str(cell(report)))
            for name, cell in COLUMNS]


def render_csv(reports: Sequence[Report]) -> str:
    """A header and one row per report (RFC 4180 quoting, ``\\r\\n`` line ends)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMN_NAMES)
    for report in reports:
        writer.writerow(csv_row(report))
    return buffer.getvalue()
