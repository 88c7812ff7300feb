"""Schema migrations: Alembic, configured in code, imported only when migrating.

The schema is created and changed only by the Alembic revisions in ``migrations/``
(never ``create_all``), so every database, SQLite or PostgreSQL, old or new, reaches
the same schema by the same steps. There is no ``alembic.ini``: :func:`alembic_config`
builds the configuration, pointing at the ``joulestat.migrations`` package (the
repository's ``migrations/``, which the wheel carries).

The agent must not pay for Alembic (about 10 MiB of RSS) just to ask whether the
schema is current, so :func:`is_at_head` compares the ``alembic_version`` table with
:data:`HEAD_REVISION`, a constant a unit test keeps equal to Alembic's own head.

The scripts start from one baseline (``0001``, the schema of the first release); how a
later revision is written, and tested, is in docs/migrations.md. Each one sets
:data:`HEAD_REVISION` to its id.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.util
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import SQLAlchemyError

from joulestat.store.engine import StoreError, describe_error, make_engine, redact_url

if TYPE_CHECKING:  # pragma: no cover - typing only
    from alembic.config import Config

log = logging.getLogger(__name__)

# The newest revision in migrations/versions. Keep in step with the scripts
# (tests/unit/store/test_engine.py checks it against Alembic's ScriptDirectory).
HEAD_REVISION = "0007"

VERSION_TABLE = "alembic_version"


def on_this_dialect(dialect: str) -> Callable[..., bool]:
    """Autogenerate's ``include_object`` (``alembic check``, migrations/env.py): leave out
    what the schema declares for another dialect only (``ddl_if(dialect=...)``, as
    ``job_minute_energy``'s key and index in agent/store/schema.py), which Alembic would
    otherwise report as missing there."""
    def include(item: Any, _name: str | None, _type: str, _reflected: bool,
                _compare_to: Any) -> bool:
        only_on = getattr(item, "_ddl_if", None)  # SQLAlchemy's record of ddl_if()
        wanted = None if only_on is None else only_on.dialect
        if wanted is None:
            return True
        return dialect == wanted if isinstance(wanted, str) else dialect in wanted
    return include


def migrations_dir() -> Path:
    """Where the Alembic scripts are: the ``joulestat.migrations`` package, which the
    wheel carries (``migrations/`` of the source tree in an editable install); a clear
    error when an install lost it."""
    spec = importlib.util.find_spec("joulestat.migrations")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    path = Path(locations[0]) if locations else None
    if path is None or not (path / "env.py").is_file() or not (path / "versions").is_dir():
        raise StoreError(
            f"Alembic migrations not found (joulestat.migrations at {path}): this joulestat "
            "install is incomplete; reinstall it (pip install --force-reinstall joulestat)"
        )
    return path


def alembic_config(url: str | URL | None = None) -> Config:
    """An Alembic :class:`~alembic.config.Config` for ``migrations/``, built in code."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if url is not None:
        # ConfigParser interpolates '%': escape it so passwords survive.
        rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def script_head_revision() -> str | None:
    """The head revision according to the scripts themselves (imports Alembic)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def upgrade(url_or_engine: str | URL | Engine, revision: str = "head") -> str | None:
    """Apply migrations up to ``revision`` and return the revision now current.

    Takes a URL (an engine is made and disposed of) or an existing engine, whose
    connection the migration shares.
    """
    from alembic import command

    owned = not isinstance(url_or_engine, Engine)
    engine = make_engine(url_or_engine) if owned else url_or_engine
    assert isinstance(engine, Engine)
    config = alembic_config()
    try:
        with _one_migration_at_a_time(engine), engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                   {"key": MIGRATION_LOCK_KEY})
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
        now = current_revision(engine)
    except SQLAlchemyError as exc:
        shown = redact_url(engine.url)
        raise StoreError(f"{shown}: migration failed: {describe_error(exc)}") from exc
    finally:
        config.attributes.pop("connection", None)
        if owned:
            engine.dispose()
    log.info("%s: schema at revision %s", redact_url(engine.url), now)
    return now


# pg_advisory_xact_lock's key for migrations: any constant the store uses for nothing
# else ("joulestat" in ASCII, truncated to 63 bits).
MIGRATION_LOCK_KEY = 0x6A6F756C65737461


@contextlib.contextmanager
def _one_migration_at_a_time(engine: Engine) -> Iterator[None]:
    """Hold the store's migration lock for one :func:`upgrade`.

    Why: agents started at once on a new store each see no schema and each create it
    (issue 47: one of three died with "table nodes already exists"). Alembic reads the
    revision after the lock is held, so the later ones find the store at head and do
    nothing. PostgreSQL takes an advisory lock in the migration's own transaction (its
    DDL is transactional); SQLite's driver commits DDL as it goes, so a file SQLite
    store is locked with ``flock`` on ``<database>.migrate-lock`` beside it (SQLite
    stores are local files: docs/store.md). In-memory databases have one connection
    and need none.
    """
    database = engine.url.database or ""
    if engine.dialect.name != "sqlite" or database in ("", ":memory:") or \
            database.startswith("file:"):
        yield
        return
    import fcntl

    lock_path = Path(database).expanduser().with_name(Path(database).name + ".migrate-lock")
    with os.fdopen(os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600), "r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def current_revision(engine: Engine) -> str | None:
    """The database's revision, or ``None`` for a database never migrated.

    Plain SQL on purpose: no Alembic import. Branches (several rows) are joined with
    ``,`` so they can never equal a single head.
    """
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(VERSION_TABLE):
                return None
            rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            versions = sorted(str(row[0]) for row in rows)
    except SQLAlchemyError as exc:
        raise StoreError(f"{redact_url(engine.url)}: cannot read the schema revision: "
                         f"{describe_error(exc)}") from exc
    return ",".join(versions) if versions else None


def known_revisions() -> frozenset[str]:
    """The revision ids of the scripts this install carries (their file names start with
    the id), read without importing Alembic."""
    return frozenset(path.name.split("_", 1)[0]
                     for path in (migrations_dir() / "versions").glob("[0-9]*_*.py"))


class SchemaState(enum.Enum):
    """Where a store's schema stands for this code."""

    HEAD = "head"
    EMPTY = "empty"  # no joulestat schema: a new database
    OLDER = "older"  # a revision this code can upgrade from
    NEWER = "newer"  # a revision this code does not know: a newer joulestat made it


def schema_state(revision: str | None) -> SchemaState:
    """:class:`SchemaState` of a revision read by :func:`current_revision`."""
    if revision is None:
        return SchemaState.EMPTY
    if revision == HEAD_REVISION:
        return SchemaState.HEAD
    if revision in known_revisions():
        return SchemaState.OLDER
    return SchemaState.NEWER


def newer_message(shown: str, revision: str) -> str:
    """What to say about a store at a revision this code does not know (instead of
    Alembic's "Can't locate revision")."""
    from joulestat.core.version import __version__

    return (f"{shown}: the store's schema is at revision {revision}, which this joulestat "
            f"({__version__}) does not know: it knows revisions up to {HEAD_REVISION}; a newer "
            "joulestat made this store: upgrade joulestat (the store was left as it is)")


def older_message(shown: str, revision: str) -> str:
    """What to say about a store this code could upgrade but may not (readers, the agent
    on an existing store): who may, and that nothing changed."""
    return (f"{shown}: the store's schema is at revision {revision}, this joulestat needs "
            f"{HEAD_REVISION}: run `joulestat db upgrade --db URL` (with every agent writing "
            "to it upgraded together); the store was left as it is")


def is_at_head(engine: Engine) -> bool:
    """Whether the database schema is exactly :data:`HEAD_REVISION` (no Alembic import)."""
    return current_revision(engine) == HEAD_REVISION
