"""The store's tables as SQLAlchemy 2.0 declarative models.

These classes are the schema's source of truth for Alembic (a test checks that the
migrated database matches them) and for the read side (dashboard, reports). The
agent's writer deliberately does not import them: the ORM costs about 6 MiB of RSS,
so the agent's code uses the lightweight Core table clauses of :mod:`agent.store.tables`
that a test keeps in step with these models.

Times:
  * raw ticks keep their interval ``(t_start_ms, t_end_ms]`` as BIGINT epoch
    milliseconds, so the natural key ``(node, t_end_ms, component, device)`` compares
    exactly and writing the same tick twice collides instead of counting twice;
  * a minute rollup with ``minute_start_s = m`` holds the ticks whose end lies in
    ``(m, m + 60]`` (ticks are open at the start, so a tick ending on the minute
    belongs to the minute it closes). Each tick lands in exactly one minute, which
    is what lets queries combine rollups and raw rows without double counting.

Per-job tables (migration 0002) follow the same rules: ``job_energy`` holds a tick's
shares keyed like ``tick_energy`` plus ``job_id``, where ``job_id = ''`` is the
unattributed remainder, so for every raw tick entry the job rows (that one included)
sum to ``tick_energy.energy_j``; ``job_minute_energy`` rolls them up by the same
minutes and is pruned at the same ``nodes.raw_pruned_until_ms``. The raw job tables
carry no foreign key to ``jobs``: a share may reach the store before its job's
metadata does, and the unattributed ``''`` rows belong to no job at all.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Double, ForeignKey, Index, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agent.store.tables import JOB_ID_LENGTH

# Named constraints make later migrations (and SQLite batch mode, which rebuilds
# tables) able to refer to them reliably on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Node(Base):
    """One machine the agent ran on, described as it last reported itself."""

    __tablename__ = "nodes"

    node: Mapped[str] = mapped_column(String, primary_key=True)
    instance_type: Mapped[str] = mapped_column(String)
    region: Mapped[str] = mapped_column(String)
    cpu_model: Mapped[str] = mapped_column(String)
    agent_version: Mapped[str] = mapped_column(String)
    first_seen_s: Mapped[float] = mapped_column(Double)
    last_seen_s: Mapped[float] = mapped_column(Double)
    # Raw ticks of this node ending at or before this instant have been deleted and
    # live on only in minute_energy; NULL while nothing has been pruned. Queries use
    # it to choose rollups before it and raw ticks after it.
    raw_pruned_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Job shares and unit counts of this node ending at or before this instant are
    # summed in job_energy_totals and job_unit_totals (migration 0003); NULL while
    # nothing is. Never before raw_pruned_until_ms, so the rows it sums still exist when
    # it advances; the node's writer refuses rows that end at or before it.
    totals_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The one process writing this node's ticks (migration 0004, agent/store/lease.py):
    # ``<boot id>:<pid>``, its host and mode (agent or embedded), and until when its
    # lease holds; a second live writer of the node is refused.
    writer_id: Mapped[str | None] = mapped_column(String, nullable=True)
    writer_host: Mapped[str | None] = mapped_column(String, nullable=True)
    writer_mode: Mapped[str | None] = mapped_column(String, nullable=True)
    lease_until_s: Mapped[float | None] = mapped_column(Double, nullable=True)


class NodeDevice(Base):
    """A device a sensor reported on a node, as recorded at the agent's last start."""

    __tablename__ = "node_devices"

    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    component: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, primary_key=True)
    source: Mapped[str] = mapped_column(String)
    model: Mapped[str] = mapped_column(String)
    uuid: Mapped[str] = mapped_column(String)
    # The vendor API's own index (NVML index, RAPL package); "index" is an SQL keyword.
    device_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_seen_s: Mapped[float] = mapped_column(Double)


class TickEnergy(Base):
    """Raw ticks: energy one device used over ``(t_start_ms, t_end_ms]``.

    Kept for ``raw_retention``; older rows are deleted once rolled up into
    :class:`MinuteEnergy`. WITHOUT ROWID on SQLite: the composite key is the only
    index, so the table is stored once instead of as rowid table plus key index.
    """

    __tablename__ = "tick_energy"
    __table_args__ = {"sqlite_with_rowid": False}

    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    t_end_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    component: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, primary_key=True)
    t_start_ms: Mapped[int] = mapped_column(BigInteger)
    energy_j: Mapped[float] = mapped_column(Double)
    source: Mapped[str] = mapped_column(String)


class MinuteEnergy(Base):
    """Per-minute rollup of raw ticks: the ticks ending in ``(m, m + 60]``.

    ``covered_s`` is the summed duration of those ticks (about 60 when the agent ran
    the whole minute, less across gaps). ``source`` is the ticks' provenance, or
    ``a+b`` when it changed within the minute.
    """

    __tablename__ = "minute_energy"
    __table_args__ = {"sqlite_with_rowid": False}

    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    minute_start_s: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False
    )
    component: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, primary_key=True)
    energy_j: Mapped[float] = mapped_column(Double)
    covered_s: Mapped[float] = mapped_column(Double)
    source: Mapped[str] = mapped_column(String)


class JobRecord(Base):
    """One job, however many nodes report it: a multi-node job is one row.

    ``created_s`` is the earliest start any node reported. ``status``/``ended_s`` are
    derived from :class:`JobNode` by the writer: ``running`` while any node runs it,
    else ``ended`` at the last node's end. ``labels`` is a JSON object (text), merged
    key by key as nodes report more labels.
    """

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    name: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String)
    labels: Mapped[str] = mapped_column(String)
    origin: Mapped[str] = mapped_column(String)
    created_s: Mapped[float] = mapped_column(Double)
    ended_s: Mapped[float | None] = mapped_column(Double, nullable=True)
    status: Mapped[str] = mapped_column(String)


class JobNode(Base):
    """One node's part in a job: where (instance type) and when it ran there.

    A job whose data loaders run on CPU instances and whose model runs on a GPU
    instance is one :class:`JobRecord` with one row here per node. ``pids`` is a JSON
    list (text) of the process ids registered on that node.
    """

    __tablename__ = "job_nodes"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    instance_type: Mapped[str] = mapped_column(String)
    region: Mapped[str] = mapped_column(String)
    started_s: Mapped[float] = mapped_column(Double)
    ended_s: Mapped[float | None] = mapped_column(Double, nullable=True)
    pids: Mapped[str] = mapped_column(String)


class JobEnergy(Base):
    """Raw per-tick shares: what one job got of one device over ``(t_start_ms, t_end_ms]``.

    Same key and retention as :class:`TickEnergy`, plus ``job_id`` (``''`` for the
    unattributed remainder). The ``(node, t_end_ms)`` index serves rollups and pruning,
    which work per node and time range.
    """

    __tablename__ = "job_energy"
    __table_args__ = (
        Index("ix_job_energy_node_t_end_ms", "node", "t_end_ms"),
        {"sqlite_with_rowid": False},
    )

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    t_end_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    component: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, primary_key=True)
    t_start_ms: Mapped[int] = mapped_column(BigInteger)
    dynamic_j: Mapped[float] = mapped_column(Double)
    idle_j: Mapped[float] = mapped_column(Double)
    source: Mapped[str] = mapped_column(String)


class JobMinuteEnergy(Base):
    """Per-minute rollup of :class:`JobEnergy`, minutes as in :class:`MinuteEnergy`."""

    __tablename__ = "job_minute_energy"
    __table_args__ = (
        Index("ix_job_minute_energy_node_minute_start_s", "node", "minute_start_s"),
        {"sqlite_with_rowid": False},
    )

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    minute_start_s: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False
    )
    component: Mapped[str] = mapped_column(String, primary_key=True)
    device: Mapped[str] = mapped_column(String, primary_key=True)
    dynamic_j: Mapped[float] = mapped_column(Double)
    idle_j: Mapped[float] = mapped_column(Double)


class JobUnit(Base):
    """Units of work (tokens, samples, ...) a job counted on a node, per tick.

    ``count`` is the increase over the tick ending at ``t_end_ms``. Once raw ticks are
    pruned, the rows of each pruned minute are merged into one row at the minute's end
    (``t_end_ms = (minute_start_s + 60) * 1000``), so sums never change.
    """

    __tablename__ = "job_units"
    __table_args__ = (
        Index("ix_job_units_node_t_end_ms", "node", "t_end_ms"),
        {"sqlite_with_rowid": False},
    )

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    t_end_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    unit: Mapped[str] = mapped_column(String, primary_key=True)
    count: Mapped[float] = mapped_column(Double)


class JobEnergyTotal(Base):
    """A job's energy on a node per component, summed over its shares ending at or before
    the node's ``totals_until_ms``.

    Job lists sum ten thousand jobs at once; summing their minute rollups is a scan of
    millions of rows, so each node's settled past is kept here as one row per (job,
    node, component) and queries add the raw shares after the boundary. Advanced by the
    node's writer in its maintain transaction (:mod:`agent.store.rollup`) and by imports.
    """

    __tablename__ = "job_energy_totals"

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    component: Mapped[str] = mapped_column(String, primary_key=True)
    dynamic_j: Mapped[float] = mapped_column(Double)
    idle_j: Mapped[float] = mapped_column(Double)


class JobUnitTotal(Base):
    """A job's unit counts on a node, summed like :class:`JobEnergyTotal`."""

    __tablename__ = "job_unit_totals"

    job_id: Mapped[str] = mapped_column(String(JOB_ID_LENGTH), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    unit: Mapped[str] = mapped_column(String, primary_key=True)
    count: Mapped[float] = mapped_column(Double)


class NodeCheckpoint(Base):
    """The agent's counters at ``saved_s``, so a restart after ``kill -9`` can attribute
    the gap. ``state`` is JSON text; ``boot_id`` tells whether the machine rebooted
    since (then counters restarted and the state must not be diffed against)."""

    __tablename__ = "node_checkpoints"

    node: Mapped[str] = mapped_column(ForeignKey("nodes.node"), primary_key=True)
    saved_s: Mapped[float] = mapped_column(Double)
    boot_id: Mapped[str] = mapped_column(String)
    state: Mapped[str] = mapped_column(String)
