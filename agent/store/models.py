"""The store's tables as SQLAlchemy 2.0 declarative models.

These classes are the schema's source of truth for Alembic (a test checks that the
migrated database matches them) and for the read side (dashboard, reports). The
agent's writer deliberately does not import them: the ORM costs about 6 MiB of RSS,
so :mod:`agent.store.writer` uses lightweight Core table clauses that a test keeps in
step with these models.

Times:
  * raw ticks keep their interval ``(t_start_ms, t_end_ms]`` as BIGINT epoch
    milliseconds, so the natural key ``(node, t_end_ms, component, device)`` compares
    exactly and writing the same tick twice collides instead of counting twice;
  * a minute rollup with ``minute_start_s = m`` holds the ticks whose end lies in
    ``(m, m + 60]`` (ticks are open at the start, so a tick ending on the minute
    belongs to the minute it closes). Each tick lands in exactly one minute, which
    is what lets queries combine rollups and raw rows without double counting.

New tables (per-job energy, issue 3) arrive in later migrations and may reference
``nodes.node``; nothing here needs to change for that.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Double, ForeignKey, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

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
