"""Alembic environment for the joulestat store.

Run through :mod:`joulestat.store.migrate` (``joulestat db upgrade``), which builds the
Alembic config in code and usually hands over an open connection in
``config.attributes["connection"]``; a URL in the ``sqlalchemy.url`` option works too
(for ``command.revision(..., autogenerate=True)`` and offline ``--sql`` output).

SQLite cannot ALTER most things, so revisions run in batch mode there (Alembic copies
the table); PostgreSQL runs the same operations directly.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from joulestat.store.engine import make_engine
from joulestat.store.migrate import on_this_dialect
from joulestat.store.schema import METADATA

config = context.config
target_metadata = METADATA


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=on_this_dialect(connection.dialect.name),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("offline migrations need the sqlalchemy.url option")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("pass a connection in config.attributes or set sqlalchemy.url")
    engine = make_engine(url)
    try:
        with engine.begin() as owned:
            _configure(owned)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
