"""``joulestat compare``: measured jobs side by side, per unit of work, with SLA sizing.

Prints the table a published comparison quotes ("×6.3 throughput, −92 % energy per
inference, $2.00 vs $25.00 per million inferences, 3 instances for 100k/h") from the
jobs in the store. The arithmetic is :func:`joulestat.reports.compare.table.compare` and
the layout :func:`joulestat.reports.compare.words.render_text`; this module reads the
options and loads the figures.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from joulestat.core import jsonout
from joulestat.core.errors import ConfigError
from joulestat.core.validation import KINDS
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from joulestat.reports.compare.table import JobFigures

COMPARE_OPTIONS = ("config", "db", "log_level", "carbon_intensity", "pue", "price_per_hour",
                   "prices", "electricity_maps_token", "electricity_maps_url")
FLAGS = {"by": "--by", "unit": "--unit", "baseline": "--baseline",
         "sla_units_per_hour": "--sla", "jobs": "--jobs"}


def _number(text: str) -> float:
    """An argparse ``type`` for a finite number; the sign is for compare() to judge."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _count(text: str) -> int:
    """An argparse ``type`` for ``--min-runs``: a whole number of runs, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs, got {text!r}"
                                         ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 run, got {value}")
    return value


def _by(text: str) -> str:
    """An argparse ``type`` for ``--by``: job, instance_type, model or label:KEY."""
    from joulestat.reports.compare.groups import CompareError, check_by

    try:
        check_by(text)
    except CompareError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _target(text: str) -> Any:
    from joulestat.reports.compare.latency import parse_target

    try:
        return parse_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare jobs or instance types per unit of work, with SLA sizing",
        description="Compare measured jobs per unit of work (throughput per instance-hour, "
        "energy and dynamic energy (above idle) with the idle policy they were attributed "
        "under, operational CO2e and cost per unit, cost per million units) against a "
        "baseline, and size a fleet for a throughput target. Jobs that did not count the "
        "unit are compared per run. Each figure carries its bounds (its sources' accuracy) "
        "and, for pooled runs, their spread; a difference is given with its 95 % interval "
        "(what two rows' sources share cancels in it), and one whose interval holds no "
        "change is written \"not distinguishable from the baseline\". See docs/compare.md.",
    )
    parser.add_argument("--kind", choices=KINDS, help="only jobs of this kind")
    parser.add_argument("--jobs", nargs="+", action="extend", metavar="JOB",
                        help="jobs to compare, each an id, id prefix or name, in this order; "
                        "a name means every run of it (the runs are listed on stderr; give "
                        "ids to compare only some); --jobs may be repeated, adding to the "
                        "list [default: every job, by start time]")
    parser.add_argument("--by", type=_by, default="job",
                        metavar="job|name|instance_type|model|label:KEY",
                        help="a row per job, per job name with its repeated runs pooled, "
                        "per instance type with its jobs pooled, per model served (each "
                        "model carries its share of its jobs' whole energy, split by busy "
                        "time; jobs that served no named model are left out), or per value "
                        "of the job label KEY (label:concurrency) with its jobs pooled; "
                        "pooled rows show their runs' mean and spread [default: job]")
    parser.add_argument("--min-runs", type=_count, default=1, metavar="N",
                        help="warn about each row with fewer than N runs: one run is a "
                        "sample, and a delta against it may be noise [default: 1, no "
                        "warning]")
    parser.add_argument("--unit", help="unit of work to compare per [default: the unit "
                        "most jobs counted]")
    parser.add_argument("--baseline", metavar="X", help="job id, id prefix or name (--by "
                        "job; a name: its latest compared run), job name (--by name), "
                        "instance type (--by instance_type) or model (--by model) the "
                        "deltas are against "
                        "[default: the first row]")
    parser.add_argument("--sla", type=_number, metavar="UNITS_PER_HOUR",
                        help="size a fleet of each row's instances for this many units "
                        "per hour")
    parser.add_argument("--latency-target", action="append", type=_target, default=[],
                        metavar="KIND_PXX=S",
                        help="keep the rows whose served latency meets this (ttft_p99=0.5: "
                        "99th percentile time to first token at most 0.5 s; KIND ttft, itl "
                        "or e2e, PXX p50, p90, p95 or p99; from the serving engine's "
                        "histograms, --serving-metrics) and name the one of least energy "
                        "per unit among them; repeat for several")
    parser.add_argument("--json", action="store_true",
                        help='one JSON object: {"unit", "baseline", "rows", ...}')
    parser.add_argument("--wide", action="store_true",
                        help="every column of the text table (bounds, spread, accelerators, "
                        "each delta), however wide; by default the columns that matter, "
                        "in lines of at most 100 characters")
    add_options(parser, COMPARE_OPTIONS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        return _compare(args)
    finally:
        gc.freeze()  # what the command made, out of the collector's last pass at exit


def _compare(args: argparse.Namespace) -> int:
    from joulestat.carbon.footprint import CarbonSettings
    from joulestat.carbon.pricing import prices_used
    from joulestat.reports.compare.figures import (
        figures_for,
        figures_of_kind,
        pick_baseline,
        pick_jobs,
    )
    from joulestat.reports.compare.groups import CompareError
    from joulestat.reports.compare.table import compare
    from joulestat.store.access import open_reader_engine

    settings = resolve(args, COMPARE_OPTIONS)
    carbon = settings.section(CarbonSettings)
    if args.sla is not None and args.sla <= 0:  # before reading the store
        raise ConfigError(f"--sla: must be a number of units per hour above 0, got {args.sla:g}")
    engine = open_reader_engine(settings["db"])
    # What the command keeps till it exits is loaded now (SQLAlchemy, the driver, the
    # schema, the catalogs): frozen out of the cyclic collector's passes (gc.freeze),
    # which walked all of it in each full pass and once more as the interpreter exits,
    # for nothing to free. Over a fleet's week that was 0.25 s of a 2 s comparison: 0.14
    # in passes while it ran, 0.1 at exit (docs/store.md).
    gc.freeze()
    if args.by == "instance_type" and args.jobs is None and not args.latency_target:
        pooled = _pooled(engine, args, carbon)
        if pooled is not None:
            return pooled
    try:
        if args.jobs is None:  # every job (of --kind), chosen in SQL
            figures = figures_of_kind(engine, args.kind, carbon)
        else:
            picked = pick_jobs(engine, kind=args.kind, jobs=args.jobs)
            _say("--jobs", [*_runs_notes(engine, args.jobs, args.kind), *picked.notes])
            figures = figures_for(engine, picked.refs, carbon)
        if not figures:
            print(_nothing_to_compare(engine, args), file=sys.stderr)
            return 1
        _check_label_key(args.by, figures)
        left_out: list[str] = []
        if args.by == "model":
            figures, left_out = _by_model(engine, figures)
        baseline = args.baseline
        if baseline is not None and args.by == "job":
            baseline, notes = pick_baseline(engine, baseline, figures, kind=args.kind)
            _say("--baseline", notes)
        table = compare(figures, by=args.by, unit=args.unit, baseline=baseline,
                        sla_units_per_hour=args.sla)
    except CompareError as exc:
        raise ConfigError(f"{FLAGS.get(exc.argument, exc.argument)}: {exc}") from None
    from joulestat.reports.compare.words import few_runs

    warnings = few_runs(table, args.min_runs)
    _say("--min-runs", warnings)
    notes = [*left_out, *warnings,
             *dict.fromkeys(f"{f.name}: {note}" for f in figures for note in f.notes)]
    prices = prices_used((n.instance_type for f in figures for n in f.nodes), carbon)
    outcome = None
    if args.latency_target:
        from joulestat.reports.compare.latency import meet_targets

        outcome = meet_targets([r for r in table.rows if r.basis == "unit"],
                               args.latency_target, {f.job_id: f.latency for f in figures})
    _print_table(args, table, notes, prices, outcome)
    return 0


def _print_table(args: argparse.Namespace, table: Any, notes: list[str], prices: list[Any],
                 outcome: Any) -> None:
    """The table as ``--json`` or as text, with its notes, the prices it used and the
    latency targets' outcome (None: none asked)."""
    if args.json:
        from joulestat.reports.compare.latency import outcome_json
        from joulestat.reports.compare.words import as_json

        answer = as_json(table, notes, prices)
        if outcome is not None:
            answer["latency_target"] = outcome_json(outcome)
        sys.stdout.write(jsonout.dumps(answer, indent=1))
        sys.stdout.write("\n")
        return
    from joulestat.reports.compare.latency import latency_text
    from joulestat.reports.compare.words import render_text
    from joulestat.reports.serving_figures import steady_text

    print(render_text(table, notes, prices, wide=args.wide))
    for block in (steady_text(table.rows), latency_text(table, outcome)):
        if block:
            print("\n" + block)


def _pooled(engine: Engine, args: argparse.Namespace, carbon: Any) -> int | None:
    """``--by instance_type`` over every job (of ``--kind``): the store adds up the
    single-node jobs per setup (:func:`joulestat.reports.compare.setups.compare_setups`,
    the same table as one record per job, seconds sooner over a fleet); None where it
    cannot (live intensity, served latency), for the per-job path."""
    from joulestat.carbon.pricing import Pricer, prices_used
    from joulestat.reports.compare.groups import CompareError
    from joulestat.reports.compare.setups import compare_setups
    from joulestat.reports.compare.words import few_runs
    from joulestat.store.jobs import JobFilter

    try:
        found = compare_setups(engine, JobFilter(kind=args.kind), Pricer(carbon), time.time(),
                               unit=args.unit, baseline=args.baseline,
                               sla_units_per_hour=args.sla, with_ids=args.json)
    except CompareError as exc:
        raise ConfigError(f"{FLAGS.get(exc.argument, exc.argument)}: {exc}") from None
    if found is None:
        return None
    if not found.jobs:
        print(_nothing_to_compare(engine, args), file=sys.stderr)
        return 1
    warnings = few_runs(found.table, args.min_runs)
    _say("--min-runs", warnings)
    _print_table(args, found.table,
                 [*warnings, *found.notes],
                 prices_used(found.instance_types, carbon), None)
    return 0


def _nothing_to_compare(engine: Engine, args: argparse.Namespace) -> str:
    """What is true when nothing was picked: an empty store, or what the store holds
    that ``--kind`` / ``--jobs`` left out."""
    from collections import Counter

    from joulestat.store.jobs import job_refs

    kinds = Counter(ref.kind for ref in job_refs(engine))
    if not kinds:
        return ("no jobs to compare yet: the store is empty; measure some with "
                "`joulestat run --name NAME -- CMD`, or `joulestat demo`")
    given = " ".join([*([f"--kind {args.kind}"] if args.kind else []),
                      *([f"--jobs {' '.join(args.jobs)}"] if args.jobs else [])])
    held = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    return (f"no job matches {given or 'the selection'}: the store holds "
            f"{sum(kinds.values())} job(s) ({held}); `joulestat jobs` lists them")


def _check_label_key(by: str, figures: Sequence[JobFigures]) -> None:
    """``--by label:KEY`` where no compared job has KEY would be one "KEY unset" row per
    setup, silently: a typo. Refused, naming the keys the jobs do have."""
    from joulestat.reports.compare.groups import label_key

    key = label_key(by)
    if key is None or any(key in f.labels for f in figures):
        return
    keys = sorted({k for f in figures for k in f.labels})
    raise ConfigError(f"--by {by}: none of the {len(figures)} compared job(s) has a label "
                      f"{key!r}; their labels: {', '.join(keys) or 'none'}")


def _by_model(engine: Engine, figures: list[JobFigures]) -> tuple[list[JobFigures], list[str]]:
    """The per-model parts of ``figures`` and the note on the jobs left out (they served
    no named model); a :class:`CompareError` on ``--by`` when none served one, rather
    than a table of nothing."""
    from joulestat.reports.compare.by_model import by_model
    from joulestat.reports.compare.groups import CompareError
    from joulestat.store.model_split import model_splits

    found = by_model(figures, model_splits(engine, [f.job_id for f in figures]))
    if figures and not found.parts:
        raise CompareError("by", f"none of the {len(figures)} compared job(s) served a named "
                           "model (job.serving(MODEL), docs/jobs.md): compare them by job")
    return list(found.parts), found.notes()


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
    so ``--json`` output stays one object; in lines a terminal holds, as the table's."""
    import textwrap

    from joulestat.reports.compare.words import WIDTH

    for note in notes:
        print("\n".join(textwrap.wrap(f"joulestat compare: {flag}: {note}", WIDTH,
                                      subsequent_indent="  ", break_long_words=False,
                                      break_on_hyphens=False)), file=sys.stderr)
