"""The SQL store: the one package that knows SQL.

* :mod:`agent.store.engine` — where the database is and how to connect
  (:func:`default_db_url`, :func:`make_engine`).
* :mod:`agent.store.models` — the tables (SQLAlchemy declarative models).
* :mod:`agent.store.migrate` — applies the Alembic migrations in ``migrations/``;
  :func:`~agent.store.migrate.is_at_head` checks the schema without importing Alembic.
* :mod:`agent.store.writer` — the agent's batched, idempotent writer and rollups.
* :mod:`agent.store.queries` — the reads that dashboard and reports share.

Only the engine helpers are imported here, so ``import agent.store`` stays cheap for
the agent: the ORM and Alembic load only where they are used.
"""

from __future__ import annotations

from agent.store.engine import StoreError, default_db_url, make_engine, redact_url

__all__ = ["StoreError", "default_db_url", "make_engine", "redact_url"]
