"""``joulestat compare``: measured jobs side by side, per unit of work, with SLA sizing.

Prints the table a published comparison quotes ("×6.3 throughput, −92 % energy per
inference, $2.00 vs $25.00 per million inferences, 3 instances for 100k/h") from the
jobs in the store. The arithmetic is :func:`joulestat.reports.compare.compare`; this module
reads the options, loads the figures and lays the table out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from joulestat.attribution.registry import KINDS
from joulestat.core.errors import ConfigError
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

COMPARE_OPTIONS = ("config", "db", "log_level", "carbon_intensity", "pue", "price_per_hour",
                   "prices", "electricity_maps_token", "electricity_maps_url")
FLAGS = {"by": "--by", "unit": "--unit", "baseline": "--baseline",
         "sla_units_per_hour": "--sla", "jobs": "--jobs"}
NOT_APPLICABLE = "-"
UNKNOWN = "unknown"


def _number(text: str) -> float:
    """An argparse ``type`` for a finite number; the sign is for compare() to judge."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _by(text: str) -> str:
    """An argparse ``type`` for ``--by``: job, instance_type, model or label:KEY."""
    from joulestat.reports.compare import CompareError
    from joulestat.reports.compare_groups import check_by

    try:
        check_by(text)
    except CompareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare jobs or instance types per unit of work, with SLA sizing",
        description="Compare measured jobs per unit of work (throughput per instance-hour, "
        "energy, operational CO2e and cost per unit, cost per million units) against a "
        "baseline, and size a fleet for a throughput target. Jobs that did not count the "
        "unit are compared per run. See docs/compare.md.",
    )
    parser.add_argument("--kind", choices=KINDS, help="only jobs of this kind")
    parser.add_argument("--jobs", nargs="+", action="extend", metavar="JOB",
                        help="jobs to compare, each an id, id prefix or name, in this order; "
                        "a name means every run of it (the runs are listed on stderr; give "
                        "ids to compare only some); --jobs may be repeated, adding to the "
                        "list [default: every job, by start time]")
    parser.add_argument("--by", type=_by, default="job",
                        metavar="job|instance_type|model|label:KEY",
                        help="a row per job, per instance type with its jobs pooled, per "
                        "model of multi-model servers (energy split by busy time, plus "
                        "their idle part), or per value of the job label KEY "
                        "(label:concurrency) with its jobs pooled [default: job]")
    parser.add_argument("--unit", help="unit of work to compare per [default: the unit "
                        "most jobs counted]")
    parser.add_argument("--baseline", metavar="X", help="job id, id prefix or name (--by "
                        "job; a name: its latest compared run), instance type (--by "
                        "instance_type) or model (--by model) the deltas are against "
                        "[default: the first row]")
    parser.add_argument("--sla", type=_number, metavar="UNITS_PER_HOUR",
                        help="size a fleet of each row's instances for this many units "
                        "per hour")
    parser.add_argument("--json", action="store_true",
                        help='one JSON object: {"unit", "baseline", "rows", ...}')
    add_options(parser, COMPARE_OPTIONS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from joulestat.carbon.footprint import CarbonSettings
    from joulestat.carbon.pricing import prices_used
    from joulestat.reports.compare import CompareError, compare
    from joulestat.reports.compare_data import figures_for, pick_baseline, pick_jobs
    from joulestat.store.bootstrap import open_engine

    settings = resolve(args, COMPARE_OPTIONS)
    carbon = CarbonSettings(
        carbon_intensity_g_per_kwh=settings["carbon_intensity"], pue=settings["pue"],
        price_per_hour_usd=settings["price_per_hour"], prices=settings["prices"],
        electricity_maps_token=settings["electricity_maps_token"],
        electricity_maps_url=settings["electricity_maps_url"])
    if args.sla is not None and args.sla <= 0:  # before reading the store
        raise ConfigError(f"--sla: must be a number of units per hour above 0, got {args.sla:g}")
    engine = open_engine(settings["db"])
    try:
        picked = pick_jobs(engine, kind=args.kind, jobs=args.jobs)
        _say("--jobs", [*_runs_notes(engine, args.jobs, args.kind), *picked.notes])
        figures = figures_for(engine, picked.refs, carbon)
        if args.by == "model":
            from joulestat.reports.compare_models import by_model
            from joulestat.store.model_split import model_splits

            figures = by_model(figures, model_splits(engine, [f.job_id for f in figures]))
        baseline = args.baseline
        if baseline is not None and args.by == "job":
            baseline, notes = pick_baseline(engine, baseline, figures, kind=args.kind)
            _say("--baseline", notes)
        table = compare(figures, by=args.by, unit=args.unit, baseline=baseline,
                        sla_units_per_hour=args.sla)
    except CompareError as exc:
        raise ConfigError(f"{FLAGS.get(exc.argument, exc.argument)}: {exc}") from None
    notes = list(dict.fromkeys(f"{f.name}: {note}" for f in figures for note in f.notes))
    prices = prices_used((n.instance_type for f in figures for n in f.nodes), carbon)
    if args.json:
        json.dump(as_json(table, notes, prices), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(render_text(table, notes, prices))
    return 0


def _runs_notes(engine: Engine, refs: Sequence[str] | None, kind: str | None) -> list[str]:
    """Which runs each name in ``--jobs`` brought, where it has several. A name means
    every run of it (comparing runs is what compare is for), where every other command
    takes the latest: never silently, so each such name lists its runs."""
    from joulestat.store.job_refs import MAX_LISTED, JobRefError, resolve_job
    from joulestat.store.jobs import started_text

    notes = []
    for ref in dict.fromkeys(refs or ()):
        try:
            found = resolve_job(engine, ref, kind)
        except JobRefError:  # pick_jobs() has said so already
            continue
        if found.how != "name" or len(found.jobs) < 2:
            continue
        runs = ", ".join(f"{job.id} (started {started_text(job.started_s)})"
                         for job in found.jobs[:MAX_LISTED])
        more = len(found.jobs) - MAX_LISTED
        runs += f" and {more} more" if more > 0 else ""
        notes.append(f"{ref!r} names {len(found.jobs)} runs: {runs}; comparing all of them "
                     "(give ids to compare only some)")
    return notes


def _say(flag: str, notes: list[str]) -> None:
    """How a job reference was read, when it could have meant another job: on stderr,
    so ``--json`` output stays one object."""
    for note in notes:
        print(f"joulestat compare: {flag}: {note}", file=sys.stderr)


def as_json(table: Any, notes: list[str], prices: list[Any] | None = None
            ) -> dict[str, Any]:
    """``{"unit", "by", "baseline", "sla_units_per_hour", "rows", "headlines", "prices",
    "notes"}``; ``prices`` gives each instance type's USD per hour and its source (a
    prices file, the catalog, the override); unknown figures are null, never 0."""
    from joulestat.reports.compare_words import headline

    base = table.baseline_row
    return {
        "unit": table.unit, "by": table.by, "baseline": table.baseline,
        "sla_units_per_hour": table.sla_units_per_hour,
        "rows": [asdict(row) for row in table.rows],
        "headlines": [{"row": row.label, "job_id": row.job_id, "text": headline(row, base)}
                      for row in table.rows if not row.is_baseline],
        "prices": [asdict(p) for p in prices or []],
        "notes": notes,
    }


# -- text ---------------------------------------------------------------------------------


def _sig(value: float | None, digits: int = 3, missing: str = UNKNOWN) -> str:
    """``digits`` significant digits with thousands separators, no exponent."""
    from joulestat.core import units

    return missing if value is None else units.sig(value, digits)


def _figure(text: str) -> str:
    """A formatted figure; unknown reads ``unknown`` in the text table."""
    from joulestat.core import units

    return UNKNOWN if text == units.UNKNOWN else text


def _grid(headers: list[str], rows: list[list[str]], left: int) -> list[str]:
    """Columns padded to width; the first ``left`` columns flush left, numbers right."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for cells in [headers, *rows]:
        parts = [c.ljust(w) if i < left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return lines


def _local(t_s: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t_s).strftime("%Y-%m-%d %H:%M")


def _labels(rows: Any) -> dict[int, str]:
    """Row labels; runs of one name told apart by the labels that differ between them
    (else their start, else a short id); ``*`` marks the baseline."""
    from joulestat.reports.compare_words import row_names

    return {i: name + (" *" if row.is_baseline else "")
            for i, (name, row) in enumerate(zip(row_names(rows, _local), rows, strict=True))}


def _lead(label: str, row: Any, by_group: bool) -> list[str]:
    """The label, and the row's instance types unless the label already is them."""
    return [label] if not by_group else [label, "+".join(row.instance_types)]


def _accelerators(row: Any) -> str:
    """What the row's nodes compute on ("1 x AWS Inferentia2"), as compare() names it."""
    return " + ".join(row.accelerators) or UNKNOWN


def _delta(value: float | None, comparable: bool, kind: str = "pct") -> str:
    from joulestat.reports.compare_words import format_pct, format_ratio

    if not comparable:
        return NOT_APPLICABLE
    if value is None:
        return UNKNOWN
    return format_ratio(value) if kind == "x" else format_pct(value)


def _price_lines(prices: list[Any]) -> list[str]:
    """``prices ...:`` and one line per instance type: its USD/h and where that came from."""
    from joulestat.core import units

    if not prices:
        return []
    width = max(len(p.instance_type or "unknown") for p in prices)
    usds = [_figure(units.price_per_hour(p.usd_per_hour)) for p in prices]
    usd_width = max(len(u) for u in usds)
    lines = ["prices (USD per instance-hour):"]
    for p, usd in zip(prices, usds, strict=True):
        lines.append(f"  {(p.instance_type or 'unknown').ljust(width)}  {usd.rjust(usd_width)}"
                     f"  {p.source}: {p.note}")
    return [*lines, ""]


def render_text(table: Any, notes: list[str], prices: list[Any] | None = None) -> str:
    """The tables (per unit, then per run), headlines, SLA sizing, the price of each
    instance type with its source, and notes. Figures are :mod:`joulestat.core.units`' (``2.05
    mJ``, ``158 ng``, ``$12.03``), as the dashboard and the reports print them."""
    from joulestat.core import units
    from joulestat.reports.compare import PER_UNIT
    from joulestat.reports.compare_words import format_usd, headline, plural

    if not table.rows:
        return "no jobs to compare: run some with `joulestat run --name NAME -- CMD`"
    base = table.baseline_row
    labels = _labels(table.rows)
    base_label = next(labels[i] for i, r in enumerate(table.rows) if r.is_baseline)
    base_label = base_label.removesuffix(" *")
    by_job = table.by == "job"
    first = ("job" if by_job else "instance type" if table.by == "instance_type"
             else table.by.removeprefix("label:"))
    lead = [first] if table.by == "instance_type" else [first, "instance types"]
    grouped = table.by != "instance_type"
    per_unit = [(i, r) for i, r in enumerate(table.rows) if r.basis == PER_UNIT]
    per_run = [(i, r) for i, r in enumerate(table.rows) if r.basis != PER_UNIT]
    out = [f"{len(table.rows)} row(s) by {table.by.replace('_', ' ')}, baseline (*) "
           f"{base_label}: throughput per instance-hour, CO2e operational (location-based), "
           "cost = hourly price x hours held (prices below)", ""]
    if per_unit:
        unit = table.unit
        out.append(f"per {unit}:")
        headers = [*lead, "accelerators", "runs", f"{plural(unit)}/instance-h",
                   f"energy/{unit}", f"accelerator energy/{unit}", f"CO2e/{unit}",
                   f"USD/1M {plural(unit)}", "energy/run",
                   "throughput", f"energy/{unit}", f"CO2e/{unit}", f"cost/{unit}",
                   "energy is"]
        same = base.basis == PER_UNIT
        out += _grid(headers, [[
            *_lead(labels[i], r, grouped), _accelerators(r), str(r.runs),
            _figure(units.count(r.units_per_hour)), _figure(units.energy(r.energy_per_unit_j)),
            _figure(units.energy(r.accelerator_per_unit_j)),
            _figure(units.mass(r.co2e_per_unit_g)),
            _figure(units.usd(r.cost_per_million_usd)), units.energy(r.energy_per_run_j),
            _delta(r.throughput_x, same, "x"),
            _delta(r.energy_pct, same), _delta(r.co2e_pct, same), _delta(r.cost_pct, same),
            r.energy_class or UNKNOWN,
        ] for i, r in per_unit], left=len(lead) + 1)
        out.append("")
    if per_run:
        counted = f" (no {plural(table.unit)} counted)" if table.unit else ""
        out.append(f"per run{counted}:")
        headers = [*lead, "accelerators", "runs", "energy/run", "CO2e/run", "cost/run",
                   "energy/run", "CO2e/run", "cost/run", "energy is"]
        same = base.basis != PER_UNIT
        out += _grid(headers, [[
            *_lead(labels[i], r, grouped), _accelerators(r), str(r.runs),
            units.energy(r.energy_per_run_j),
            units.mass(r.co2e_per_run_g), _figure(units.usd(r.cost_per_run_usd)),
            _delta(r.energy_pct, same), _delta(r.co2e_pct, same), _delta(r.cost_pct, same),
            r.energy_class or UNKNOWN,
        ] for i, r in per_run], left=len(lead) + 1)
        out.append("")
    lines = [f"{labels[i].removesuffix(' *')} vs {base_label}: {headline(r, base)}"
             for i, r in enumerate(table.rows) if not r.is_baseline and r.basis == base.basis]
    if lines:
        out += [*lines, ""]
    if table.sla_units_per_hour is not None and per_unit:
        out.append(f"to serve {_sig(table.sla_units_per_hour, 6)} {plural(table.unit)}/h:")
        out += _grid([first, "instances", "fleet power", "fleet cost/h"], [[
            labels[i], str(r.instances_needed), _figure(units.power(r.fleet_power_w)),
            UNKNOWN if r.fleet_cost_per_hour_usd is None
            else f"${format_usd(r.fleet_cost_per_hour_usd)}",
        ] for i, r in per_unit if r.instances_needed is not None], left=1)
        out.append("")
    out += _price_lines(prices or [])
    if notes:
        out += ["notes:", *(f"  {note}" for note in notes)]
    return "\n".join(out).rstrip()
