"""The SQL store: the one package that knows SQL.

* :mod:`agent.store.engine` — where the database is and how to connect
  (:func:`default_db_url`, :func:`make_engine`).
* :mod:`agent.store.tables` — the schema, declared once as Core tables on one
  ``MetaData`` (writer, readers and Alembic autogenerate all use it).
* :mod:`agent.store.migrate` — applies the Alembic migrations in ``migrations/``;
  :func:`~agent.store.migrate.is_at_head` checks the schema without importing Alembic.
* :mod:`agent.store.writer` — the agent's batched, idempotent writer (ticks, job
  shares, units, job metadata, checkpoints in one transaction per flush), with its
  buffer (:mod:`~agent.store.buffer`), job upserts (:mod:`~agent.store.job_writer`)
  and rollups and retention (:mod:`~agent.store.rollup`).
* :mod:`agent.store.queries` — the node reads that dashboard and reports share;
  :mod:`agent.store.job_queries` — the per-job reads, and the agent's restart reads.

Only the engine helpers are imported here, so ``import agent.store`` stays cheap for
the agent: Alembic loads only where it is used, and nothing here loads the ORM.
"""

from __future__ import annotations

from agent.store.engine import StoreError, default_db_url, make_engine, redact_url

__all__ = ["StoreError", "default_db_url", "make_engine", "redact_url"]
