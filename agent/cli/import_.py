"""``joulestat import``: joulestat JSON reports and CodeCarbon emissions.csv files into a
store (the module is ``import_`` because ``import`` is a Python keyword)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from joulestat.core.errors import ConfigError
from joulestat.core.validation import KINDS
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:
    from joulestat.reports.importer import Overrides

IMPORT_OPTIONS = ("config", "db", "log_level")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import joulestat JSON reports or CodeCarbon emissions.csv files",
        description="Import jobs into the store: joulestat JSON reports (joulestat report "
        "--format json, one report or a list; entries of one job id merge into one "
        "multi-node job; each node keeps its power and unit series) and CodeCarbon "
        "emissions.csv files (one job per run, named codecarbon:<project>, with "
        "CodeCarbon's own CO2e kept beside joulestat's). Importing a file again changes "
        "nothing and says 'unchanged'. Each file is checked completely and written in one "
        "transaction: a bad file imports nothing, and the error names the file and the "
        "line or entry. Exit status 2 when any file was refused.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="files to import")
    parser.add_argument("--name", help="name every imported job NAME (a CodeCarbon run "
                        "is otherwise codecarbon:<project_name>)")
    parser.add_argument("--kind", choices=KINDS,
                        help="the kind of every imported job (CodeCarbon's are otherwise "
                        "'other': its CSV does not say)")
    parser.add_argument("--label", action="append", default=[], metavar="K=V",
                        help="add a label to every imported job; repeat for more")
    add_options(parser, IMPORT_OPTIONS)
    parser.set_defaults(func=_run)


def _overrides(args: argparse.Namespace) -> Overrides:
    from joulestat.core.validation import JobError, validate_labels, validate_name
    from joulestat.reports.importer import Overrides

    labels: dict[str, str] = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--label {item!r}: expected KEY=VALUE")
        labels[key.strip()] = value
    try:
        name = validate_name(args.name) if args.name is not None else None
    except JobError as exc:
        raise ConfigError(f"--name: {exc}") from None
    try:
        return Overrides(name, args.kind, validate_labels(labels))
    except JobError as exc:
        raise ConfigError(f"--label: {exc}") from None


def _run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from joulestat.reports.importer import ImportFileError, import_file
    from joulestat.store.access import open_engine
    from joulestat.store.engine import describe_error

    settings = resolve(args, IMPORT_OPTIONS)
    overrides = _overrides(args)
    engine = open_engine(settings["db"])
    failed = 0
    for name in args.files:
        path = Path(name)
        try:
            result = import_file(engine, path, overrides)
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
        if result.nodes == 0 and result.unchanged:
            print(f"{path}: {result.kind}, {len(result.jobs)} job(s) unchanged: already in "
                  f"the store exactly so: {jobs}")
        else:
            also = f", {result.unchanged} unchanged" if result.unchanged else ""
            print(f"{path}: {result.kind}, {len(result.jobs)} job(s), {result.nodes} node "
                  f"part(s) written{also}: {jobs}")
        for reason in result.skipped:
            print(f"{path}: {reason}")
    return 2 if failed else 0
