"""How each kind of command opens the store, and what it checks of the schema first.

Readers that must never write (the dashboard, ``jobs``, ``report``, ``compare``) take
:func:`open_reader_engine`: a read-only engine
(:func:`joulestat.store.engine.open_readonly_engine`) on a store at the head revision.

A writer (the agent, an embedded run, ``import``, ``demo``) takes :func:`open_engine`,
which waits for a store that does not answer yet and creates the schema of a new store
out of process (``joulestat db upgrade`` in a child), but never migrates an existing
one: that is ``joulestat db upgrade``'s alone (docs/store.md, "Who creates and migrates
the store").

A command that changes rows of a store it did not make (``joulestat jobs delete``)
takes :func:`open_existing_engine`: a writer's connection on a store that exists at the
head revision, with the readers' rule otherwise (nothing created, nothing migrated).

Apart from :mod:`joulestat.store.engine` (how to connect) because these look at the
schema's revision (:mod:`joulestat.store.migrate`), which itself connects through it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable

from sqlalchemy.engine import Engine

from joulestat.core.errors import ConfigError
from joulestat.core.redact import redact_text, redact_url
from joulestat.store.engine import (
    StoreError,
    StoreMissingError,
    create_sqlite_file,
    data_dir,
    default_db_url,
    make_engine,
    open_readonly_engine,
)
from joulestat.store.migrate import (
    SchemaState,
    current_revision,
    newer_message,
    older_message,
    schema_state,
)

log = logging.getLogger(__name__)

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
