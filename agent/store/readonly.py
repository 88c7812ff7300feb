"""A read-only engine for readers that must never write (the dashboard).

SQLite opens with a ``mode=ro`` URI (plus ``PRAGMA query_only``) and PostgreSQL with
``default_transaction_read_only=on``, so a role with nothing but ``SELECT`` is enough.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import (
    create_engine,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import QueuePool

from joulestat.store.engine import SUPPORTED_DIALECTS, StoreError, redact_url

log = logging.getLogger(__name__)


class StoreMissingError(StoreError):
    """The SQLite file does not exist yet: no agent has written to this store."""


# -- read-only engine ---------------------------------------------------------------------


def open_readonly_engine(url: str, *, busy_timeout_s: float = 5.0) -> Engine:
    """An engine that cannot write: SQLite ``mode=ro``, PostgreSQL read-only transactions.

    Raises :class:`StoreMissingError` for a SQLite file that does not exist (read-only
    mode would not create it) and :class:`StoreError` for an unusable URL.
    """
    shown = redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"{shown!r} is not a database URL") from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_DIALECTS:
        raise StoreError(f"{shown}: unsupported database {backend!r}")
    if backend == "postgresql":
        query = dict(parsed.query)
        options = " ".join(filter(None, [str(query.pop("options", "")),
                                          "-c default_transaction_read_only=on"]))
        connect_args: dict[str, Any] = {"options": options}
        if "connect_timeout" not in query:
            connect_args["connect_timeout"] = 5
        return create_engine(parsed.set(query=query), pool_pre_ping=True,
                             connect_args=connect_args)
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise StoreError(f"{shown}: the dashboard needs a SQLite file path")
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise StoreMissingError(f"{path} does not exist yet")
    # A URI keeps SQLite from creating or writing the file; the creator bypasses URL
    # parsing so paths with spaces, '?' or '#' survive.
    uri = f"file:{quote(str(path), safe='/')}?mode=ro"
    busy_ms = max(0, int(busy_timeout_s * 1000))
    warned: list[bool] = []

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
        connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
        connection.execute("PRAGMA query_only = ON")
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        except sqlite3.OperationalError as exc:
            # A WAL store whose agent is not running has no -shm file, and a reader
            # that may not create one (a read-only directory or volume) cannot open it
            # (SQLite's "readonly WAL" rule). Nothing writes it then: read it as an
            # immutable file rather than refuse.
            if os.access(path.parent, os.W_OK) or path.with_name(path.name + "-wal").exists():
                raise
            connection.close()
            if not warned:
                warned.append(True)
                log.warning("%s: %s (a WAL store in a directory this reader cannot write); "
                            "reading it as an immutable snapshot: restart the dashboard "
                            "to see rows written after now", path, exc)
            connection = sqlite3.connect(f"{uri}&immutable=1", uri=True,
                                         check_same_thread=False)
            connection.execute("PRAGMA query_only = ON")
        return connection

    return create_engine("sqlite://", creator=connect, poolclass=QueuePool)


# -- jobs -----------------------------------------------------------------------------------
