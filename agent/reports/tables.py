"""The report as titled tables of display text, shared by the HTML and PDF formats.

Both formats must show the same content; building the rows once here means a figure
cannot appear in one and be forgotten in the other. Numbers are :mod:`joulestat.core.units`'s
(three significant digits, SI prefixes: ``2.05 mJ``, ``119 mg``, ``271 mWh``), the
formatter of the CLI and the dashboard, so a figure reads the same in every view;
unknowns say "unknown", never 0. The JSON and CSV formats keep full precision.
Per-unit cost is shown per million units, where it reads as dollars, not as
``$0.00000000562``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joulestat.carbon.units import J_PER_KWH
from joulestat.core import units as fmt
from joulestat.core.tick import Component
from joulestat.reports.external import shown_labels
from joulestat.reports.idle import policy_words
from joulestat.reports.series import COMPONENT_ORDER, component_sort_key
from joulestat.reports.sources import WHY, sources_class

UNKNOWN = "unknown"
Report = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    # relative column widths for paged formats (None: equal)
    weights: tuple[float, ...] | None = None


def _known(text: str) -> str:
    return UNKNOWN if text == fmt.UNKNOWN else text


def energy(value: float | None) -> str:
    return _known(fmt.energy(value))


def mass(value: float | None) -> str:
    return _known(fmt.mass(value))


def usd(value: float | None) -> str:
    return _known(fmt.usd(value))


def bounds_text(bounds: Any, kind: str = "J") -> str:
    """A figure's bounds as the report prints them (``20.1–28.9 kJ``), or "bounds
    unknown" where some of its energy has no known accuracy (report["bounds"] says
    which source)."""
    if not bounds:
        return "bounds unknown"
    low, high = bounds
    return fmt.energy_range(low, high) if kind == "J" else fmt.mass_range(low, high)


def with_bounds(text: str, bounds: Any, kind: str = "J") -> str:
    """``24.2 kJ, 20.1–28.9 kJ``: a figure followed by its bounds."""
    return f"{text}, {bounds_text(bounds, kind)}"


def number(value: float | None) -> str:
    """A plain figure (a count, a PUE): three significant digits; None -> unknown."""
    return UNKNOWN if value is None else fmt.sig(value)


def duration(seconds: float) -> str:
    """``1 min 01 s``, ``3 h 05 min``: :func:`joulestat.core.units.duration`, as every view writes
    a duration; the seconds stay in the JSON."""
    return fmt.duration(seconds)


def methodology_paragraphs(text: str) -> list[str]:
    """The methodology's hard-wrapped lines joined into its paragraphs (a line that
    starts with a capital after a line ending in a full stop starts one), so each format
    can wrap and indent them itself instead of printing 88-column lines."""
    paragraphs: list[list[str]] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        if not paragraphs or (paragraphs[-1][-1].endswith(".") and line[:1].isupper()):
            paragraphs.append([line])
        else:
            paragraphs[-1].append(line)
    return [" ".join(lines) for lines in paragraphs]


def title(report: Report) -> str:
    job = report["job"]
    return f"joulestat report: {job['name']} ({job['id']})"


def _untracked(report: Report) -> str:
    shares = [(n["node"], n.get("untracked_cpu_share")) for n in report["nodes"]]
    known = [(node, share) for node, share in shares if share is not None]
    if not known:
        return "unknown (no unattributed CPU rows for the job's nodes, e.g. imported)"
    return "; ".join(f"{fmt.share(share)} on {node}" for node, share in known) + (
        " of the node's busy CPU time belonged to processes no job tracked")


def summary(report: Report) -> Table:
    job = report["job"]
    cost = usd(report["cost_usd"])
    if report["cost_usd"] is None and report["cost_note"]:
        cost = f"{UNKNOWN} ({report['cost_note']})"
    total_j = report["energy_j"]["total"]
    rows = [
        ("Job", f"{job['name']} ({job['id']}), {job['kind']}, {job['status']}"),
        ("Started", job["started_at"]),
        ("Ended", job["ended_at"] or f"running (figures as of {report['generated_at']})"),
        ("Duration", duration(job["duration_s"])),
        # Another tool's result labels are its figures below, not label text.
        ("Labels", ", ".join(f"{k}={v}" for k, v in shown_labels(job["labels"]).items())
         or "none"),
        # How joulestat measured it (cpu_source, idle_policy), never among the labels.
        ("Recorded by joulestat", ", ".join(
            f"{k}={v}" for k, v in (job.get("agent_labels") or {}).items())
         or f"{UNKNOWN} (stored or reported before joulestat recorded it, or imported)"),
        ("Energy", f"{with_bounds(energy(total_j), _bounds(report, 'total'))} "
                   f"({_known(fmt.energy_wh(total_j))})"),
        ("Dynamic / idle energy", f"{energy(report['dynamic_energy_j']['total'])} / "
                                  f"{energy(report['idle_energy_j']['total'])}"),
        ("Idle policy", policy_words(report.get("idle_policy")).removeprefix("idle policy ")),
        ("Measured / not measured", _measured(report)),
        ("Operational CO2e", with_bounds(mass(report["co2e_g"]), report.get("co2e_bounds_g"),
                                         "g")),
        ("Embodied CO2e (apart)", mass(report["embodied_co2e_g"])),
        ("Operational + embodied", mass(report["total_co2e_g"])),
        *((f"{e['tool']}'s own CO2e", f"{_external(e)} (joulestat's: "
           f"{mass(report['co2e_g'])}; see notes)") for e in report.get("external_co2e", [])),
        ("Grid intensity (effective)", _known(fmt.intensity(
            report["carbon_intensity_g_per_kwh"]))),
        ("PUE (effective)", number(report["pue"])),
        ("Cost", cost),
        ("Untracked CPU time on the node", _untracked(report)),
    ]
    return Table("Summary", ("", ""), tuple(rows), (1.0, 3.0))


def _bounds(report: Report, component: str) -> Any:
    """A component's energy bounds (``[low, high]`` or None); a schema-2 report has
    none."""
    return (report.get("energy_bounds_j") or {}).get(component)


def _external(figures: Mapping[str, Any]) -> str:
    """Another tool's own CO2e, and the energy it applied its intensity to, as every
    figure is written (``17.4 mg over 550 mWh``), never its CSV's ``1.74e-05``."""
    co2e = mass(figures["co2e_g"])
    kwh = figures.get("energy_kwh")
    return co2e if kwh is None else f"{co2e} over {_known(fmt.energy_wh(kwh * J_PER_KWH))}"


def _measured(report: Report) -> str:
    by_class = report.get("energy_by_class") or {}
    total = sum(by_class.values())
    if total <= 0:
        return "no energy yet"
    return ", ".join(f"{fmt.share(j / total)} {cls}" for cls, j in
                     sorted(by_class.items(), key=lambda kv: -kv[1]) if j > 0)


def energy_by_component(report: Report) -> Table:
    components = [c for c in (*COMPONENT_ORDER, Component.OTHER)
                  if report["energy_j"][c] or report["sources"].get(c)]

    def sources(component: str) -> str:
        found = report["sources"].get(component, [])
        if not found:
            return ""
        cls = sources_class(found)
        return f"{', '.join(found)} ({cls})" if cls in WHY else ", ".join(found)

    rows = [(c, energy(report["dynamic_energy_j"][c]), energy(report["idle_energy_j"][c]),
             energy(report["energy_j"][c]), bounds_text(_bounds(report, c)), sources(c))
            for c in components]
    extra = sorted((c for c in report["sources"] if c not in components
                    and c not in COMPONENT_ORDER), key=component_sort_key)
    rows += [(f"other: {c}", "", "", "", "", sources(c)) for c in extra]
    rows.append(("total", energy(report["dynamic_energy_j"]["total"]),
                 energy(report["idle_energy_j"]["total"]), energy(report["energy_j"]["total"]),
                 bounds_text(_bounds(report, "total")), ""))
    return Table("Energy by component", ("component", "dynamic", "idle", "total", "bounds",
                                         "sources"),
                 tuple(rows), (1.0, 1.0, 1.0, 1.0, 1.6, 3.4))


def nodes(report: Report) -> Table:
    rows = tuple(
        (n["node"], n["instance_type"] or UNKNOWN, n["region"] or UNKNOWN,
         duration(n["duration_s"]), energy(n["energy_j"]["total"]),
         mass(n["co2e_g"]), mass(n["embodied_co2e_g"]), usd(n["cost_usd"]),
         "; ".join(f"{k}={fmt.count(v)}" for k, v in n["work_units"].items()) or "none")
        for n in report["nodes"])
    return Table("Nodes", ("node", "instance type", "region", "held", "energy",
                           "CO2e (operational)", "embodied", "cost", "units"), rows)


def units(report: Report) -> Table:
    rows = []
    for unit, count in report["work_units"].items():
        per = report["per_unit"].get(unit)
        million = report["per_million_units"].get(unit)
        if per is None or million is None:
            rows.append((unit, fmt.count(count), "", "", "", "", "", "", "", ""))
            continue
        rows.append((unit, fmt.count(count),
                     _known(fmt.count(report["throughput_per_hour"].get(unit))),
                     energy(per["energy_j"]), bounds_text(per.get("energy_bounds_j")),
                     energy(per.get("dynamic_energy_j")),
                     mass(per["co2e_g"]), mass(per["sci_co2e_g"]),
                     _known(fmt.energy_wh(million["energy_j"])), usd(million["cost_usd"])))
    return Table("Work units", ("unit", "count", "per hour", "energy/unit",
                                "energy/unit bounds", "dynamic energy/unit (above idle)",
                                "CO2e/unit (operational)", "SCI/unit (+ embodied)",
                                "energy/M units", "cost/M units"), tuple(rows))


# How a served latency kind reads in a table (the JSON keeps ttft, itl, e2e).
LATENCY_KINDS = {"ttft": "time to first token", "itl": "inter-token latency",
                 "e2e": "end to end"}


def latency(report: Report) -> Table:
    """A serving job's latency (``--serving-metrics``, the JSON's ``latency``): per
    model served and kind, p50, p99 and mean with their SI prefix, and how many requests
    or tokens they are over."""
    rows = tuple(
        (model or "(unnamed)", LATENCY_KINDS.get(kind, kind),
         _known(fmt.seconds(figures.get("p50_s"))), _known(fmt.seconds(figures.get("p99_s"))),
         _known(fmt.seconds(figures.get("mean_s"))), _known(fmt.count(figures.get("count"))))
        for model, per_kind in report["latency"].items()
        for kind, figures in per_kind.items())
    return Table("Served latency", ("model", "latency", "p50", "p99", "mean", "observed"),
                 rows)


def steady_state(report: Report) -> Table:
    """A serving job's steady-state window beside the whole job (the JSON's ``serving``,
    :mod:`joulestat.reports.steady_state`): which window, whether it is valid and why
    not, and energy per output, prompt and total token and per request in each."""
    serving = report["serving"]
    window, whole = serving.get("steady_window"), serving["whole_job"]

    def per(span: Mapping[str, Any] | None, key: str) -> str:
        return _known(fmt.energy(span.get(key))) if span else UNKNOWN

    if window is not None:
        start = window["offset_s"]
        where = (f"{fmt.duration(start)} to {fmt.duration(start + window['length_s'])} "
                 f"after the first sample ({window['rule']})")
        verdict = window["verdict"] + (f": {window['reason']}" if window.get("reason") else "")
        cv = fmt.share(window.get("cv"))
        coverage = (f"power {fmt.share(window['power_coverage'])}, metrics "
                    f"{fmt.share(window['metrics_coverage'])}")
    else:
        where, verdict, cv, coverage = (UNKNOWN, serving.get("no_window_reason") or UNKNOWN,
                                        UNKNOWN, UNKNOWN)
    rows = (
        ("window", where, fmt.duration(whole["length_s"])),
        ("verdict", verdict, ""),
        ("coverage", coverage, f"power {fmt.share(whole['power_coverage'])}, metrics "
                               f"{fmt.share(whole['metrics_coverage'])}"),
        ("variation of J per output token", cv, ""),
        ("energy per output token", per(window, "j_per_output_token"),
         per(whole, "j_per_output_token")),
        ("energy per prompt token", per(window, "j_per_prompt_token"),
         per(whole, "j_per_prompt_token")),
        ("energy per token (prompt + output)", per(window, "j_per_total_token"),
         per(whole, "j_per_total_token")),
        ("energy per request", per(window, "j_per_request"), per(whole, "j_per_request")),
    )
    return Table("Serving: steady state", ("figure", "steady-state window", "whole job"),
                 rows)


def request_energy(report: Report) -> Table:
    """Energy per prefill and per decode token (a fit over the job's ticks) and per
    request at the engine's p50 and p99 lengths, with bounds (the JSON's
    ``serving.token_split`` and ``serving.request_energy``)."""
    split = report["serving"]["token_split"]
    requests = report["serving"]["request_energy"]
    if split["separable"]:
        rows = [("energy per prefill (prompt) token",
                 f"{fmt.energy(split['j_per_prefill_token'])} "
                 f"± {fmt.energy(split['j_per_prefill_token_se'])}"),
                ("energy per decode (output) token",
                 f"{fmt.energy(split['j_per_decode_token'])} "
                 f"± {fmt.energy(split['j_per_decode_token_se'])}"),
                ("power at no load", _known(fmt.power(split.get("base_w"))))]
    else:
        rows = [("prefill vs decode", f"not separable: {split.get('reason') or UNKNOWN}")]
    for name in ("p50", "p99"):
        value = requests.get(f"{name}_j")
        if value is None:
            continue
        lengths = (f"{fmt.count(requests[f'{name}_prompt_tokens'])} prompt + "
                   f"{fmt.count(requests[f'{name}_output_tokens'])} output tokens")
        low, high = requests[f"{name}_low_j"], requests[f"{name}_high_j"]
        rows.append((f"{name} request ({lengths})",
                     f"{fmt.energy(value)} ({fmt.energy_range(low, high)})"))
    if requests.get("ml_energy_j") is not None:
        rows.append(("request at the window's J per output token x mean output length",
                     fmt.energy(requests["ml_energy_j"])))
    if requests.get("reason") and split["separable"]:  # else said in the split's row
        rows.append(("request percentiles", requests["reason"]))
    return Table("Serving: energy per token and request", ("figure", "value"), tuple(rows))


def provenance(report: Report) -> Table:
    rows = tuple(
        (p["node"], p["region"] or UNKNOWN, p["region_resolution"],
         f"{_known(fmt.intensity(p['carbon_intensity_g_per_kwh']))} "
         f"({p['intensity_source']}, {p['intensity_year'] or 'no year'})",
         f"{number(p['pue'])} ({p['pue_source']})",
         f"{_known(fmt.price_per_hour(p['price_usd_per_hour']))} ({p['price_source']})",
         p["embodied_note"])
        for p in report["provenance"])
    return Table("Provenance", ("node", "region", "region resolution", "grid intensity",
                                "PUE", "price", "embodied"), rows,
                 (1.6, 1.4, 3.5, 2.0, 2.5, 2.0, 3.0))


def all_tables(report: Report) -> list[Table]:
    """Every table, in the order both formats print them (after the summary and chart)."""
    found = [energy_by_component(report), nodes(report)]
    if report["work_units"]:
        found.append(units(report))
    if report.get("latency"):
        found.append(latency(report))
    if report.get("serving"):
        found += [steady_state(report), request_energy(report)]
    found.append(provenance(report))
    return found
