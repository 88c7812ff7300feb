"""Lightweight Core clauses for the store's tables, for the agent's own SQL.

The declarative models in :mod:`agent.store.models` are the schema's source of truth,
but importing them loads the ORM (about 6 MiB of RSS, an eighth of the agent's
budget). The writer, the rollups and the reads the agent makes at start-up
(:func:`~agent.store.job_queries.load_running_jobs` and
:func:`~agent.store.job_queries.load_checkpoint`) use these ``table()`` clauses
instead; ``test_core_tables_match_models`` keeps their columns and types in step with
the models.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Double, Integer, String, column, table

# Job ids are at most 128 characters (agent.jobs.registry.JOB_ID_RE).
JOB_ID_LENGTH = 128
# job_energy.job_id of the share no job received (system, idle under `exclude`).
UNATTRIBUTED = ""
# Rollup tables hold minutes: a minute (m, m + 60 s] is keyed by minute_start_s = m.
MINUTE_MS = 60_000

NODES = table(
    "nodes",
    column("node", String), column("instance_type", String), column("region", String),
    column("cpu_model", String), column("agent_version", String),
    column("first_seen_s", Double), column("last_seen_s", Double),
    column("raw_pruned_until_ms", BigInteger), column("totals_until_ms", BigInteger),
    column("writer_id", String), column("writer_host", String), column("writer_mode", String),
    column("lease_until_s", Double),
)
NODE_DEVICES = table(
    "node_devices",
    column("node", String), column("component", String), column("device", String),
    column("source", String), column("model", String), column("uuid", String),
    column("device_index", Integer), column("last_seen_s", Double),
)
TICK_ENERGY = table(
    "tick_energy",
    column("node", String), column("t_end_ms", BigInteger), column("component", String),
    column("device", String), column("t_start_ms", BigInteger), column("energy_j", Double),
    column("source", String),
)
MINUTE_ENERGY = table(
    "minute_energy",
    column("node", String), column("minute_start_s", BigInteger), column("component", String),
    column("device", String), column("energy_j", Double), column("covered_s", Double),
    column("source", String),
)
JOBS = table(
    "jobs",
    column("id", String), column("name", String), column("kind", String),
    column("labels", String), column("origin", String), column("created_s", Double),
    column("ended_s", Double), column("status", String),
)
JOB_NODES = table(
    "job_nodes",
    column("job_id", String), column("node", String), column("instance_type", String),
    column("region", String), column("started_s", Double), column("ended_s", Double),
    column("pids", String),
)
JOB_ENERGY = table(
    "job_energy",
    column("job_id", String), column("node", String), column("t_end_ms", BigInteger),
    column("component", String), column("device", String), column("t_start_ms", BigInteger),
    column("dynamic_j", Double), column("idle_j", Double), column("source", String),
)
JOB_MINUTE_ENERGY = table(
    "job_minute_energy",
    column("job_id", String), column("node", String), column("minute_start_s", BigInteger),
    column("component", String), column("device", String), column("dynamic_j", Double),
    column("idle_j", Double),
)
JOB_UNITS = table(
    "job_units",
    column("job_id", String), column("node", String), column("t_end_ms", BigInteger),
    column("unit", String), column("count", Double),
)
JOB_ENERGY_TOTALS = table(
    "job_energy_totals",
    column("job_id", String), column("node", String), column("component", String),
    column("dynamic_j", Double), column("idle_j", Double),
)
JOB_UNIT_TOTALS = table(
    "job_unit_totals",
    column("job_id", String), column("node", String), column("unit", String),
    column("count", Double),
)
NODE_CHECKPOINTS = table(
    "node_checkpoints",
    column("node", String), column("saved_s", Double), column("boot_id", String),
    column("state", String),
)
CORE_TABLES = (NODES, NODE_DEVICES, TICK_ENERGY, MINUTE_ENERGY, JOBS, JOB_NODES, JOB_ENERGY,
               JOB_MINUTE_ENERGY, JOB_UNITS, JOB_ENERGY_TOTALS, JOB_UNIT_TOTALS,
               NODE_CHECKPOINTS)
