"""``joulestat jobs``: the jobs in the store, with the energy attributed so far."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from datetime import datetime

from joulestat.runtime.settings import add_options, resolve

JOBS_OPTIONS = ("config", "db", "log_level")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "jobs",
        help="list jobs with their energy so far",
        description="List the jobs in the store (every node that reported them), newest "
        "first, with energy attributed so far. A running job's figures trail the agent by "
        "at most one store flush (--flush-interval of the agent, default 10 s); a job that "
        "ended is stored with its last tick and all its units before `joulestat run` "
        "prints its summary.",
    )
    parser.add_argument("--running", action="store_true", help="only jobs still running")
    parser.add_argument("--json", action="store_true", help="one JSON array of jobs")
    add_options(parser, JOBS_OPTIONS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from joulestat.store.engine import open_reader_engine
    from joulestat.store.jobs import list_jobs

    settings = resolve(args, JOBS_OPTIONS)
    engine = open_reader_engine(settings["db"])
    jobs = list_jobs(engine, running=True if args.running else None)
    jobs.sort(key=lambda j: j.started_s, reverse=True)
    if args.json:
        from joulestat.core import jsonout
        from joulestat.core.redact import redact_labels

        sys.stdout.write(jsonout.dumps(
            [{**asdict(job), "labels": redact_labels(job.labels)} for job in jobs], indent=1))
        sys.stdout.write("\n")
        return 0
    if not jobs:
        print("no jobs yet: start one with `joulestat run --name NAME -- CMD`")
        return 0
    print(f"{'id':<34} {'name':<24} {'kind':<9} {'status':<8} {'started':<19} "
          f"{'energy J':>12}  nodes")
    for job in jobs:
        started = datetime.fromtimestamp(job.started_s).strftime("%Y-%m-%d %H:%M:%S")
        nodes = ", ".join(f"{node} ({itype})" for node, itype in job.nodes)
        print(f"{job.id:<34} {job.name[:24]:<24} {job.kind:<9} {job.status:<8} {started:<19} "
              f"{job.total_j:>12.1f}  {nodes}")
    return 0
