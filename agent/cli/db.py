"""``joulestat db``: create or upgrade the store's schema, or show its revision.

Who creates and migrates a store (docs/store.md): ``joulestat db upgrade`` creates or
upgrades the schema (Alembic migrations, safe to rerun); the agent and the other
writers create the schema of a new store only, and refuse an existing store at an older
revision; readers (``jobs``, ``report``, ``compare``, ``dashboard``, ``db current``)
never create or migrate one. Also
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
        "its revision. Only `db upgrade` migrates an existing store: the agent (and "
        "`run`, `import`, `demo`) creates the schema of a new store (a missing SQLite "
        "file, made 0600, or an empty database) and refuses one at an older revision; "
        "readers (`jobs`, `report`, `compare`, `dashboard`, `db current`) never create "
        "or migrate a store.",
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


def _settings(args: argparse.Namespace) -> str:
    """The store URL to act on, with logging set up."""
    from joulestat.core.logs import setup_logging
    from joulestat.store.engine import default_db_url

    settings = resolve(args, OPTIONS)
    setup_logging(settings["log_level"])
    if settings["log_level"] != "DEBUG":  # Alembic announces every plugin it loads
        logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    return str(settings["db"] or default_db_url())


def _open(url: str, action: str) -> Engine | None:
    """A read-write engine for ``url`` (a new SQLite file made 0600 first), or None
    after saying why it is unusable."""
    from joulestat.store.engine import StoreError, create_sqlite_file, make_engine

    try:
        create_sqlite_file(url)
        return make_engine(url)
    except StoreError as exc:
        print(f"joulestat db {action}: --db: {exc}", file=sys.stderr)
        return None


def _upgrade(args: argparse.Namespace) -> int:
    from joulestat.store.engine import StoreError, redact_url
    from joulestat.store.migrate import (
        HEAD_REVISION,
        SchemaState,
        current_revision,
        newer_message,
        schema_state,
        upgrade,
    )

    engine = _open(_settings(args), "upgrade")
    if engine is None:
        return 2
    try:
        found = current_revision(engine)
        if schema_state(found) is SchemaState.NEWER:
            assert found is not None
            # Alembic would say only "Can't locate revision identified by ..."
            print(f"joulestat db upgrade: {newer_message(redact_url(engine.url), found)}",
                  file=sys.stderr)
            return 2
        revision = upgrade(engine, args.revision)
    except StoreError as exc:
        print(f"joulestat db upgrade: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # Alembic's CommandError: an unknown --revision
        from alembic.util import CommandError

        if not isinstance(exc, CommandError):
            raise
        print(f"joulestat db upgrade: --revision {args.revision}: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.dispose()
    head = " (head)" if revision == HEAD_REVISION else ""
    print(f"{redact_url(engine.url)}: schema at revision {revision}{head}")
    return 0


def _current(args: argparse.Namespace) -> int:
    """Read-only: a missing SQLite file is an error and stays missing."""
    from joulestat.store.engine import (
        StoreError,
        StoreMissingError,
        open_readonly_engine,
        redact_url,
    )
    from joulestat.store.migrate import HEAD_REVISION, SchemaState, current_revision, schema_state

    url = _settings(args)
    shown = redact_url(url)
    try:
        engine = open_readonly_engine(url)
    except StoreMissingError as exc:
        print(f"joulestat db current: --db {shown}: no store there ({exc}); nothing was "
              "created", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"joulestat db current: --db: {exc}", file=sys.stderr)
        return 2
    try:
        revision = current_revision(engine)
    except StoreError as exc:
        print(f"joulestat db current: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    state = schema_state(revision)
    if state is SchemaState.EMPTY:
        text = "none (empty database: run joulestat db upgrade)"
    elif state is SchemaState.HEAD:
        text = f"{revision} (head)"
    elif state is SchemaState.OLDER:
        text = f"{revision} (head is {HEAD_REVISION}: run joulestat db upgrade)"
    else:
        text = (f"{revision} (newer than this joulestat knows: it knows up to "
                f"{HEAD_REVISION}; upgrade joulestat)")
    print(f"{shown}: schema at revision {text}")
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
