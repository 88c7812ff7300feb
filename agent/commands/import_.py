"""``joulestat import``: joulestat JSON reports and CodeCarbon emissions.csv files into a
store (the module is ``import_`` because ``import`` is a Python keyword)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.config import add_options, resolve

IMPORT_OPTIONS = ("config", "db", "log_level")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import joulestat JSON reports or CodeCarbon emissions.csv files",
        description="Import jobs into the store: joulestat JSON reports (joulestat report "
        "--format json, one report or a list; entries of one job id merge into one "
        "multi-node job) and CodeCarbon emissions.csv files (one job per run). Importing "
        "a file again changes nothing. Each file is checked completely and written in one "
        "transaction: a bad file imports nothing, and the error names the file and the "
        "line or entry. Exit status 2 when any file was refused.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="files to import")
    add_options(parser, IMPORT_OPTIONS)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from agent.reports.importer import ImportFileError, import_file
    from agent.store.bootstrap import open_engine
    from agent.store.engine import describe_error

    settings = resolve(args, IMPORT_OPTIONS)
    engine = open_engine(settings["db"])
    failed = 0
    for name in args.files:
        path = Path(name)
        try:
            result = import_file(engine, path)
        except ImportFileError as exc:
            print(f"joulestat import: {exc}; nothing of this file was imported",
                  file=sys.stderr)
            failed += 1
            continue
        except SQLAlchemyError as exc:
            print(f"joulestat import: {path}: cannot write to the store "
                  f"({describe_error(exc)}); nothing of this file was imported",
                  file=sys.stderr)
            failed += 1
            continue
        jobs = ", ".join(result.jobs) or "none"
        print(f"{path}: {result.kind}, {len(result.jobs)} job(s), {result.nodes} node "
              f"part(s) written: {jobs}")
        for reason in result.skipped:
            print(f"{path}: {reason}")
    return 2 if failed else 0
