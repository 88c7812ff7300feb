"""The report as titled tables of display text, shared by the HTML and PDF formats.

Both formats must show the same content; building the rows once here means a figure
cannot appear in one and be forgotten in the other. Numbers are rounded for reading
(4 significant digits, thousands separators) and unknowns say "unknown", never 0;
the JSON and CSV formats keep full precision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.carbon.units import j_to_kwh
from agent.reports.series import component_sort_key

UNKNOWN = "unknown"
Report = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # relative column widths for paged formats (None: equal)
    weights: tuple[float, ...] | None = None


def number(value: float | None, unit: str = "", digits: int = 4) -> str:
    """``12,345.7 J``-style text with ``digits`` significant digits; None -> unknown."""
    if value is None:
        return UNKNOWN
    if value == 0:
        text = "0"
    else:
        magnitude = math.floor(math.log10(abs(value)))
        decimals = max(0, digits - 1 - magnitude)
        text = f"{value:,.{decimals}f}" if abs(value) >= 1e-3 else f"{value:.{digits - 1}e}"
    return f"{text} {unit}".rstrip()


def duration(seconds: float) -> str:
    """``1 h 02 min 05 s`` for people; the seconds stay in the JSON."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{seconds:.1f} s"


def title(report: Report) -> str:
    job = report["job"]
    return f"joulestat report: {job['name']} ({job['id']})"


def summary(report: Report) -> Table:
    job = report["job"]
    cost = number(report["cost_usd"], "USD")
    if report["cost_usd"] is None and report["cost_note"]:
        cost = f"{UNKNOWN} ({report['cost_note']})"
    rows = [
        ("Job", f"{job['name']} ({job['id']}), {job['kind']}, {job['status']}"),
        ("Started", job["started_at"]),
        ("Ended", job["ended_at"] or f"running (figures as of {report['generated_at']})"),
        ("Duration", duration(job["duration_s"])),
        ("Labels", ", ".join(f"{k}={v}" for k, v in job["labels"].items()) or "none"),
        ("Energy", f"{number(report['energy_j']['total'], 'J')} "
                   f"({number(report['energy_kwh'], 'kWh')})"),
        ("Dynamic / idle energy", f"{number(report['dynamic_energy_j']['total'], 'J')} / "
                                  f"{number(report['idle_energy_j']['total'], 'J')}"),
        ("Operational CO2e", number(report["co2e_g"], "g")),
        ("Embodied CO2e (apart)", number(report["embodied_co2e_g"], "g")),
        ("Operational + embodied", number(report["total_co2e_g"], "g")),
        ("Grid intensity (effective)", number(report["carbon_intensity_g_per_kwh"],
                                              "gCO2e/kWh")),
        ("PUE (effective)", number(report["pue"])),
        ("Cost", cost),
    ]
    return Table("Summary", ("", ""), tuple(rows), (1.0, 3.0))


def energy_by_component(report: Report) -> Table:
    components = [c for c in ("cpu", "dram", "gpu", "net", "other")
                  if report["energy_j"][c] or report["sources"].get(c)]
    rows = [(c, number(report["dynamic_energy_j"][c], "J"), number(report["idle_energy_j"][c], "J"),
             number(report["energy_j"][c], "J"), ", ".join(report["sources"].get(c, [])))
            for c in components]
    extra = sorted((c for c in report["sources"] if c not in components
                    and c not in ("cpu", "dram", "gpu", "net")), key=component_sort_key)
    rows += [(f"other: {c}", "", "", "", ", ".join(report["sources"][c])) for c in extra]
    rows.append(("total", number(report["dynamic_energy_j"]["total"], "J"),
                 number(report["idle_energy_j"]["total"], "J"),
                 number(report["energy_j"]["total"], "J"), ""))
    return Table("Energy by component", ("component", "dynamic", "idle", "total", "sources"),
                 tuple(rows))


def nodes(report: Report) -> Table:
    rows = tuple(
        (n["node"], n["instance_type"] or UNKNOWN, n["region"] or UNKNOWN,
         duration(n["duration_s"]), number(n["energy_j"]["total"], "J"),
         number(n["co2e_g"], "g"), number(n["embodied_co2e_g"], "g"),
         number(n["cost_usd"], "USD"),
         "; ".join(f"{k}={number(v)}" for k, v in n["work_units"].items()) or "none")
        for n in report["nodes"])
    return Table("Nodes", ("node", "instance type", "region", "held", "energy", "CO2e",
                           "embodied", "cost", "units"), rows)


def units(report: Report) -> Table:
    rows = []
    for unit, count in report["work_units"].items():
        per = report["per_unit"].get(unit)
        million = report["per_million_units"].get(unit)
        if per is None or million is None:
            rows.append((unit, number(count), "", "", "", "", "", "", ""))
            continue
        rows.append((unit, number(count), number(report["throughput_per_hour"].get(unit)),
                     number(per["energy_j"], "J"), number(per["co2e_g"], "g"),
                     number(per["cost_usd"], "USD"), number(per["sci_co2e_g"], "g"),
                     number(j_to_kwh(million["energy_j"]), "kWh"),
                     number(million["cost_usd"], "USD")))
    return Table("Work units", ("unit", "count", "per hour", "energy/unit", "CO2e/unit",
                                "cost/unit", "SCI/unit", "kWh/M units", "cost/M units"),
                 tuple(rows))


def provenance(report: Report) -> Table:
    rows = tuple(
        (p["node"], p["region"] or UNKNOWN, p["region_resolution"],
         f"{number(p['carbon_intensity_g_per_kwh'], 'g/kWh')} ({p['intensity_source']}, "
         f"{p['intensity_year'] or 'no year'})",
         f"{number(p['pue'])} ({p['pue_source']})",
         f"{number(p['price_usd_per_hour'], 'USD/h')} ({p['price_source']})",
         p["embodied_note"])
        for p in report["provenance"])
    return Table("Provenance", ("node", "region", "region resolution", "grid intensity",
                                "PUE", "price", "embodied"), rows,
                 (1.2, 1.2, 3.5, 2.0, 2.5, 2.0, 3.0))


def all_tables(report: Report) -> list[Table]:
    """Every table, in the order both formats print them (after the summary and chart)."""
    found = [energy_by_component(report), nodes(report)]
    if report["work_units"]:
        found.append(units(report))
    found.append(provenance(report))
    return found
