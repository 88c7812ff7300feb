"""``joulestat report``: one job's energy, carbon and cost as JSON, CSV, HTML or PDF;
``--all`` for every job of a period as CSV rows or a JSON array, or (``--by KEY``)
their sums by team, label, month, kind, instance type or region in any format."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, require
from joulestat.core.setting_parsers import parse_duration_s
from joulestat.runtime.settings import add_options, resolve

REPORT_OPTIONS = ("config", "db", "log_level", "carbon_intensity", "pue", "price_per_hour",
                  "prices", "electricity_maps_token", "electricity_maps_url")
FORMATS = ("json", "csv", "html", "pdf")
ALL_FORMATS = ("json", "csv")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="a job's energy, CO2e and cost as JSON, CSV, HTML or PDF",
        description="Report one job (every node it ran on): energy by component, "
        "operational and embodied CO2e, cost, per-unit figures, power over time, and the "
        "provenance of every factor (region resolution, grid intensity source, PUE). "
        "JSON follows docs/report-schema.json and can be imported into another store "
        "(joulestat import). Labels that look like credentials are redacted (see --no-redact).",
    )
    parser.add_argument("job", nargs="?", metavar="JOB",
                        help="the job: its id, a unique id prefix (4 characters or more) or "
                        "its name (then its latest run, said on stderr)")
    parser.add_argument("--all", action="store_true",
                        help="every job (that ran after --since), one CSV row or JSON "
                        "array entry each")
    parser.add_argument("--by", metavar="KEY",
                        help="with --all: one summary row per group instead of one per "
                        "job, in any format: label:KEY (team: label:team), month, kind, "
                        "instance_type or region (a job split by its nodes)")
    parser.add_argument("--since", metavar="T",
                        help="with --all: jobs running at or after T, an ISO date/time "
                        "(2024-05-01, 2024-05-01T12:00:00+02:00; no zone = local time) or "
                        "a duration back from now (36h, 7d)")
    parser.add_argument("--format", choices=FORMATS,
                        help="output format [default: from -o's extension, else json]")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write to FILE instead of standard output")
    parser.add_argument("--no-redact", action="store_true",
                        help="keep credential-like label values (keys such as token or "
                        "password, URLs with a password, bearer tokens) instead of "
                        "redacting them: for a report you keep to yourself")
    parser.add_argument("--include-env", action="store_true", help=argparse.SUPPRESS)
    add_options(parser, REPORT_OPTIONS)
    parser.set_defaults(func=_run)


def parse_since(text: str, now_s: float | None = None) -> float:
    """Epoch seconds of ``--since``: an ISO date/time, else a duration back from now."""
    now = time.time() if now_s is None else now_s
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError:
        pass
    else:
        return (stamp.astimezone() if stamp.tzinfo is None else stamp).timestamp()
    try:
        return now - parse_duration_s(text)
    except ValueError:
        raise ConfigError(f"--since: expected an ISO date/time (2024-05-01, "
                          f"2024-05-01T12:00) or a duration (36h, 7d), got {text!r}") from None


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = Path(args.output).suffix.lower().lstrip(".") if args.output else ""
    return {"htm": "html"}.get(suffix, suffix) if suffix in (*FORMATS, "htm") else "json"


def _check_usage(args: argparse.Namespace, fmt: str) -> None:
    if args.all == (args.job is not None):
        raise ConfigError("give either a JOB (id, id prefix or name) or --all")
    if args.since is not None and not args.all:
        raise ConfigError("--since goes with --all")
    if args.by is not None and not args.all:
        raise ConfigError("--by goes with --all (a summary of every job of a period)")
    if args.all and args.by is None and fmt not in ALL_FORMATS:
        raise ConfigError(f"--all writes csv or json, not {fmt} (report one JOB for {fmt}, "
                          f"or a summary of them with --by KEY)")
    if fmt == "pdf" and args.output is None and sys.stdout.isatty():
        raise ConfigError("a PDF is binary: write it to a file with -o FILE (or pipe it)")
    if fmt == "pdf":  # before the store is opened: the answer does not depend on it
        require("reportlab", Extra.PDF, "a PDF report")


def _render(reports: list[dict[str, Any]], fmt: str, many: bool) -> str | bytes:
    if fmt == "csv":
        from joulestat.reports.csv_report import render_csv

        return render_csv(reports)
    if fmt == "json":
        from joulestat.reports.json_report import render_json, render_json_many

        return render_json_many(reports) if many else render_json(reports[0])
    if fmt == "html":
        from joulestat.reports.html_report import render_html

        return render_html(reports[0])
    from joulestat.reports.pdf_report import render_pdf

    return render_pdf(reports[0])


def _group_by(text: str) -> Any:
    from joulestat.reports.summary import GroupBy

    return GroupBy.parse(text)


def _render_summary(reports: list[dict[str, Any]], by: Any, fmt: str, since: str | None,
                    now_s: float) -> str | bytes:
    """The jobs' reports summed by ``by`` (:mod:`joulestat.reports.summary`)."""
    from joulestat.reports.summary import (
        render_summary_csv,
        render_summary_json,
        summarize,
    )

    period = f"jobs running since {since}" if since else "every job in the store"
    generated = datetime.fromtimestamp(now_s).astimezone().isoformat(timespec="seconds")
    summary = summarize(reports, by, period, generated)
    if fmt == "csv":
        return render_summary_csv(summary)
    if fmt == "json":
        return render_summary_json(summary)
    if fmt == "html":
        from joulestat.reports.html_report import render_summary_html

        return render_summary_html(summary)
    from joulestat.reports.pdf_report import render_summary_pdf

    return render_summary_pdf(summary)


def _write(content: str | bytes, output: str | None) -> None:
    if output is None:
        if isinstance(content, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(content)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(content)
        return
    path = Path(output)
    try:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", newline="")
    except OSError as exc:
        raise ConfigError(f"-o {output}: cannot write: {exc.strerror}") from None


def _run(args: argparse.Namespace) -> int:
    from joulestat.carbon.footprint import CarbonSettings
    from joulestat.reports.model import build_report
    from joulestat.store.access import open_reader_engine
    from joulestat.store.job_refs import JobRefError, resolve_job
    from joulestat.store.jobs import UnknownJobError, job_ids_active_since

    if args.include_env:
        raise ConfigError("--include-env is now --no-redact: it never put the environment "
                          "in a report, it only kept credential-like labels unredacted")
    fmt = _format(args)
    _check_usage(args, fmt)
    settings = resolve(args, REPORT_OPTIONS)
    carbon = settings.section(CarbonSettings)
    since_s = parse_since(args.since) if args.since is not None else None
    by = _group_by(args.by) if args.by is not None else None
    engine = open_reader_engine(settings["db"])
    now_s = time.time()
    if args.all:
        reports = []
        for job_id in job_ids_active_since(engine, since_s):
            try:
                reports.append(build_report(engine, job_id, carbon, args.no_redact,
                                            now_s=now_s))
            except UnknownJobError:  # deleted between the two reads
                continue
    else:
        try:
            found = resolve_job(engine, args.job)
        except JobRefError as exc:
            raise ConfigError(str(exc)) from None
        for note in found.notes("reporting"):
            print(f"joulestat report: {note}", file=sys.stderr)
        job_id = found.latest.id
        try:
            reports = [build_report(engine, job_id, carbon, args.no_redact, now_s=now_s)]
        except UnknownJobError:  # deleted since it was resolved
            print(f"joulestat report: no job with id {job_id!r} in the store "
                  "(joulestat jobs lists them)", file=sys.stderr)
            return 2
    if args.by is not None:
        _write(_render_summary(reports, by, fmt, args.since, now_s), args.output)
    else:
        _write(_render(reports, fmt, many=args.all), args.output)
    if args.output is not None:
        print(f"wrote {fmt} report of {len(reports)} job(s) to {args.output}", file=sys.stderr)
    return 0
