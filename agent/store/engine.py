"""Where the store lives and how to connect to it.

The store is SQLite by default (one file in the user's data directory, nothing to set
up) and PostgreSQL when several nodes share one database. Both are reached through a
SQLAlchemy :class:`~sqlalchemy.engine.Engine`; the only backend-specific SQL in the
project is the ``INSERT … ON CONFLICT`` that :func:`dialect_insert` hands out.

SQLite connections get WAL (the dashboard can read while the agent writes),
a busy timeout (a reader holding a lock delays a write instead of failing it at
once) and enforced foreign keys (SQLite leaves them off by default).
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from joulestat.core.redact import redact_url

log = logging.getLogger(__name__)

SUPPORTED_DIALECTS = ("sqlite", "postgresql")


class StoreError(RuntimeError):
    """The store cannot be used as configured (bad URL, missing driver, wrong schema)."""


def default_db_url() -> str:
    """SQLite file in the user data dir: ``$XDG_DATA_HOME/joulestat/joulestat.db``.

    Falls back to ``~/.local/share`` as the XDG spec says; the directory is created so
    the first run works without setup.
    """
    return f"sqlite:///{data_dir() / 'joulestat.db'}"


def data_dir() -> Path:
    """``$XDG_DATA_HOME/joulestat`` (else ``~/.local/share/joulestat``), created."""
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if base.strip() and Path(base).is_absolute() else (
        Path.home() / ".local" / "share"
    )
    directory = root / "joulestat"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {directory}: {exc.strerror}") from None
    return directory


def make_engine(url: str | URL, *, busy_timeout_s: float = 5.0) -> Engine:
    """An engine for ``url``; raises :class:`StoreError` naming the URL when unusable.

    Nothing connects here: an unreachable server is the writer's business (it keeps
    rows and retries), while a malformed URL, an unknown backend or a missing driver
    can never start working, so they fail now with a message that says which.
    """
    shown = redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"{shown!r} is not a database URL; expected e.g. sqlite:////path/joulestat.db "
            "or postgresql+psycopg://user@host/dbname"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_DIALECTS:
        raise StoreError(
            f"{shown}: unsupported database {backend!r}; joulestat stores to "
            f"{' or '.join(SUPPORTED_DIALECTS)}"
        )
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        _check_sqlite_version(shown)
        _check_sqlite_path(parsed, shown)
    else:
        # Survive a database restart: test pooled connections before reuse, and do not
        # let a dead server stall the agent's loop for the OS's TCP timeout.
        kwargs["pool_pre_ping"] = True
        if parsed.get_driver_name() in ("psycopg", "psycopg2") and "connect_timeout" not in (
            parsed.query
        ):
            kwargs["connect_args"] = {"connect_timeout": 5}
    try:
        engine = create_engine(parsed, **kwargs)
    except NoSuchModuleError:
        raise StoreError(
            f"{shown}: no SQLAlchemy driver {parsed.drivername!r}; use sqlite:/// or "
            "postgresql+psycopg://"
        ) from None
    except (ImportError, ArgumentError, TypeError) as exc:
        raise StoreError(f"{shown}: cannot load the database driver: {exc}") from None
    if backend == "sqlite":
        _configure_sqlite(engine, busy_timeout_s)
    return engine


# MATERIALIZED common table expressions (the job totals' reads) and ALTER TABLE ... DROP
# COLUMN (downgrading migration 0003) came with SQLite 3.35 (March 2021).
MIN_SQLITE = (3, 35)


def _check_sqlite_version(shown: str) -> None:
    import sqlite3

    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            f"{shown}: this Python's SQLite library is {sqlite3.sqlite_version}; joulestat "
            f"needs {'.'.join(map(str, MIN_SQLITE))} or later (a newer Python or OS)")


def _check_sqlite_path(url: URL, shown: str) -> None:
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    parent = Path(database).expanduser().resolve().parent
    if not parent.is_dir():
        raise StoreError(f"{shown}: directory {parent} does not exist")


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    busy_ms = max(0, int(busy_timeout_s * 1000))

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA journal_mode = WAL")
            # Safe with WAL (a power cut may lose the last commits, never corrupt)
            # and it keeps an fsync off every flush.
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()


def dialect_insert(engine: Engine) -> Any:
    """The ``insert()`` of the engine's dialect, which knows ``ON CONFLICT``.

    Imported on demand so the agent loads only the dialect it uses.
    """
    name = engine.dialect.name
    if name not in SUPPORTED_DIALECTS:
        raise StoreError(f"unsupported database dialect {name!r}")
    return importlib.import_module(f"sqlalchemy.dialects.{name}").insert


def describe_error(exc: BaseException) -> str:
    """The driver's own message, first line only, without SQLAlchemy's boilerplate."""
    original = getattr(exc, "orig", None) or exc
    message = str(original).strip()
    return message.splitlines()[0] if message else type(original).__name__
