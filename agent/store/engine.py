"""Where the store lives and how to connect to it: read-write, read-only, and for a
long-running process.

The store is SQLite by default (one file in the user's data directory, nothing to set
up) and PostgreSQL when several nodes share one database. Both are reached through a
SQLAlchemy :class:`~sqlalchemy.engine.Engine`; the only backend-specific SQL in the
project is the ``INSERT … ON CONFLICT`` that :func:`dialect_insert` hands out.

SQLite connections get WAL (the dashboard can read while the agent writes), a busy
timeout (a reader holding a lock delays a write instead of failing it at once) and
enforced foreign keys (SQLite leaves them off by default).

Readers that must never write (the dashboard, ``jobs``, ``report``, ``compare``) take
:func:`open_readonly_engine` (through :func:`open_reader_engine` for the commands):
SQLite opens with a ``mode=ro`` URI (plus ``PRAGMA query_only``) and PostgreSQL with
``default_transaction_read_only=on``, so a role with nothing but ``SELECT`` is enough.

A writer (the agent, an embedded run, ``import``, ``demo``) takes :func:`open_engine`,
which waits for a store that does not answer yet and creates the schema of a new store
out of process (``joulestat db upgrade`` in a child), but never migrates an existing
one: that is ``joulestat db upgrade``'s alone (docs/store.md, "Who creates and migrates
the store").

A command that changes rows of a store it did not make (``joulestat jobs delete``)
takes :func:`open_existing_engine`: a writer's connection on a store that exists at the
head revision, with the readers' rule otherwise (nothing created, nothing migrated).
"""

from __future__ import annotations

import importlib
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
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

from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, MissingExtraError, require
from joulestat.core.redact import redact_text, redact_url

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
        return create_engine(parsed.set(query=query), pool_pre_ping=True,
                             connect_args=connect_args)
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

def open_reader_engine(url: str | None, setting: str = "--db") -> Engine:
    """A read-only engine on a store at the head revision, for the commands that only
    read (``jobs``, ``report``, ``compare``): they never create or migrate a store.

    A missing SQLite file, a database without joulestat's schema, one at an older
    revision (``joulestat db upgrade`` names who may migrate) or at a revision this code
    does not know stop the command with a :class:`ConfigError` naming the URL, and
    leave the store exactly as it was.
    """
    url = url or default_db_url()
    shown = redact_url(url)
    try:
        engine = open_readonly_engine(url)
    except StoreMissingError as exc:
        raise ConfigError(missing_store_message(setting, shown, str(exc))) from None
    except Exception as exc:
        raise ConfigError(f"{setting} {shown}: cannot open the store: "
                          f"{redact_text(str(exc))}") from None
    require_head(engine, shown, setting)
    return engine


def missing_store_message(setting: str, shown: str, detail: str) -> str:
    """What a command that never creates a store says about a missing SQLite file."""
    return (f"{setting} {shown}: no store there ({detail}): the agent creates it, or "
            "`joulestat db upgrade --db URL`; nothing was created")


def require_head(engine: Engine, shown: str, setting: str = "--db") -> None:
    """Return if the store of ``engine`` is at the head revision; else dispose of the
    engine and raise a :class:`ConfigError` naming the URL and who may migrate (no
    schema, an older revision: ``joulestat db upgrade``; a newer one: a newer joulestat).
    Looks only: nothing is created or migrated."""
    from joulestat.store.migrate import (
        SchemaState,
        current_revision,
        newer_message,
        older_message,
        schema_state,
    )

    try:
        revision = current_revision(engine)
    except StoreError as exc:
        engine.dispose()
        raise ConfigError(f"{setting} {redact_text(str(exc))}") from None
    state = schema_state(revision)
    if state is SchemaState.HEAD:
        return
    engine.dispose()
    if state is SchemaState.EMPTY:
        raise ConfigError(f"{setting} {shown}: not a joulestat store (no schema "
                          "revision): the agent creates it, or `joulestat db upgrade "
                          "--db URL`")
    assert revision is not None
    message = older_message if state is SchemaState.OLDER else newer_message
    raise ConfigError(f"{setting} {message(shown, revision)}")


# -- Open an existing store to change rows: never create, never migrate ----------------

def open_existing_engine(url: str | None, setting: str = "--db") -> Engine:
    """A read-write engine on an existing store at the head revision, for a command
    that changes rows of a store it must neither create nor migrate (``joulestat jobs
    delete``): the readers' rule (docs/store.md) with a writer's connection.

    A missing SQLite file (nothing is created: no file, no data directory), a SQLite URL
    that is not a file path, a database without joulestat's schema or at another
    revision stop the command with a :class:`ConfigError` naming the URL; the store is
    left as it was. Nothing waits for a store that does not answer: the command's
    first statement fails with the driver's message instead.
    """
    url = url or default_db_url()
    shown = redact_url(url)
    # The revision is read as a reader reads it: a writer's first connection would
    # already change a SQLite file that is not a store (WAL mode writes its header).
    open_reader_engine(url, setting).dispose()
    try:
        engine = make_engine(url)
    except Exception as exc:
        raise ConfigError(f"{setting} {shown}: cannot open the store: "
                          f"{redact_text(str(exc))}") from None
    require_head(engine, shown, setting)
    return engine


# -- Open the store for a writer: create a new store, never migrate an existing one ------

class StoreAway(StoreError):
    """The store does not answer (yet): a server starting, a network blip, a lock held.

    Unlike the other :class:`StoreError` s this one may go away by itself, so a writer
    may keep trying; ``reason`` is the driver's message, redacted, first line only (for
    the log), ``detail`` the whole error, redacted (for the error that gives up)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def writer_engine(url: str | None, setting: str = "--db") -> tuple[Engine, str]:
    """An engine for a writer and the URL it is for (the default store when ``url`` is
    None), connecting to nothing yet: a URL that can never work (bad syntax, unknown
    backend, missing driver, missing directory) is a :class:`ConfigError` now."""
    if not url:
        try:
            data_dir()
        except StoreError as exc:
            raise ConfigError(f"{setting}: {exc}") from None
    url = url or default_db_url()
    try:
        create_sqlite_file(url)
        engine = make_engine(url)
    except Exception as exc:
        raise ConfigError(f"{setting} {redact_url(url)}: cannot open the store: "
                          f"{redact_text(str(exc))}") from None
    return engine, url


def check_writer_store(engine: Engine, url: str, setting: str = "--db") -> None:
    """One look at a writer's store: :class:`StoreAway` when it does not answer; a
    :class:`ConfigError` when it answers and can never be written by this code (another
    revision: ``joulestat db upgrade`` is the operator's step) or its schema cannot be
    created; else the store is at the head revision (created here when it had none)."""
    from sqlalchemy.exc import OperationalError

    # they import this module
    from joulestat.store.migrate import (
        SchemaState,
        current_revision,
        newer_message,
        older_message,
        schema_state,
    )

    shown = redact_url(url)
    try:
        revision = current_revision(engine)
    except StoreError as exc:
        if isinstance(exc.__cause__, OperationalError):
            raise StoreAway(redact_text(str(exc.__cause__)).splitlines()[0],
                            redact_text(str(exc))) from exc
        raise ConfigError(f"{setting} {shown}: cannot open the store: "
                          f"{redact_text(str(exc))}") from None
    state = schema_state(revision)
    if state is SchemaState.OLDER:
        assert revision is not None
        raise ConfigError(f"{setting} {older_message(shown, revision)}")
    if state is SchemaState.NEWER:
        assert revision is not None
        raise ConfigError(f"{setting} {newer_message(shown, revision)}")
    if state is SchemaState.EMPTY:
        log.info("creating the store's schema at %s (a new store)", shown)
        # The URL travels in the environment, not argv, so a password never shows in ps.
        result = subprocess.run(
            [sys.executable, "-m", "joulestat", "db", "upgrade"],
            env={**os.environ, "JOULESTAT_DB": url}, capture_output=True, text=True,
        )
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ConfigError(f"{setting} {shown}: creating the schema failed: "
                              f"{redact_text(detail[0])}")


def open_engine(url: str | None, setting: str = "--db", wait_s: float = 0.0) -> Engine:
    """An engine on a store at the head revision, for the writers (the agent, an
    embedded run, ``import``, ``demo``); bad URLs stop the command.

    Who may migrate (docs/store.md): a writer creates the schema of a store that has
    none yet (a new SQLite file, made ``0600``, or an empty database), out of process
    (``joulestat db upgrade`` in a child: Alembic and the ORM cost ~16 MiB that the
    agent would otherwise keep as its peak RSS for its whole life). A store at an older
    revision is left as it is, with an error naming ``joulestat db upgrade``: on a
    shared PostgreSQL a migration changes the store under agents still running the old
    code, so it is the operator's step. A newer store is refused the same way.

    ``wait_s``: how long to keep trying a store that does not answer, saying so in the
    log; a URL that can never work (bad syntax, unknown driver) fails at once. The
    agent does not wait here: it measures while it waits (:class:`StoreWait`).
    """
    engine, url = writer_engine(url, setting)
    deadline, delay_s = time.monotonic() + wait_s, 1.0
    while True:
        try:
            check_writer_store(engine, url, setting)
            return engine
        except StoreAway as exc:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                engine.dispose()
                raise ConfigError(waited_message(url, setting, wait_s, exc.detail)) from None
            log.warning("store %s does not answer (%s); retrying for up to %.0f s more",
                        redact_url(url), exc.reason, left_s)
            time.sleep(min(delay_s, left_s))
            delay_s = min(delay_s * 2, 30.0)
        except ConfigError:
            engine.dispose()
            raise


def waited_message(url: str, setting: str, wait_s: float, detail: str) -> str:
    """The error of a store that never answered within ``--db-wait``."""
    waited = f" (waited {wait_s:g} s)" if wait_s else ""
    return f"{setting} {redact_url(url)}: cannot open the store{waited}: {detail}"


class StoreWait:
    """A writer's store that did not answer at start, looked at again by the writer's
    reconnect probe (every 2 s) until it answers or ``wait_s`` has passed.

    Why not wait before measuring: the agent would serve no metrics and no job API
    and measure nothing for as long as ``--db-wait`` (5 minutes by default), though its
    spool can hold what it measures meanwhile. So the agent ticks at once and its
    writer starts in its outage state; :meth:`check` is the same look as at start
    (:func:`check_writer_store`: the schema is checked, or created for a new store),
    so a store that comes back at another revision stops the agent with the same
    message as at start. Past ``wait_s`` :meth:`check` gives up with the message
    :func:`open_engine` gives, and the agent stops (what it measured waits in the spool
    for its next start): a store that never answered is more often a wrong host or
    password than an outage, and an agent running on without ever having had a store
    would hide that.
    """

    def __init__(self, engine: Engine, url: str, setting: str, wait_s: float,
                 first: StoreAway, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine, self.url, self.setting = engine, url, setting
        self.wait_s = float(wait_s)
        self.reason = first.reason
        self._clock = clock
        self.started_s = clock()
        self.opened = False

    @property
    def waited_s(self) -> float:
        return self._clock() - self.started_s

    def check(self) -> None:
        """Returns once the store answers at the head revision (then :attr:`opened`);
        :class:`StoreAway` while it does not, a :class:`ConfigError` when it never will
        (a wrong revision, or ``wait_s`` passed)."""
        if self.opened:
            return
        try:
            check_writer_store(self.engine, self.url, self.setting)
        except StoreAway as exc:
            self.reason = exc.reason
            if self.waited_s >= self.wait_s:
                raise ConfigError(waited_message(self.url, self.setting, self.wait_s,
                                                 exc.detail)) from None
            raise
        self.opened = True
        log.info("store %s answers, %.0f s after start-up: writing back what was measured "
                 "meanwhile", redact_url(self.url), self.waited_s)
