"""The SQL store: the one package that knows SQL. Every caller (the agent, reports,
commands, the dashboard, tests) uses the same modules:

* :mod:`~joulestat.store.schema`: the tables, declared once on one ``MetaData``
  (writer, readers and Alembic autogenerate all use them), and the one rule for reading
  them (raw rows after each node's prune boundary, minute rollups up to it);
* :mod:`~joulestat.store.engine`: where the database is and how to connect, read-write,
  read-only (the dashboard) or for a long-running process (wait, migrate out of
  process); :mod:`~joulestat.store.migrate` applies the Alembic migrations
  (``joulestat.migrations``) and checks the revision without importing Alembic;
* the write side: :mod:`~joulestat.store.writer` (batched, idempotent, one transaction a
  flush, patient through outages), :mod:`~joulestat.store.rows` (what a flush writes and
  its SQL), :mod:`~joulestat.store.durability` (spool, the node's lease, what a restart
  reads back), :mod:`~joulestat.store.maintenance` (rollups, retention, PostgreSQL's
  daily partitions), :mod:`~joulestat.store.import_writer` (jobs measured elsewhere)
  and :mod:`~joulestat.store.job_delete` (deleting jobs, the node's energy kept whole);
* the reads, by subject: :mod:`~joulestat.store.nodes`, :mod:`~joulestat.store.jobs`
  (records, totals, lists, what job a user means), :mod:`~joulestat.store.series`
  (energy and units over time), :mod:`~joulestat.store.provenance` (where energy came
  from) and :mod:`~joulestat.store.model_split` (a multi-model job's energy by model).

Nothing is imported here, so ``import joulestat.store.engine`` costs the agent only the
engine: Alembic loads only where it is used, and nothing loads the ORM.
"""
