"""A report in words: the headline at its top and the notes at its end.

Why: a manager opening a report read a table of figures and, at the end, "Notes: None:
every figure is known", although every figure was a model estimate. A report now opens
with one sentence a reader can quote (energy, CO2e, cost, per unit, and how much of the
energy was measured) and ends with every estimated factor in words: energy from a
model or a file that does not say, an annual-average grid intensity, an assumed or
fleet-average PUE, a list price, an embodied estimate, the node's CPU time that no job
tracked, another tool's own figure. Both are built from the report dict alone, so the
JSON, HTML and PDF say the same; numbers are :mod:`joulestat.core.units`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulestat.core import units
from joulestat.reports.external import ExternalFigures, comparison_note
from joulestat.reports.idle import NOT_RECORDED, policy_words
from joulestat.reports.sources import (
    ESTIMATED,
    MEASURED,
    UNSTATED,
    WHY,
    source_class,
    sources_class,
)

Report = Mapping[str, Any]
# A node whose unattributed processes used more of its busy CPU time than this is worth
# a sentence: its jobs' CPU figures carry that much of somebody else's work around them.
UNTRACKED_WORTH_SAYING = 0.05
# A job whose energy is mostly idle power is worth a sentence: its per-unit figure then
# measures how long it held the node more than what its work cost.
IDLE_WORTH_SAYING = 0.5


def measured_share(report: Report) -> float | None:
    """The share of the job's energy read from a hardware counter; None with no energy."""
    by_class = report.get("energy_by_class") or {}
    total = sum(by_class.values())
    return by_class.get(MEASURED, 0.0) / total if total > 0 else None


def _provenance_phrase(report: Report) -> str:
    """``Energy 60 % estimated (import:codecarbon/model:codecarbon-ram), 40 % unstated
    (import:codecarbon).``: each class names its own sources right after its share, so
    a reader never has to pair a list of classes with a list of sources in another
    order; measured energy needs no names."""
    by_class = report.get("energy_by_class") or {}
    total = sum(by_class.values())
    if total <= 0:
        return "No energy recorded yet."
    named: dict[str, set[str]] = {}
    for sources in report["sources"].values():
        for source in sources:
            named.setdefault(source_class(source), set()).add(source)
    parts = []
    for cls, joules in sorted(by_class.items(), key=lambda kv: -kv[1]):
        if joules <= 0:
            continue
        sources = sorted(named.get(cls, ())) if cls != MEASURED else []
        parts.append(f"{units.share(joules / total)} {cls}"
                     + (f" ({', '.join(sources)})" if sources else ""))
    return f"Energy {', '.join(parts)}."


def headline(report: Report) -> str:
    """One sentence: ``bert (training, 1 min 01 s) used 4.51 kJ (1.25 Wh): 119 mg CO2e
    operational (embodied unknown), cost unknown; 2.05 mJ (1.10 mJ above idle) and
    54.1 µg CO2e per sample (idle policy share). Energy 100 % estimated
    (model:ccf-vcpu).`` The energy above idle and the policy ride with the per-unit
    figure: on a VM most of it can be idle power, and the policy decides who carries
    that."""
    job = report["job"]
    energy_j = report["energy_j"]["total"]
    embodied = report["embodied_co2e_g"]
    carbon = (f"{units.mass(report['co2e_g'])} CO2e operational ("
              + (f"embodied {units.mass(embodied)} apart)" if embodied is not None
                 else "embodied unknown)"))
    cost = f"cost {units.usd(report['cost_usd'])}" if report["cost_usd"] is not None else (
        "cost unknown")
    bounds = (report.get("energy_bounds_j") or {}).get("total")
    within = (f", {units.energy_range(*bounds)}" if bounds
              else ", bounds unknown" if "energy_bounds_j" in report else "")
    text = (f"{job['name']} ({job['kind']}, {units.duration(job['duration_s'])}) used "
            f"{units.energy(energy_j)}{within} ({units.energy_wh(energy_j)}): {carbon}, "
            f"{cost}")
    per_unit = report.get("per_unit") or {}
    if per_unit:
        unit, figures = max(per_unit.items(),
                            key=lambda kv: report["work_units"].get(kv[0], 0.0))
        dynamic = figures.get("dynamic_energy_j")
        above = f" ({units.energy(dynamic)} above idle)" if dynamic is not None else ""
        policy = report.get("idle_policy")
        text += (f"; {units.energy(figures['energy_j'])}{above} and "
                 f"{units.mass(figures['co2e_g'])} CO2e per {unit} ("
                 + (f"idle policy {policy}" if policy else NOT_RECORDED) + ")")
    return f"{text}. {_provenance_phrase(report)}"


def _energy_notes(report: Report) -> list[str]:
    """Per node and component whose energy is not all measured: which source, why."""
    notes = []
    for entry in report["nodes"]:
        for component, sources in entry["sources"].items():
            cls = sources_class(sources)
            if cls == MEASURED:
                continue
            where = f"node {entry['node']}: {component} energy"
            named = ", ".join(sources)
            if cls == ESTIMATED:
                notes.append(f"{where} is estimated ({named}): {WHY[cls]}; see "
                             "docs/methodology.md for the model and its sources")
            elif cls == UNSTATED:
                notes.append(f"{where} is not known to be measured ({named}): {WHY[cls]}")
            else:
                notes.append(f"{where} is {cls} ({named}): {WHY.get(cls, '')}")
    return notes


def _node_notes(report: Report) -> list[str]:
    notes = []
    for p in report["provenance"]:
        node, level = p["node"], p["intensity_level"]
        if level != "override" and p.get("live_energy_kwh", 0.0) == 0:
            notes.append(
                f"node {node}: grid intensity {units.intensity(p['carbon_intensity_g_per_kwh'])}"
                f" is a {level} annual average for {p.get('intensity_location') or 'the world'}"
                f" ({p['intensity_source']}, {p['intensity_year'] or 'no year'}), not the "
                "grid's mix during the job" + (": the region was not known"
                                               if level == "world average" else ""))
        if p["pue_source"].startswith("default:"):
            notes.append(f"node {node}: PUE {units.sig(p['pue'])} assumed (facility "
                         "unknown: no cooling or power overhead counted)")
        elif p["pue_source"].startswith("ccf:"):
            notes.append(f"node {node}: PUE {units.sig(p['pue'])} is the provider's fleet "
                         f"average ({p['pue_source']}), not this data centre's")
        if str(p["price_source"]).startswith("catalog:"):
            notes.append(f"node {node}: cost at the catalog's list price "
                         f"({units.price_per_hour(p['price_usd_per_hour'])}), not your bill: give "
                         "your own with --prices FILE")
        if p["embodied_method"] != "unknown":
            notes.append(f"node {node}: embodied CO2e is estimated ({p['embodied_method']}): "
                         f"{p['embodied_note']}")
    for entry in report["nodes"]:
        share = entry.get("untracked_cpu_share")
        if share is not None and share >= UNTRACKED_WORTH_SAYING:
            notes.append(f"node {entry['node']}: {units.share(share)} of its busy CPU time "
                         "during the job belonged to processes no job tracked; the job's "
                         "CPU energy is its own share of the rest")
    return notes


def _idle_notes(report: Report) -> list[str]:
    """A sentence when most of the job's energy is idle power it carried."""
    total_j = report["energy_j"]["total"]
    idle_j = report["idle_energy_j"]["total"]
    if total_j <= 0 or idle_j / total_j < IDLE_WORTH_SAYING:
        return []
    policy = report.get("idle_policy")
    return [f"{units.share(idle_j / total_j)} of the job's energy is idle power "
            f"({policy_words(policy)}): its energy per unit measures the time it held the "
            "node as much as its work; the dynamic energy (above idle) is what the work added"]


def _bounds_notes(report: Report) -> list[str]:
    """What the bounds rest on, source by source, and what has none (schema 3)."""
    basis = report.get("bounds")
    if not basis:
        return []
    applied = "; ".join(
        f"{source} {_pct(a['low_pct'])}/{_pct(a['high_pct'])} ({a['basis']}: {a['reference']})"
        for source, a in basis["sources"].items())
    found = [f"energy bounds: {applied}" if applied else "energy bounds: no energy yet"]
    if basis.get("attribution"):
        a = basis["attribution"]
        found.append(f"energy bounds: the job's share above idle adds "
                     f"{_pct(a['low_pct'])}/{_pct(a['high_pct'])} ({a['basis']}: "
                     f"{a['reference']})")
    if basis["unknown"]:
        found.append(f"energy bounds unknown: no accuracy is known for "
                     f"{', '.join(basis['unknown'])} (docs/methodology.md, Uncertainty)")
    if basis.get("co2e"):
        found.append(f"CO2e bounds: {basis['co2e']}")
    return found


def _pct(value: float) -> str:
    return f"{value:+.3g} %"


def notes(report: Report) -> list[str]:
    """Every unknown (footprint's notes, already in ``report['notes']``) and every
    estimated factor, in words, without repeats."""
    found = [*report["notes"], *_energy_notes(report), *_node_notes(report),
             *_idle_notes(report), *_bounds_notes(report)]
    for figures in report.get("external_co2e") or []:
        found.append(comparison_note(ExternalFigures(**figures), report["co2e_g"]))
    return list(dict.fromkeys(found))
