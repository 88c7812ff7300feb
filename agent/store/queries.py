"""The reads that the dashboard, reports and tests share.

Each figure comes from one SQL statement where it combines tables, so it is
consistent even while the agent's :meth:`~agent.store.writer.StoreWriter.maintain`
prunes raw rows in between (SQLite does not hold a snapshot across statements).

Time windows are ``(since_s, until_s]`` in epoch seconds, matching ticks' ``(t0, t1]``:
a tick counts when its end lies in the window. Where raw ticks have been pruned, only
minute rollups remain and a minute counts when its end ``minute_start_s + 60`` lies in
the window, so windows on whole minutes give the same totals before and after pruning.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import BigInteger, func, literal, literal_column, select, union_all
from sqlalchemy.engine import Engine
from sqlalchemy.sql.elements import ColumnElement

from agent.sensors.base import DeviceInfo
from agent.store.tables import MINUTE_ENERGY, MINUTE_S, NODE_DEVICES, NODES, TICK_ENERGY

Node, NodeDevice = NODES.c, NODE_DEVICES.c
TickEnergy, MinuteEnergy = TICK_ENERGY.c, MINUTE_ENERGY.c


@dataclass(frozen=True, slots=True)
class NodeSummary:
    node: str
    instance_type: str
    region: str
    cpu_model: str
    agent_version: str
    first_seen_s: float
    last_seen_s: float


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One rollup row: energy of the ticks ending in ``(minute_start_s, +60]``."""

    minute_start_s: int
    component: str
    device: str
    energy_j: float
    covered_s: float
    source: str


def _ms(t_s: float) -> int:
    return round(t_s * 1000)


def _minute_ends_within(since_ms: int, until_ms: int) -> tuple[ColumnElement[bool], ...]:
    """``minute_start_s + 60`` in ``(since, until]``, as integer bounds on the key column.

    Integers, not floats: PostgreSQL would cast the BIGINT column to compare it with a
    float and could no longer use the primary key index.
    """
    minute_ms = MINUTE_S * 1000
    return (
        MinuteEnergy.minute_start_s > (since_ms - minute_ms) // 1000,
        MinuteEnergy.minute_start_s <= (until_ms - minute_ms) // 1000,
    )


def list_nodes(engine: Engine) -> list[NodeSummary]:
    """Every node that ever wrote to the store, by name."""
    query = select(
        Node.node, Node.instance_type, Node.region, Node.cpu_model, Node.agent_version,
        Node.first_seen_s, Node.last_seen_s,
    ).order_by(Node.node)
    with engine.connect() as connection:
        return [NodeSummary(*row) for row in connection.execute(query)]


def node_devices(engine: Engine, node: str) -> list[DeviceInfo]:
    """The devices ``node`` reported at its agent's last start."""
    query = (
        select(NodeDevice.component, NodeDevice.device, NodeDevice.source, NodeDevice.model,
               NodeDevice.uuid, NodeDevice.device_index)
        .where(NodeDevice.node == node)
        .order_by(NodeDevice.component, NodeDevice.device)
    )
    with engine.connect() as connection:
        return [DeviceInfo(*row) for row in connection.execute(query)]


def node_energy_j(
    engine: Engine, node: str, since_s: float, until_s: float
) -> dict[tuple[str, str], float]:
    """Joules per (component, device) of ``node`` over ``(since_s, until_s]``.

    Raw ticks after the node's prune boundary, minute rollups before it; each tick is
    in exactly one of the two, so nothing is counted twice.
    """
    since_ms, until_ms = _ms(since_s), _ms(until_s)
    if until_ms <= since_ms:
        return {}
    pruned_ms = select(Node.raw_pruned_until_ms).where(Node.node == node).scalar_subquery()
    raw = (
        select(TickEnergy.component, TickEnergy.device, func.sum(TickEnergy.energy_j).label("j"))
        .where(
            TickEnergy.node == node,
            TickEnergy.t_end_ms > since_ms,
            TickEnergy.t_end_ms <= until_ms,
            TickEnergy.t_end_ms > func.coalesce(pruned_ms, literal(since_ms, BigInteger)),
        )
        .group_by(TickEnergy.component, TickEnergy.device)
    )
    # Minutes ending in (since, min(until, pruned)]; the boundary is minute-aligned, so
    # the integer division is exact. Written on minute_start_s to use the primary key.
    pruned_last_minute_s = (pruned_ms - literal_column("60000")).op(
        "/", precedence=8, return_type=BigInteger)(literal_column("1000"))
    rolled = (
        select(MinuteEnergy.component, MinuteEnergy.device,
               func.sum(MinuteEnergy.energy_j).label("j"))
        .where(
            MinuteEnergy.node == node,
            *_minute_ends_within(since_ms, until_ms),
            MinuteEnergy.minute_start_s <= pruned_last_minute_s,
        )
        .group_by(MinuteEnergy.component, MinuteEnergy.device)
    )
    totals: defaultdict[tuple[str, str], float] = defaultdict(float)
    with engine.connect() as connection:
        for component, device, energy_j in connection.execute(union_all(raw, rolled)):
            totals[(component, device)] += float(energy_j)
    return dict(totals)


def latest_power_w(engine: Engine, node: str) -> dict[tuple[str, str], float]:
    """Average watts per (component, device) over ``node``'s most recent stored tick.

    Falls back to the most recent minute rollup when no raw ticks are left; empty when
    the node has no data at all.
    """
    latest_ms = (
        select(func.max(TickEnergy.t_end_ms)).where(TickEnergy.node == node).scalar_subquery()
    )
    raw = select(
        TickEnergy.component, TickEnergy.device, TickEnergy.energy_j,
        TickEnergy.t_end_ms - TickEnergy.t_start_ms,
    ).where(TickEnergy.node == node, TickEnergy.t_end_ms == latest_ms)
    with engine.connect() as connection:
        rows = connection.execute(raw).all()
        if rows:
            return {(c, d): (j / (ms / 1000) if ms > 0 else 0.0) for c, d, j, ms in rows}
        latest_minute = (
            select(func.max(MinuteEnergy.minute_start_s))
            .where(MinuteEnergy.node == node).scalar_subquery()
        )
        rolled = select(
            MinuteEnergy.component, MinuteEnergy.device, MinuteEnergy.energy_j,
            MinuteEnergy.covered_s,
        ).where(MinuteEnergy.node == node, MinuteEnergy.minute_start_s == latest_minute)
        return {
            (c, d): (j / covered if covered > 0 else 0.0)
            for c, d, j, covered in connection.execute(rolled)
        }


def minute_energy_rows(
    engine: Engine, node: str, since_s: float, until_s: float
) -> list[MinuteRow]:
    """Rollup rows of ``node`` for the minutes ending in ``(since_s, until_s]``, in order."""
    query = (
        select(MinuteEnergy.minute_start_s, MinuteEnergy.component, MinuteEnergy.device,
               MinuteEnergy.energy_j, MinuteEnergy.covered_s, MinuteEnergy.source)
        .where(
            MinuteEnergy.node == node,
            *_minute_ends_within(_ms(since_s), _ms(until_s)),
        )
        .order_by(MinuteEnergy.minute_start_s, MinuteEnergy.component, MinuteEnergy.device)
    )
    with engine.connect() as connection:
        return [MinuteRow(*row) for row in connection.execute(query)]
