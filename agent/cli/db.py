"""``joulestat db``: create or upgrade the store's schema, or show its revision.

The agent never creates tables itself; a database is made ready with
``joulestat db upgrade`` (Alembic migrations), which is also safe to rerun. Also
runnable as ``python -m joulestat.cli.db`` (e.g. in an init container), which loads
only this command.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from joulestat.core.errors import ConfigError
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sqlalchemy.engine import Engine

OPTIONS = ["config", "db", "log_level"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "db",
        help="create/upgrade the store's schema (Alembic migrations) or show its revision",
        description="Create or upgrade the store's schema (Alembic migrations), or show "
        "its revision. The agent never creates tables itself.",
    )
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION", required=True)

    upgrade = actions.add_parser(
        "upgrade", help="apply migrations up to the newest revision (safe to rerun)"
    )
    add_options(upgrade, OPTIONS)
    upgrade.add_argument(
        "--revision", default="head", help="target revision [default: head]"
    )
    upgrade.set_defaults(func=_upgrade)

    current = actions.add_parser("current", help="print the database's schema revision")
    add_options(current, OPTIONS)
    current.set_defaults(func=_current)


def _open(args: argparse.Namespace, action: str) -> Engine | None:
    """The engine for the configured URL, or None after saying why it is unusable."""
    from joulestat.core.logs import setup_logging
    from joulestat.store.engine import StoreError, default_db_url, make_engine

    settings = resolve(args, OPTIONS)
    setup_logging(settings["log_level"])
    if settings["log_level"] != "DEBUG":  # Alembic announces every plugin it loads
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    try:
        url = settings["db"] or default_db_url()
        return make_engine(url)
    except StoreError as exc:
        print(f"joulestat db {action}: --db: {exc}", file=sys.stderr)
        return None


def _upgrade(args: argparse.Namespace) -> int:
    from joulestat.store.engine import StoreError, redact_url
    from joulestat.store.migrate import HEAD_REVISION, upgrade

    engine = _open(args, "upgrade")
    if engine is None:
        return 2
    try:
        revision = upgrade(engine, args.revision)
    except StoreError as exc:
        print(f"joulestat db upgrade: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    head = " (head)" if revision == HEAD_REVISION else ""
    print(f"{redact_url(engine.url)}: schema at revision {revision}{head}")
    return 0


def _current(args: argparse.Namespace) -> int:
    from joulestat.store.engine import StoreError, redact_url
    from joulestat.store.migrate import HEAD_REVISION, current_revision

    engine = _open(args, "current")
    if engine is None:
        return 2
    try:
        revision = current_revision(engine)
    except StoreError as exc:
        print(f"joulestat db current: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if revision is None:
        state = "none (empty database: run joulestat db upgrade)"
    elif revision == HEAD_REVISION:
        state = f"{revision} (head)"
    else:
        state = f"{revision} (head is {HEAD_REVISION}: run joulestat db upgrade)"
    print(f"{redact_url(engine.url)}: schema at revision {state}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m joulestat.cli.db ACTION ...``: ``joulestat db`` without the other commands."""
    parser = argparse.ArgumentParser(prog="joulestat")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(["db", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"joulestat db: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
