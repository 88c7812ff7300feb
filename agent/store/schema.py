"""The store's schema, declared once, and the one rule for reading it.

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

Per-job tables (migration 0002) follow the same rules: ``job_energy`` holds the
shares keyed like ``tick_energy`` plus ``job_id``, where ``job_id = ''`` is the
unattributed remainder. Since migration 0009 a ``job_energy`` row is a **window**: a
job's share of one device summed over the ticks of one flush within one minute
(``(t_start_ms, t_end_ms]`` spans them; :meth:`joulestat.store.rows.RowBuffer.params`),
so the job rows of a window (the unattributed one included) sum to the node's tick
rows since the previous window, and every minute's job rows sum to its ticks.
``job_minute_energy`` rolls them up by the same minutes. The raw job tables carry no
foreign key to ``jobs``: a share may reach the store before its job's metadata does,
and the unattributed ``''`` rows belong to no job at all.

The reading rule (the second half of this module): the agent rolls raw rows
(``tick_energy``, ``job_energy``) up into minutes (``minute_energy``,
``job_minute_energy``) and later prunes the raw rows, each node on its own schedule, up
to a boundary of the node (minute-aligned; NULL while nothing is pruned). Both
copies of a pruned minute's ticks may be in the store for a while, so every reader
takes **raw rows after the node's boundary and minute rollups up to it**: each tick
then counts exactly once, before, during and after a prune, and windows on whole
minutes give the same totals either way. The boundary is ``nodes.raw_pruned_until_ms``
for the node's ticks (raw for ``--raw-retention``) and ``nodes.totals_until_ms`` for
the job tables, whose raw windows go as soon as the job totals hold them, a few
minutes behind the clock (:func:`boundary_of`); job totals use that boundary too
(:func:`settled_until_ms`). Readers build their
raw and rolled halves with the columns and filters they need and hand them to
:func:`raw_and_rolled` (or :func:`raw_side` / :func:`rolled_side`), which join each half
to its node and add the boundary, so the rule is written here only. Time windows are
``(since_s, until_s]``, matching ticks' ``(t0, t1]``: a tick counts when its end lies
in the window, a minute ``m`` when its end ``m + 60`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Column,
    CompoundSelect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Select,
    String,
    Subquery,
    Table,
    Text,
    any_,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType

# -- The store's schema, declared once -------------------------------------------------

# Job ids are at most 128 characters (joulestat.attribution.validation.JOB_ID_RE).
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
# On PostgreSQL, tick_energy and job_energy are partitioned by UTC day of t_end_ms
# (migration 0005, agent/store/maintenance.py), so retention drops whole days instead of
# deleting rows. Not declared here (``postgresql_partition_by``): that option makes
# SQLAlchemy load its PostgreSQL dialect, about 1 MiB of the agent's RSS on every
# node, SQLite ones included; and autogenerate does not compare partitioning anyway.


def _key(name: str, type_: object, foreign: str | None = None) -> Column:
    args = (ForeignKey(foreign),) if foreign else ()
    return Column(name, type_, *args, primary_key=True, autoincrement=False)


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
    # choose rollups before it and raw ticks after it (agent/store/schema.py).
    _col("raw_pruned_until_ms", BigInteger, null=True),
    # Job shares and unit counts ending at or before this instant are summed in
    # job_energy_totals and job_unit_totals (migration 0003); NULL while nothing is.
    # Never before raw_pruned_until_ms, so the rows it sums still exist when it
    # advances; the node's writer refuses rows that end at or before it.
    _col("totals_until_ms", BigInteger, null=True),
    # The one process writing this node's ticks (migration 0004, agent/store/durability.py):
    # ``<boot id>:<pid>``, its host and mode (agent or embedded), and until when its
    # lease holds; a second live writer of the node is refused.
    _col("writer_id", String, null=True), _col("writer_host", String, null=True),
    _col("writer_mode", String, null=True), _col("lease_until_s", Double, null=True),
    # Where that writer, an agent, answers its job API (migration 0007), so a run that
    # missed it can say which JOULESTAT_AGENT_URL to give; NULL when it has none.
    _col("writer_api_url", String, null=True),
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
# (migration 0007) is the same for what joulestat recorded about how it measured the
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
    _key("job_id", String, "jobs.id"), _node_key(),
    _col("instance_type", String), _col("region", String), _col("started_s", Double),
    _col("ended_s", Double, null=True), _col("pids", String),
    # A serving job's latency histograms on this node, JSON (migration 0008); else null.
    _col("latency", Text, null=True),
    # The UTC day (epoch seconds) whose job_day_sums hold this part (migration 0012):
    # set when its node's maintain pass folds an ended single-node job, NULL otherwise
    # and again whenever the job is written to (agent/store/job_days.py).
    _col("pooled_day_s", BigInteger, null=True),
    Index("ix_job_nodes_node_pooled_day_s", "node", "pooled_day_s"),
    # The parts no day sums hold, the ones a fleet comparison reads one by one
    # (migration 0013): a few thousand, whatever the week of folded parts beside them.
    # Partial on PostgreSQL too (the migration builds every store); said here for SQLite
    # only: postgresql_where would load the PostgreSQL dialect into every agent (1 MiB
    # of RSS), and Alembic's comparison does not look at an index's WHERE.
    Index("ix_job_nodes_unpooled_job_id", "job_id",
          sqlite_where=text("pooled_day_s IS NULL")),
)
# Raw per-tick shares: what one job got of one device over (t_start_ms, t_end_ms],
# keyed like tick_energy plus job_id ('' for the unattributed remainder). The
# (node, t_end_ms) index serves rollups and pruning, which work per node and time.
JOB_ENERGY = Table(
    "job_energy", METADATA,
    _job_key(), _node_key(), _key("t_end_ms", BigInteger), _key("component", String),
    _key("device", String),
    _col("t_start_ms", BigInteger), _col("dynamic_j", Double), _col("idle_j", Double),
    _col("source", String),
    Index("ix_job_energy_node_t_end_ms", "node", "t_end_ms"),
    **_NO_ROWID,
)
# Per-minute rollup of job_energy, minutes as in minute_energy. Since migration 0009 it
# holds every job minute older than a few minutes, so it is a busy node's largest table:
# read by job; its (node, minute_start_s) index, used only to find where the rollup
# stopped, went with 0009 (a quarter of the table's size).
#
# Keyed on SQLite only (migration 0011). There the table is its key (WITHOUT ROWID),
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
# minutes behind its node's totals boundary (migration 0014): written once, by the
# maintain pass that moves the boundary past them, from the job_units rows it deletes.
# Until 0014 those merged rows stayed in job_units, under its key: at 50 jobs on
# PostgreSQL 0.54 MiB a node-hour, the key index half empty as every job appends in its
# middle, and a second (node, t_end_ms) index. Keyed on SQLite only and read by job, as
# job_minute_energy and for the same reasons (written once; every reader sums).
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
# The source (migration 0010) is the raw shares' own, so a figure's provenance and bounds
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
# Ended single-node jobs added up per node, UTC day of their end and what a comparison
# by setup tells apart (migration 0012, agent/store/job_days.py): kind, instance type,
# region, name, agent labels and which units they counted (``units_key``, ",a,b,").
# Per such group one row with ``unit`` '' (every job, compared per run: value = energy)
# and one per unit in units_key (value = energy per unit), each holding runs, energy,
# held time, units, the values' sum and sum of squares, the first job and the last
# start. Rebuilt for a (node, day) whenever a job joins or leaves it, in one transaction
# with the parts' ``job_nodes.pooled_day_s``, so a compare over a fleet's week reads
# these few rows instead of every job's totals (issue 28). No key: written and deleted
# per (node, day) only.
JOB_DAY_SUMS = Table(
    "job_day_sums", METADATA,
    _col("node", String), _col("day_s", BigInteger), _col("kind", String),
    _col("instance_type", String), _col("region", String), _col("name", String),
    _col("agent_labels", String), _col("units_key", String), _col("unit", String),
    _col("runs", Integer), _col("energy_j", Double), _col("accelerator_j", Double),
    _col("dynamic_j", Double), _col("held_s", Double), _col("units", Double),
    _col("value_sum", Double), _col("value_squares", Double), _col("first_s", Double),
    _col("first_job_id", String(JOB_ID_LENGTH)), _col("last_created_s", Double),
    Index("ix_job_day_sums_node_day_s", "node", "day_s"),
)
# The same jobs' energy per component and source (what bounds a comparison's rows).
JOB_DAY_SOURCES = Table(
    "job_day_sources", METADATA,
    _col("node", String), _col("day_s", BigInteger), _col("kind", String),
    _col("instance_type", String), _col("units_key", String), _col("component", String),
    _col("source", String), _col("energy_j", Double), _col("dynamic_j", Double),
    Index("ix_job_day_sources_node_day_s", "node", "day_s"),
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


# -- Where raw rows end and rollups begin ----------------------------------------------

def ms(t_s: float) -> int:
    """Epoch seconds as the store's integer milliseconds."""
    return round(t_s * 1000)


def ends_within(t_end_ms: Any, since_ms: int, until_ms: int) -> tuple[ColumnElement[bool], ...]:
    """A raw row's end in ``(since, until]``."""
    return t_end_ms > since_ms, t_end_ms <= until_ms


def minute_ends_within(minute_start_s: Any, since_ms: int, until_ms: int
                       ) -> tuple[ColumnElement[bool], ...]:
    """``minute_start_s + 60`` in ``(since, until]``, as integer bounds on the key column.

    Integers, not floats: PostgreSQL would cast the BIGINT column to compare it with a
    float and could no longer use the primary key index.
    """
    return (minute_start_s > (since_ms - MINUTE_MS) // 1000,
            minute_start_s <= (until_ms - MINUTE_MS) // 1000)


def minute_end_ms(minute_start_s: Any) -> Any:
    """The end of the minute ``minute_start_s`` in milliseconds (where a rolled row sits
    on a time axis, like a raw row's ``t_end_ms``)."""
    return (minute_start_s + literal_column(str(MINUTE_S))) * literal_column("1000")


def pruned_last_minute_s(pruned_ms: Any = NODES.c.raw_pruned_until_ms) -> Any:
    """``minute_start_s`` of the last pruned minute: of the joined node by default, or of
    ``pruned_ms`` (a node's boundary as a scalar subquery). Exact integer division: the
    boundary is minute-aligned. NULL (no rollup counts) while nothing is pruned."""
    return (pruned_ms - literal_column(str(MINUTE_MS))).op(
        "/", precedence=8, return_type=BigInteger)(literal_column("1000"))


def after_boundary(t_end_ms: Any, pruned_ms: Any = NODES.c.raw_pruned_until_ms
                   ) -> ColumnElement[bool]:
    """A raw row that counts: its node has pruned nothing, or the row ends after the
    boundary (of the joined node by default, or ``pruned_ms``)."""
    return or_(pruned_ms.is_(None), t_end_ms > pruned_ms)


def settled_until_ms() -> Any:
    """The joined node's job-totals boundary (``job_energy_totals`` and
    ``job_unit_totals`` hold everything up to it); -1 where nothing is summed yet, so
    that every raw row is after it."""
    return func.coalesce(NODES.c.totals_until_ms, literal_column("-1"))


def _joined(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` with ``table``'s node joined, whatever else its FROM already joins."""
    return query.join_from(table, NODES, NODES.c.node == table.c.node)


def boundary_of(table: Any) -> Any:
    """The joined node's boundary between ``table``'s raw rows and its minute rollups:
    ``totals_until_ms`` for the job tables (migration 0009: a job's shares are rolled
    into minutes and their raw windows deleted as the job totals advance, a few
    minutes behind the clock), ``raw_pruned_until_ms`` for the node's ticks (kept raw
    for ``--raw-retention``)."""
    if table.name in (JOB_ENERGY.name, JOB_MINUTE_ENERGY.name):
        return NODES.c.totals_until_ms
    return NODES.c.raw_pruned_until_ms


def raw_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the raw ``table`` (``tick_energy``, ``job_energy``) kept to the rows
    after each node's boundary (:func:`boundary_of`)."""
    return _joined(query, table).where(after_boundary(table.c.t_end_ms, boundary_of(table)))


def rolled_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the rollup ``table`` (``minute_energy``, ``job_minute_energy``) kept
    to the minutes up to each node's boundary (:func:`boundary_of`). Written on
    ``minute_start_s`` so that the primary key serves it."""
    return _joined(query, table).where(
        table.c.minute_start_s <= pruned_last_minute_s(boundary_of(table)))


def raw_and_rolled(raw: Select[Any], raw_table: Any, rolled: Select[Any], rolled_table: Any
                   ) -> CompoundSelect:
    """``raw`` UNION ALL ``rolled``, each half on its side of its node's boundary: one
    statement, so it is consistent even while the agent prunes in between (SQLite holds
    no snapshot across statements). The halves must select the same column types;
    callers add up rows that share a key."""
    return union_all(raw_side(raw, raw_table), rolled_side(rolled, rolled_table))


def every_unit_row() -> Subquery:
    """Every unit row of every job as ``(job_id, node, t_end_ms, unit, count)``: the raw
    ``job_units`` rows and the ``job_minute_units`` rows at their minute's end, UNION ALL
    in one statement (consistent while a maintain pass moves rows between them). Filter
    it by job: both tables are read by job."""
    raw, minutes = JOB_UNITS.c, JOB_MINUTE_UNITS.c
    minute_end_ms = (minutes.minute_start_s + literal_column("60")) * literal_column("1000")
    return union_all(
        select(raw.job_id, raw.node, raw.t_end_ms, raw.unit, raw.count),
        select(minutes.job_id, minutes.node, minute_end_ms.label("t_end_ms"), minutes.unit,
               minutes.count),
    ).subquery("unit_rows")


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
