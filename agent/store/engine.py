"""Where the store lives and how to connect to it: read-write, read-only, and for a
long-running process.

The store is SQLite by default (one file in the user's data directory, nothing to set
up) and PostgreSQL when several nodes share one database. Both are reached through a
SQLAlchemy :class:`~sqlalchemy.engine.Engine`; the only backend-specific SQL in the
project is the ``INSERT … ON CONFLICT`` that :func:`dialect_insert` hands out.

SQLite connections get WAL (the dashboard can read while the agent writes), a busy
timeout (a reader holding a lock delays a write instead of failing it at once) and
enforced foreign keys (SQLite leaves them off by default).

Readers that must never write get :func:`open_readonly_engine`: SQLite opens with a
``mode=ro`` URI (plus ``PRAGMA query_only``) and PostgreSQL with
``default_transaction_read_only=on``, so a role with nothing but ``SELECT`` is enough.
Which command opens the store how, and what it checks of the schema first, is
:mod:`joulestat.store.access`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import (
    create_engine,
    event,
)
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.pool import QueuePool

from joulestat.core.extras import Extra, MissingExtraError, require
from joulestat.core.redact import redact_url

log = logging.getLogger(__name__)


# -- Where the store lives and how to connect to it ------------------------------------

SUPPORTED_DIALECTS = ("sqlite", "postgresql")
# SQLAlchemy driver name -> the module it imports and the extra that installs it
# (SQLite's driver is the standard library's).
DRIVER_EXTRAS = {"psycopg": ("psycopg", Extra.POSTGRES)}


class StoreError(RuntimeError):
    """The store cannot be used as configured (bad URL, missing driver, wrong schema)."""


def default_db_url() -> str:
    """SQLite file in the user data dir: ``$XDG_DATA_HOME/joulestat/joulestat.db``.

    Falls back to ``~/.local/share`` as the XDG spec says. Nothing is created here: a
    reader (``joulestat jobs``) must leave no trace on a machine with no store; the
    writers that may create the store make the directory first (:func:`data_dir`).
    """
    return f"sqlite:///{data_dir_path() / 'joulestat.db'}"


def data_dir_path() -> Path:
    """``$XDG_DATA_HOME/joulestat`` (else ``~/.local/share/joulestat``), not created."""
    base = os.environ.get("XDG_DATA_HOME") or ""
    root = Path(base) if base.strip() and Path(base).is_absolute() else (
        Path.home() / ".local" / "share"
    )
    return root / "joulestat"


# The store holds every job's name, labels and energy: only its owner reads it, whatever
# the umask (022 would leave it world-readable).
DATA_DIR_MODE = 0o700
STORE_FILE_MODE = 0o600


def data_dir() -> Path:
    """:func:`data_dir_path`, created ``0700`` if it is not there yet (an existing
    directory keeps the mode its owner gave it)."""
    directory = data_dir_path()
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            directory.mkdir(mode=DATA_DIR_MODE)
        except FileExistsError:
            pass
        else:
            os.chmod(directory, DATA_DIR_MODE)  # mkdir's mode is masked by the umask
    except OSError as exc:
        raise StoreError(f"cannot create the data directory {directory}: {exc.strerror}") from None
    return directory


def sqlite_path(url: str | URL) -> Path | None:
    """The file of a SQLite URL (``None``: not SQLite, in memory, a ``file:`` URI or a URL
    that does not parse)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser().resolve()


def create_sqlite_file(url: str | URL) -> bool:
    """Create a SQLite store's file ``0600`` before SQLite opens it, so SQLite copies
    that mode to its ``-wal`` and ``-shm`` files; whether the file is new.

    Only for the commands that may create a store (the agent and the other writers,
    ``joulestat db upgrade``). A missing directory is left for :func:`make_engine` to
    name, except the default data directory, which is created ``0700``.
    """
    path = sqlite_path(url)
    if path is None or path.exists():
        return False
    if path.parent == data_dir_path().resolve():
        data_dir()
    if not path.parent.is_dir():
        return False
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, STORE_FILE_MODE)
    except FileExistsError:  # another process made it meanwhile
        return False
    except OSError as exc:
        raise StoreError(f"{redact_url(url)}: cannot create {path}: {exc.strerror}") from None
    try:
        os.fchmod(fd, STORE_FILE_MODE)
    finally:
        os.close(fd)
    return True


def check_driver(url: str | URL) -> None:
    """:class:`MissingExtraError` when ``url``'s driver comes with an extra that is not
    installed (``postgresql+psycopg://`` without ``joulestat[postgres]``); a URL that does
    not parse is left to :func:`make_engine` to describe."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return
    found = DRIVER_EXTRAS.get(parsed.get_driver_name())
    if found is None:
        return
    module, extra = found
    try:
        require(module, extra, "a PostgreSQL store")
    except MissingExtraError:
        raise
    except ImportError:  # installed but broken (psycopg without libpq): create_engine says
        return


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
        _check_driver(parsed, shown)
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


def _check_driver(url: URL, shown: str) -> None:
    try:
        check_driver(url)
    except MissingExtraError as exc:
        raise StoreError(f"{shown}: {exc}") from None


# MATERIALIZED common table expressions (the job totals' reads) came with SQLite 3.35
# (March 2021).
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


def _binary_rows(engine: Engine) -> None:
    """Rows come back in PostgreSQL's binary format: the same Python values (a float
    sent as its 8 bytes, not as digits to parse), decoded in a third of the time. A
    fleet's comparison reads 95,000 rows of ten columns (agent/store/job_pools.py),
    which took 0.16 to 0.20 s to decode as text and 0.07 to 0.10 s as binary, after the
    server is done: time every `joulestat compare` and cold page waited.
    ``Cursor.format`` is psycopg 3's documented switch
    (https://www.psycopg.org/psycopg3/docs/api/cursors.html#psycopg.Cursor.format)."""
    from psycopg.pq import Format

    @event.listens_for(engine, "before_cursor_execute")
    def _binary(_connection: Any, cursor: Any, *_args: Any) -> None:
        cursor.format = Format.BINARY


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


# -- A read-only engine for readers that must never write (the dashboard) --------------

class StoreMissingError(StoreError):
    """The SQLite file does not exist yet: no agent has written to this store."""


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
        _check_driver(parsed, shown)
        query = dict(parsed.query)
        # No JIT compilation for readers (PostgreSQL compiles a statement whose
        # estimated cost passes jit_above_cost): the pooled comparison's common table
        # expressions are estimated far above what they cost, and compiling them took
        # 0.35 s of a 0.55 s statement over 124,200 jobs. Before the URL's own options,
        # so that "options=-c jit=on" in --db still turns it on.
        options = " ".join(filter(None, ["-c jit=off", str(query.pop("options", "")),
                                          "-c default_transaction_read_only=on"]))
        connect_args: dict[str, Any] = {"options": options}
        if "connect_timeout" not in query:
            connect_args["connect_timeout"] = 5
        engine = create_engine(parsed.set(query=query), pool_pre_ping=True,
                               connect_args=connect_args)
        if parsed.get_driver_name() == "psycopg":
            _binary_rows(engine)
        return engine
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise StoreError(f"{shown}: a reader needs a SQLite file path")
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise StoreMissingError(f"{path} does not exist")
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


# -- Open the store for a reader: never create, never migrate ---------------------------
