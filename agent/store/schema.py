"""The store's schema, declared once: its tables, and what each backend stores differently.

SQLAlchemy Core tables on one :data:`METADATA`: the writer, the readers and Alembic
(``migrations/env.py``: autogenerate compares the migrated database with this metadata,
and a test says it finds no difference on SQLite and PostgreSQL) all use these tables.
Core only: the ORM would cost the agent about 6 MiB of RSS for nothing it needs.

Times:
  * raw ticks keep their interval ``(t_start_ms, t_end_ms]`` as BIGINT epoch
    milliseconds, so the natural key ``(node, t_end_ms, component, device)`` compares
    exactly and writing the same tick twice collides instead of counting twice;
  * a minute rollup with ``minute_start_s = m`` holds the ticks whose end lies in
    ``(m, m + 60]`` (ticks are open at the start, so a tick ending on the minute
    belongs to the minute it closes). Each tick lands in exactly one minute, which
    is what lets queries combine rollups and raw rows without double counting.

Per-job tables follow the same rules: ``job_energy`` holds the
shares keyed like ``tick_energy`` plus ``job_id``, where ``job_id = ''`` is the
unattributed remainder. A ``job_energy`` row is a **window**: a
job's share of one device summed over the ticks of one flush within one minute, cut
where a device's source changes (the key has no source: a counter fault's ``fill:``
rows and the measured ones of one window would collide)
(``(t_start_ms, t_end_ms]`` spans them; :meth:`joulestat.store.rows.RowBuffer.params`),
so the job rows of a window (the unattributed one included) sum to the node's tick
rows since the previous window, and every minute's job rows sum to its ticks.
``job_minute_energy`` rolls them up by the same minutes. The raw job tables carry no
foreign key to ``jobs``: a share may reach the store before its job's metadata does,
and the unattributed ``''`` rows belong to no job at all.

How rows are read (raw rows after each node's boundary, minute rollups up to it, job
totals plus the raw rows after them) is :mod:`joulestat.store.read_rule`'s, the one
module that knows the boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    any_,
    bindparam,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType

# -- The store's schema, declared once -------------------------------------------------

# Job ids are at most 128 characters (joulestat.core.validation.JOB_ID_RE).
JOB_ID_LENGTH = 128
# job_energy.job_id of the share no job received (system, idle under `exclude`).
UNATTRIBUTED = ""
# Rollup tables hold minutes: a minute (m, m + 60 s] is keyed by minute_start_s = m.
MINUTE_S = 60
MINUTE_MS = MINUTE_S * 1000

# Named constraints make later migrations (and SQLite batch mode, which rebuilds
# tables) able to refer to them reliably on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
METADATA = MetaData(naming_convention=NAMING_CONVENTION)
# WITHOUT ROWID on SQLite where the composite key is the only index: the table is
# stored once instead of as a rowid table plus a key index.
_NO_ROWID = {"sqlite_with_rowid": False}
# On PostgreSQL the raw tables below are ``PARTITION BY RANGE`` of this column, one
# partition per UTC day plus a DEFAULT one, all in PARTITION_SCHEMA (kept out of the
# main schema, which autogenerate compares), so retention drops whole days instead of
# deleting rows; the baseline migration creates them so and the writers add the days
# (agent/store/maintenance.py). SQLite has no partitions. Said here as data, not as
# ``postgresql_partition_by`` on the tables: that option makes SQLAlchemy load its
# PostgreSQL dialect, about 1 MiB of the agent's RSS on every node, SQLite ones included.
PARTITION_SCHEMA = "joulestat_partitions"
DAY_PARTITIONED: dict[str, str] = {"tick_energy": "t_end_ms", "job_energy": "t_end_ms"}


def _key(name: str, type_: object, foreign: str | None = None) -> Column:
    args = (ForeignKey(foreign),) if foreign else ()
    return Column(name, type_, *args, primary_key=True, autoincrement=False)


# A partial index's condition, in its ``info``: the migration that makes the index
# writes ``CREATE INDEX ... WHERE`` with it on both backends, and
# tests/store/test_schema.py holds the two together (alembic's check compares only an
# index's columns). Not ``postgresql_where``: as with partitions (above), that option
# loads SQLAlchemy's PostgreSQL dialect into every process, 2 MiB of a SQLite agent's RSS.
PARTIAL = "where"
# A part that holds served latency histograms or a serving trace.
SERVED = "latency IS NOT NULL OR serving_trace IS NOT NULL"


def _col(name: str, type_: object, *, null: bool = False) -> Column:
    return Column(name, type_, nullable=null)


def _job_key() -> Column:
    return _key("job_id", String(JOB_ID_LENGTH))


def _node_key() -> Column:
    return _key("node", String, "nodes.node")


# One machine the agent ran on, described as it last reported itself.
NODES = Table(
    "nodes", METADATA,
    _key("node", String),
    _col("instance_type", String), _col("region", String), _col("cpu_model", String),
    _col("agent_version", String), _col("first_seen_s", Double), _col("last_seen_s", Double),
    # Raw ticks of this node ending at or before this instant are rolled up into
    # minute_energy and no read counts them (SQLite deletes them; PostgreSQL drops their
    # day's partition later); NULL while nothing has been pruned. Queries use it to
    # choose rollups before it and raw ticks after it (agent/store/read_rule.py).
    _col("raw_pruned_until_ms", BigInteger, null=True),
    # Job shares and unit counts ending at or before this instant are summed in
    # job_energy_totals and job_unit_totals; NULL while nothing is.
    # Never before raw_pruned_until_ms, so the rows it sums still exist when it
    # advances; the node's writer refuses rows that end at or before it.
    _col("totals_until_ms", BigInteger, null=True),
    # The one process writing this node's ticks (agent/store/durability.py):
    # ``<boot id>:<pid>``, its host and mode (agent or embedded), and until when its
    # lease holds; a second live writer of the node is refused.
    _col("writer_id", String, null=True), _col("writer_host", String, null=True),
    _col("writer_mode", String, null=True), _col("lease_until_s", Double, null=True),
    # Where that writer, an agent, answers its job API, so a run that
    # missed it can say which JOULESTAT_AGENT_URL to give; NULL when it has none.
    _col("writer_api_url", String, null=True),
    # How often that writer flushes (its ticks reach the store in batches this far
    # apart): a node whose newest tick is three of these old no longer reports
    # (the Overview); NULL where a writer did not say.
    _col("writer_flush_interval_s", Double, null=True),
)
# A device a sensor reported on a node, as recorded at the agent's last start.
NODE_DEVICES = Table(
    "node_devices", METADATA,
    _node_key(), _key("component", String), _key("device", String),
    _col("source", String), _col("model", String), _col("uuid", String),
    # The vendor API's own index (NVML index, RAPL package); "index" is an SQL keyword.
    _col("device_index", Integer, null=True),
    _col("last_seen_s", Double),
)
# Raw ticks: energy one device used over (t_start_ms, t_end_ms]. Kept for
# raw_retention; older rows go once rolled up into minute_energy (see nodes above).
TICK_ENERGY = Table(
    "tick_energy", METADATA,
    _node_key(), _key("t_end_ms", BigInteger), _key("component", String),
    _key("device", String),
    _col("t_start_ms", BigInteger), _col("energy_j", Double), _col("source", String),
    **_NO_ROWID,
)
# Per-minute rollup of raw ticks: the ticks ending in (m, m + 60]. covered_s is their
# summed duration (about 60 when the agent ran the whole minute, less across gaps);
# source is the ticks' provenance, or ``a+b`` when it changed within the minute.
MINUTE_ENERGY = Table(
    "minute_energy", METADATA,
    _node_key(), _key("minute_start_s", BigInteger), _key("component", String),
    _key("device", String),
    _col("energy_j", Double), _col("covered_s", Double), _col("source", String),
    **_NO_ROWID,
)
# One job, however many nodes report it: a multi-node job is one row. created_s is the
# earliest start any node reported; status/ended_s are derived from job_nodes by the
# writer (running while any node runs it, else ended at the last node's end); labels is
# a JSON object (text), merged key by key as nodes report more labels. agent_labels
# is the same for what joulestat recorded about how it measured the
# job (cpu_source, idle_policy: joulestat.attribution.agent_labels), kept out of the
# user's labels; merged alike, except that two idle policies make "mixed".
JOBS = Table(
    "jobs", METADATA,
    _key("id", String(JOB_ID_LENGTH)),
    _col("name", String), _col("kind", String), _col("labels", String),
    _col("origin", String), _col("created_s", Double), _col("ended_s", Double, null=True),
    _col("status", String),
    Column("agent_labels", String, nullable=False, server_default="{}"),
)
# One node's part in a job: where (instance type) and when it ran there; pids is a
# JSON list (text) of the process ids registered on that node.
JOB_NODES = Table(
    "job_nodes", METADATA,
    _key("job_id", String(JOB_ID_LENGTH), "jobs.id"), _node_key(),
    _col("instance_type", String), _col("region", String), _col("started_s", Double),
    _col("ended_s", Double, null=True), _col("pids", String),
    # A serving job's latency histograms on this node, JSON; else null.
    _col("latency", Text, null=True),
    # A serving job's load over time on this node (joulestat.core.serving_trace), JSON:
    # where its steady-state window is found; else null.
    _col("serving_trace", Text, null=True),
    # A node's parts by end: what its maintain pass sums per day (pool_days.py).
    Index("ix_job_nodes_node_ended_s", "node", "ended_s"),
    # The served parts only (a few, or none): whether a comparison must read its jobs one
    # by one is a seek (job_pools.has_latency), not a scan of a fleet's parts.
    Index("ix_job_nodes_served_job_id", "job_id", info={PARTIAL: SERVED}),
)
# Raw job windows: what one job got of one device over the ticks of one flush within one
# minute, (t_start_ms, t_end_ms], keyed like tick_energy plus job_id ('' for the
# unattributed remainder). The (node, t_end_ms) index serves rollups and pruning, which
# work per node and time.
JOB_ENERGY = Table(
    "job_energy", METADATA,
    _job_key(), _node_key(), _key("t_end_ms", BigInteger), _key("component", String),
    _key("device", String),
    _col("t_start_ms", BigInteger), _col("dynamic_j", Double), _col("idle_j", Double),
    _col("source", String),
    Index("ix_job_energy_node_t_end_ms", "node", "t_end_ms"),
    **_NO_ROWID,
)
# Per-minute rollup of job_energy, minutes as in minute_energy. It holds every job
# minute older than a few minutes, so it is a busy node's largest table: read by job,
# with no (node, minute_start_s) index (it would be a quarter of the table's size, for
# nothing a reader needs).
#
# Keyed on SQLite only. There the table is its key (WITHOUT ROWID),
# ordered by job. On PostgreSQL a unique index over the five key columns was as big as
# the rows themselves and half empty: every job appends its minutes in the middle of it,
# and pages split there keep half their space. A plain (job_id, node) index holds each
# job's rows as one deduplicated list of row addresses instead (about a tenth of the
# size: 0.13 against 1.20 MiB a node-hour at 50 jobs, benchmarks/store_growth.py) and
# serves every reader, all of which look rows up by job. Nothing is lost by the missing
# unique key: a minute is written once, by the maintain pass that moves its node's
# totals boundary past it (in the node row's lock; the writer refuses later rows), by
# an import into a part it first clears, or by deleting a job (which merges into the
# remainder's rows), and every reader sums.
JOB_MINUTE_ENERGY = Table(
    "job_minute_energy", METADATA,
    _col("job_id", String(JOB_ID_LENGTH)), Column("node", String, ForeignKey("nodes.node"),
                                                  nullable=False),
    _col("minute_start_s", BigInteger), _col("component", String), _col("device", String),
    _col("dynamic_j", Double), _col("idle_j", Double),
    PrimaryKeyConstraint("job_id", "node", "minute_start_s", "component", "device")
    .ddl_if(dialect="sqlite"),
    Index("ix_job_minute_energy_job_id_node", "job_id", "node").ddl_if(dialect="postgresql"),
    **_NO_ROWID,
)
# Units of work (tokens, samples, ...) a job counted on a node, per flush window (never
# across a minute): count is the increase over its ticks, the last ending at t_end_ms.
# Keyed, so that a flush written again after a lost acknowledgement adds nothing. Holds
# the rows after the node's totals boundary (the maintain pass moves those behind it
# into job_minute_units) and the unit counts of imported parts, at their bins' ends.
JOB_UNITS = Table(
    "job_units", METADATA,
    _job_key(), _node_key(), _key("t_end_ms", BigInteger), _key("unit", String),
    _col("count", Double),
    Index("ix_job_units_node_t_end_ms", "node", "t_end_ms"),
    **_NO_ROWID,
)
# A job's unit counts per minute (minute_start_s, minutes as in minute_energy), for the
# minutes behind its node's totals boundary: written once, by the maintain pass that
# moves the boundary past them, from the job_units rows it deletes. Kept in job_units,
# under its key, those rows took 0.54 MiB a node-hour at 50 jobs on PostgreSQL, the key
# index half empty as every job appends in its middle. Keyed on SQLite only and read by
# job, as job_minute_energy and for the same reasons (written once; every reader sums).
# Readers take a job's unit rows from both tables (:func:`every_unit_row`): a row is in
# exactly one of them, the move being one transaction.
JOB_MINUTE_UNITS = Table(
    "job_minute_units", METADATA,
    _col("job_id", String(JOB_ID_LENGTH)), Column("node", String, ForeignKey("nodes.node"),
                                                  nullable=False),
    _col("minute_start_s", BigInteger), _col("unit", String), _col("count", Double),
    PrimaryKeyConstraint("job_id", "node", "minute_start_s", "unit").ddl_if(dialect="sqlite"),
    Index("ix_job_minute_units_job_id_node", "job_id", "node").ddl_if(dialect="postgresql"),
    **_NO_ROWID,
)
# A job's energy on a node per component and source, summed over its shares ending at
# or before the node's totals_until_ms. Job lists sum ten thousand jobs at once; summing
# minute rollups would scan millions of rows, so each node's settled past is one row per
# (job, node, component, source) and queries add the raw shares after the boundary.
# The source is the raw shares' own, so a figure's provenance and bounds
# (agent/store/provenance.py) read these rows too instead of joining every job minute to
# its node minute. Advanced by the node's writer in its maintain transaction
# (agent/store/maintenance.py) and by imports.
JOB_ENERGY_TOTALS = Table(
    "job_energy_totals", METADATA,
    _job_key(), _node_key(), _key("component", String), _key("source", String),
    _col("dynamic_j", Double), _col("idle_j", Double),
)
# A job's unit counts on a node, summed like job_energy_totals.
JOB_UNIT_TOTALS = Table(
    "job_unit_totals", METADATA,
    _job_key(), _node_key(), _key("unit", String),
    _col("count", Double),
)
# -- Derived for a fleet's comparisons: days of ended single-node jobs, summed ----------
# A comparison by setup over a fleet's week reads these instead of 10^5 jobs' totals
# (agent/store/pool_days.py). A (node, day) is summed when job_pool_days holds it: its
# single-node parts whose job ended that UTC day (day_s, epoch seconds of its first
# second), or up to summed_until_s in a day not over, all settled behind the node's
# totals boundary. Rebuilt by the node's maintain pass from the job totals, never
# written by a write path: triggers (revisions 0001 and 0004) delete a (node, day)'s
# job_pool_days row whenever a job in it changes (its job row, a part, its energy or
# unit totals), so a reader that joins a day's sums to job_pool_days never reads sums
# that no longer hold; the next pass sums it again. On node deletion the database
# deletes them too (ON DELETE CASCADE).
JOB_POOL_DAYS = Table(
    "job_pool_days", METADATA,
    _key("node", String), _key("day_s", BigInteger),
    _col("parts", Integer),  # how many parts it sums (0: none single-node that day)
    # NULL: the whole day; else its jobs that ended up to this time (a day not over).
    _col("summed_until_s", Double, null=True),
    ForeignKeyConstraint(["node"], ["nodes.node"], ondelete="CASCADE"),
)
# Per (node, day) and what a comparison by setup tells apart (kind, instance type,
# region, name, agent labels, the ordinary units the jobs counted as ",a,b,"): one row
# with unit '' (every job, its figure its energy) and one per unit counted (its figure
# energy per unit). runs, energy (all, accelerators, above idle), held time, units; the
# figures' mean and sum of squared deviations (joulestat.core.spread.Spread); the first
# job by (created_s, id).
JOB_POOL_SUMS = Table(
    "job_pool_sums", METADATA,
    _col("node", String), _col("day_s", BigInteger), _col("kind", String),
    _col("instance_type", String), _col("region", String), _col("name", String),
    _col("agent_labels", String), _col("units_key", String), _col("unit", String),
    _col("runs", Integer), _col("energy_j", Double), _col("accelerator_j", Double),
    _col("dynamic_j", Double), _col("held_s", Double), _col("units", Double),
    _col("value_mean", Double), _col("value_m2", Double), _col("first_created_s", Double),
    _col("first_job_id", String(JOB_ID_LENGTH)),
    ForeignKeyConstraint(["node"], ["nodes.node"], ondelete="CASCADE"),
    Index("ix_job_pool_sums_node_day_s", "node", "day_s"),
)
# The same parts' energy per component and source (what bounds a comparison's rows).
JOB_POOL_SOURCES = Table(
    "job_pool_sources", METADATA,
    _col("node", String), _col("day_s", BigInteger), _col("kind", String),
    _col("instance_type", String), _col("units_key", String), _col("component", String),
    _col("source", String), _col("energy_j", Double), _col("dynamic_j", Double),
    ForeignKeyConstraint(["node"], ["nodes.node"], ondelete="CASCADE"),
    Index("ix_job_pool_sources_node_day_s", "node", "day_s"),
)
# -- Derived for a fleet's comparisons: the open parts' totals, copied -----------------
# The parts a comparison by setup reads one by one (a fleet's running jobs: 50,000 of
# 400,000 parts over 1,000 nodes x 7 days), each with its job's row and its totals,
# copied out of the 400,000-part tables (agent/store/open_parts.py). A part is copied
# when job_open_parts holds it: a single-node part on no summed day, with its job's
# attributes; job_open_energy and job_open_units hold its totals rows as
# job_energy_totals and job_unit_totals do. Rebuilt by the node's maintain pass from
# the job totals, never written by a write path: triggers (revision 0005) delete a part's
# job_open_parts row, and the database its copied totals with it (ON DELETE CASCADE),
# whenever its job row, one of its job's parts, or its totals change, so a reader never
# reads a copy that no longer holds; such a part is read from the totals themselves
# until the next pass, which replaces the node's rows (keyed by node first: it deletes
# them by node). On node deletion the database deletes them too.
JOB_OPEN_PARTS = Table(
    "job_open_parts", METADATA,
    _key("node", String), _job_key(),
    _col("kind", String), _col("name", String), _col("agent_labels", String),
    _col("created_s", Double), _col("instance_type", String), _col("region", String),
    _col("started_s", Double), _col("ended_s", Double, null=True),
    ForeignKeyConstraint(["node"], ["nodes.node"], ondelete="CASCADE"),
    # What the triggers delete by: every part of a changed job.
    Index("ix_job_open_parts_job_id", "job_id"),
)
JOB_OPEN_ENERGY = Table(
    "job_open_energy", METADATA,
    _key("node", String), _job_key(), _key("component", String), _key("source", String),
    _col("dynamic_j", Double), _col("idle_j", Double),
    ForeignKeyConstraint(["node", "job_id"], ["job_open_parts.node", "job_open_parts.job_id"],
                         ondelete="CASCADE"),
    **_NO_ROWID,
)
JOB_OPEN_UNITS = Table(
    "job_open_units", METADATA,
    _key("node", String), _job_key(), _key("unit", String),
    _col("count", Double),
    ForeignKeyConstraint(["node", "job_id"], ["job_open_parts.node", "job_open_parts.job_id"],
                         ondelete="CASCADE"),
    **_NO_ROWID,
)
# What the open parts' copies add up to, made by the same pass (revision 0006), so a
# fleet's comparison reads a copied part as one row and a node's copied parts' energy per
# source as a few, not as every copied totals row. job_open_sums: per copied part, its
# copied energy (all, accelerators, above idle) and the ordinary units it counted as
# ",a,b,"; a part with no row here is read as not copied. job_open_kinds: per node and
# job kind, how many copied parts job_open_sources adds up; job_open_sources: their
# energy per (instance type, units counted, component, source). A reader takes a (node,
# kind)'s sources only while it still has that many copied parts (a trigger that takes
# a copy out of use deletes its part, and its sums with it) and none of them counted a
# unit since that its copy did not: else that node and kind's copied totals themselves.
JOB_OPEN_SUMS = Table(
    "job_open_sums", METADATA,
    _key("node", String), _job_key(),
    _col("energy_j", Double), _col("accelerator_j", Double), _col("dynamic_j", Double),
    _col("units_key", String),
    ForeignKeyConstraint(["node", "job_id"], ["job_open_parts.node", "job_open_parts.job_id"],
                         ondelete="CASCADE"),
    **_NO_ROWID,
)
JOB_OPEN_KINDS = Table(
    "job_open_kinds", METADATA,
    _key("node", String), _key("kind", String),
    _col("parts", Integer),
    ForeignKeyConstraint(["node"], ["nodes.node"], ondelete="CASCADE"),
)
JOB_OPEN_SOURCES = Table(
    "job_open_sources", METADATA,
    _key("node", String), _key("kind", String), _key("instance_type", String),
    _key("units_key", String), _key("component", String), _key("source", String),
    _col("energy_j", Double), _col("dynamic_j", Double),
    ForeignKeyConstraint(["node", "kind"], ["job_open_kinds.node", "job_open_kinds.kind"],
                         ondelete="CASCADE"),
    **_NO_ROWID,
)
# The agent's counters at saved_s, so a restart after ``kill -9`` can attribute the
# gap. state is JSON text; boot_id tells whether the machine rebooted since (then the
# counters restarted and the state must not be diffed against).
NODE_CHECKPOINTS = Table(
    "node_checkpoints", METADATA,
    _node_key(),
    _col("saved_s", Double), _col("boot_id", String), _col("state", String),
)
# Every table, in dependency order (parents first).
CORE_TABLES = tuple(METADATA.sorted_tables)


# -- The store's times ------------------------------------------------------------------

def ms(t_s: float) -> int:
    """Epoch seconds as the store's integer milliseconds."""
    return round(t_s * 1000)


# The UTC days job_pool_days sums by, in epoch seconds of their first second.
DAY_S = 86_400


class DayOf(ColumnElement[Any]):
    """The UTC day (epoch seconds of its first second) of an epoch-seconds column, as
    the triggers of the baseline migration compute it: ``floor`` on PostgreSQL, an
    integer cast on SQLite (whose ``floor`` is optional; a cast truncates, which is the
    floor for every time after 1970). A cast on PostgreSQL would round instead."""

    inherit_cache = False  # its column is not part of a cache key
    type = BigInteger()

    def __init__(self, column: Any) -> None:
        self.column = column


@compiles(DayOf)
def _day_of_sqlite(element: DayOf, compiler: Any, **kw: Any) -> str:
    return f"(CAST(({compiler.process(element.column, **kw)}) / {DAY_S} AS INTEGER) * {DAY_S})"


@compiles(DayOf, "postgresql")
def _day_of_postgresql(element: DayOf, compiler: Any, **kw: Any) -> str:
    return f"(floor(({compiler.process(element.column, **kw)}) / {DAY_S}) * {DAY_S})::bigint"


def day_of(column: Any) -> ColumnElement[Any]:
    """``column``'s UTC day (:class:`DayOf`)."""
    return DayOf(column)


# -- Long lists of ids -----------------------------------------------------------------

class OneOf(ColumnElement[bool]):
    """``column IN (ids)`` for the bulk reads' long id lists (thousands of job ids per
    batch, :data:`joulestat.reports.compare.figures.BATCH`).

    On PostgreSQL the list goes as one array parameter, ``column = ANY(:ids)``: as an
    ``IN`` list each id is a parameter of its own, and expanding then parsing 10,000
    placeholders cost more than the query (7 of 31 s in ``joulestat compare`` over
    24,840 jobs, issue 28). SQLite has no arrays and takes the ``IN`` list. Not cached
    (each list differs anyway)."""

    inherit_cache = False
    # Not Boolean: SQLite, which has no boolean type, would get ``(... IN (...)) = 1``,
    # a comparison its planner cannot use an index for.
    type = NullType()

    def __init__(self, column: Any, ids: Sequence[str]) -> None:
        self.column = column
        self.ids = list(ids)


@compiles(OneOf)
def _one_of_in_list(element: OneOf, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.column.in_(element.ids), **kw)


@compiles(OneOf, "postgresql")
def _one_of_array(element: OneOf, compiler: Any, **kw: Any) -> str:
    ids = bindparam(None, element.ids, type_=ARRAY(String), unique=True)
    return compiler.process(element.column == any_(ids), **kw)


def one_of(column: Any, ids: Sequence[str]) -> ColumnElement[bool]:
    """``column`` is one of ``ids`` (:class:`OneOf`)."""
    return OneOf(column, ids)
