"""``joulestat jobs``: the jobs in the store, with the energy attributed so far;
``joulestat jobs delete ID...``: remove jobs and all their rows."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

from joulestat.core.errors import ConfigError
from joulestat.core.validation import KINDS
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sqlalchemy.engine import Engine

    from joulestat.store.job_delete import DeletedJob
    from joulestat.store.jobs import JobRef, JobSummary

JOBS_OPTIONS = ("config", "db", "log_level")
HEADERS = ("id", "name", "kind", "status", "started", "duration", "energy", "units", "nodes")
RIGHT = (HEADERS.index("energy"),)
# The options that choose which jobs the list shows (`delete` takes none of them).
FILTERS = ("running", "name", "kind", "since", "label", "limit")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def _label(text: str) -> tuple[str, str | None]:
    """``KEY=VALUE`` as ``(KEY, VALUE)``, ``KEY`` as ``(KEY, None)``; a label key as
    `joulestat run --label` takes it."""
    key, sep, value = text.partition("=")
    if not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE or KEY, got {text!r}")
    return key.strip(), (value if sep else None)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "jobs",
        help="list jobs with their energy so far, or delete jobs",
        description="List the jobs in the store (every node that reported them), newest "
        "first, with energy attributed so far (SI-prefixed: 45.0 mJ, 1.20 kJ; --json "
        "keeps joules). A running job's figures trail the agent by at most one store "
        "flush (--flush-interval of the agent, default 10 s); a job that ended is "
        "stored with its last tick and all its units before `joulestat run` prints its "
        "summary. The filters combine (all must match), with --json too. "
        "`joulestat jobs delete ID...` removes jobs (see `joulestat jobs delete --help`).",
    )
    parser.add_argument("--running", action="store_true", help="only jobs still running")
    parser.add_argument("--name", metavar="NAME",
                        help="only jobs of this exact name (no wildcards)")
    parser.add_argument("--kind", choices=KINDS, help="only jobs of this kind")
    parser.add_argument("--since", metavar="T",
                        help="only jobs running at or after T, an ISO date/time "
                        "(2024-05-01, 2024-05-01T12:00:00+02:00; no zone = local time) or "
                        "a duration back from now (36h, 7d), as `joulestat report --since`")
    parser.add_argument("--label", metavar="KEY=VALUE", action="append", type=_label,
                        help="only jobs with this label (KEY alone: with any value); "
                        "may be repeated, every one must match")
    parser.add_argument("--limit", metavar="N", type=_positive,
                        help="only the newest N jobs that match [default: all]")
    parser.add_argument("--json", action="store_true",
                        help="one JSON array of jobs (energy in joules)")
    add_options(parser, JOBS_OPTIONS)
    parser.set_defaults(func=_run)

    actions = parser.add_subparsers(dest="jobs_action", metavar="[ACTION]")
    delete = actions.add_parser(
        "delete",
        help="delete jobs and all their rows",
        description="Delete jobs and every row of them (the job, its nodes, units, "
        "energy shares, minute rollups and totals), all in one transaction: an ID not in "
        "the store, or a running job without --force, deletes nothing. The energy the "
        "jobs used stays their nodes' (as unattributed energy), so node figures do not "
        "change; a job imported with `joulestat import` takes the node rows it brought "
        "with it. Asks before deleting; without a terminal to ask on, pass --yes. Never "
        "creates or migrates a store.",
    )
    delete.add_argument("ids", nargs="+", metavar="ID",
                        help="a job id, or a unique id prefix of 4 characters or more "
                        "(not a name: a name may stand for many runs)")
    delete.add_argument("--yes", action="store_true",
                        help="delete without asking (needed when stdin is not a terminal)")
    delete.add_argument("--force", action="store_true",
                        help="delete running jobs too (the agent measuring one keeps "
                        "writing it: what it measures next is stored again)")
    add_options(delete, JOBS_OPTIONS)
    delete.set_defaults(func=_delete)


def _run(args: argparse.Namespace) -> int:
    from joulestat.cli.report import parse_since
    from joulestat.store.access import open_reader_engine
    from joulestat.store.jobs import count_jobs, list_jobs

    settings = resolve(args, JOBS_OPTIONS)
    since_s = parse_since(args.since) if args.since is not None else None
    engine = open_reader_engine(settings["db"])
    jobs = list_jobs(engine, running=True if args.running else None, name=args.name,
                     kind=args.kind, since_s=since_s, limit=args.limit,
                     labels=args.label or ())
    jobs.sort(key=lambda j: j.started_s, reverse=True)
    if args.json:
        from joulestat.core import jsonout
        from joulestat.core.redact import redact_labels

        sys.stdout.write(jsonout.dumps(
            [{**asdict(job), "labels": redact_labels(job.labels)} for job in jobs], indent=1))
        sys.stdout.write("\n")
        return 0
    if not jobs:
        print(_nothing_listed(args, count_jobs(engine)))
        return 0
    for line in _table(jobs):
        print(line)
    return 0


def _filters_given(args: argparse.Namespace) -> list[str]:
    """The list's filters as given (``--kind training``), quoted as a shell would."""
    import shlex

    given = []
    for name in FILTERS:
        value = getattr(args, name, None)
        if value is True:
            given.append(f"--{name}")
        elif isinstance(value, list):  # --label, repeated
            given += [f"--{name} {shlex.quote(k if v is None else f'{k}={v}')}"
                      for k, v in value]
        elif value not in (None, False):
            given.append(f"--{name} {shlex.quote(str(value))}")
    return given


def _nothing_listed(args: argparse.Namespace, stored: int) -> str:
    if stored == 0:
        return "no jobs yet: start one with `joulestat run --name NAME -- CMD`"
    given = " ".join(_filters_given(args)) or "(none given)"
    return (f"no job matches the filters {given} ({stored} job{'s' if stored != 1 else ''} in the "
            "store; `joulestat jobs` lists them all)")


def _table(jobs: list[JobSummary]) -> list[str]:
    import time

    from joulestat.core import units
    from joulestat.core.columns import table
    from joulestat.core.model_units import is_model_key
    from joulestat.store.jobs import started_text

    now_s = time.time()
    rows = [(job.id, job.name, job.kind, job.status, started_text(job.started_s),
             units.duration((job.ended_s if job.ended_s is not None else now_s)
                            - job.started_s),
             units.energy(job.total_j),
             ", ".join(f"{units.count(n)} {unit}" for unit, n in sorted(job.units.items())
                       if n > 0 and not is_model_key(unit)) or "-",
             ", ".join(f"{node} ({itype})" for node, itype in job.nodes))
            for job in jobs]
    return table(HEADERS, rows, right=RIGHT)


# -- joulestat jobs delete ---------------------------------------------------------------

def _delete(args: argparse.Namespace) -> int:
    from joulestat.store.access import open_existing_engine

    given = [*_filters_given(args), *(["--json"] if args.json else [])]
    if given:
        raise ConfigError(f"{' '.join(given)} choose(s) which jobs `joulestat jobs` lists; "
                          "`jobs delete` takes ids only")
    settings = resolve(args, JOBS_OPTIONS)
    engine = open_existing_engine(settings["db"])
    try:
        return _delete_in(engine, args)
    finally:
        engine.dispose()


def _delete_in(engine: Engine, args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from joulestat.store.engine import describe_error
    from joulestat.store.job_delete import JobsNotDeleted, delete_jobs

    targets = _resolve_all(engine, args.ids)
    running = [job for job in targets if job.status == "running"]
    if running and not args.force:
        raise ConfigError("still running: " + ", ".join(f"{j.name} ({j.id})" for j in running)
                          + "; pass --force to delete a running job (its agent keeps "
                          "writing what it measures next); nothing was deleted")
    if not args.yes and not _confirmed(engine, targets):
        print("nothing was deleted", file=sys.stderr)
        return 1
    try:
        deleted = delete_jobs(engine, [job.id for job in targets], force=args.force)
    except JobsNotDeleted as exc:  # changed since it was resolved
        raise ConfigError(str(exc)) from None
    except SQLAlchemyError as exc:
        raise ConfigError(f"cannot delete: {describe_error(exc)}; nothing was deleted"
                          ) from None
    for job in deleted:
        print(_deleted_line(job))
    return 0


def _resolve_all(engine: Engine, refs: list[str]) -> list[JobRef]:
    """Every reference as one job (ids and unique id prefixes only); every error at
    once, so one look shows all that is wrong, and nothing is deleted."""
    from joulestat.store.job_refs import JobRefError, resolve_job

    found: dict[str, JobRef] = {}
    errors = []
    for ref in refs:
        try:
            resolution = resolve_job(engine, ref, by_name=False)
        except JobRefError as exc:
            errors.append(str(exc))
            continue
        found.setdefault(resolution.latest.id, resolution.latest)
    if errors:
        raise ConfigError("\n".join(errors) + "\nnothing was deleted")
    return list(found.values())


def _confirmed(engine: Engine, targets: list[JobRef]) -> bool:
    """Whether the user says yes on the terminal; refuses (exit 2) without one."""
    from joulestat.core import units
    from joulestat.core.columns import cell
    from joulestat.store.jobs import JobFilter, job_totals

    if not sys.stdin.isatty():
        raise ConfigError("stdin is not a terminal, so there is no one to ask: pass --yes "
                          "to delete without asking; nothing was deleted")
    energy = {job.id: job.total_j for job in job_totals(
        engine, JobFilter(job_ids=tuple(job.id for job in targets)))}
    print(f"about to delete {len(targets)} job(s) and all their rows:", file=sys.stderr)
    for job in targets:
        print(f"  {cell(job.line())}  {job.status}  {units.energy(energy.get(job.id))}",
              file=sys.stderr)
    print("delete them? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        return False
    return answer.strip().lower() in ("y", "yes")


def _deleted_line(job: DeletedJob) -> str:
    from joulestat.core import units
    from joulestat.core.columns import cell

    rows = ", ".join(f"{table} {count}" for table, count in job.rows.items())
    energy = []
    if job.unattributed_j:
        energy.append(f"{units.energy(job.unattributed_j)} now unattributed energy of "
                      "its node(s)")
    if job.removed_j:
        energy.append(f"{units.energy(job.removed_j)} of imported node rows removed")
    tail = f"; {'; '.join(energy)}" if energy else ""
    return f"deleted {cell(job.name)} ({cell(job.id)}): {job.total_rows} rows ({rows}){tail}"
