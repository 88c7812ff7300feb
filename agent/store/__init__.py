"""The SQL store: the one package that knows SQL.

* :mod:`joulestat.store.engine` — where the database is and how to connect
  (:func:`default_db_url`, :func:`make_engine`).
* :mod:`joulestat.store.tables` — the schema, declared once as Core tables on one
  ``MetaData`` (writer, readers and Alembic autogenerate all use it).
* :mod:`joulestat.store.migrate` — applies the Alembic migrations in ``migrations/``;
  :func:`~joulestat.store.migrate.is_at_head` checks the schema without importing Alembic.
* :mod:`joulestat.store.writer` — the agent's batched, idempotent writer (ticks, job
  shares, units, job metadata, checkpoints in one transaction per flush), with its
  buffer (:mod:`~joulestat.store.buffer`), job upserts (:mod:`~joulestat.store.job_writer`)
  and rollups and retention (:mod:`~joulestat.store.rollup`).
* Reads, one module per subject, every caller (dashboard, reports, commands, tests)
  using the same ones:

  * :mod:`~joulestat.store.boundary` — the one statement of the reading rule: raw rows
    after each node's prune boundary, minute rollups up to it (and the job totals'
    settled boundary), which every energy read below builds on;
  * :mod:`~joulestat.store.nodes` — nodes, their devices, energy, coverage and
    conservation check;
  * :mod:`~joulestat.store.jobs` — job records (:class:`~joulestat.store.jobs.JobRef`, summaries,
    details), job lists and details; :mod:`~joulestat.store.job_totals` — per-part energy
    and unit totals and the fast job lists built on them; :mod:`~joulestat.store.job_refs`
    — what job a user means (id, name or id prefix);
  * :mod:`~joulestat.store.series` — energy and units over time, and chart series;
  * :mod:`~joulestat.store.provenance` — where energy came from (sources, imports, the
    share no job tracked);
  * :mod:`~joulestat.store.restart` — the agent's own start-up reads (running jobs,
    checkpoint), kept light;
  * :mod:`~joulestat.store.readonly` — the dashboard's read-only engine.

Only the engine helpers are imported here, so ``import joulestat.store`` stays cheap for
the agent: Alembic loads only where it is used, and nothing here loads the ORM.
"""

from __future__ import annotations

from joulestat.store.engine import StoreError, default_db_url, make_engine, redact_url

__all__ = ["StoreError", "default_db_url", "make_engine", "redact_url"]
