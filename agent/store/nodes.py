"""Reads about nodes: which nodes there are, their devices, their energy and coverage.

Every energy figure combines raw ticks and minute rollups by the rule of
:mod:`joulestat.store.schema` (raw rows after the node's prune boundary, rollups up to it,
in one statement), so it is consistent even while the agent's
:meth:`~joulestat.store.writer.StoreWriter.maintain` prunes in between, and windows on whole
minutes give the same totals before and after pruning.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, literal_column, select
from sqlalchemy.engine import Engine

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.store.read_rule import ends_within, minute_end_ms, minute_ends_within, raw_and_rolled
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    MINUTE_ENERGY,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    ms,
    one_of,
)

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
    # Its writer's lease (agent/store/durability.py): who, until when (None once given
    # up), and how often it flushes; writer_id None where no writer took one (imports).
    writer_id: str | None = None
    lease_until_s: float | None = None
    flush_interval_s: float | None = None

    def writing(self, now_s: float) -> bool | None:
        """Whether a writer holds the node's lease at ``now_s``: False once it gave it
        up (a stopped agent or run) or let it expire (a dead one); None where no writer
        ever took one, so only the ticks can tell."""
        if self.writer_id is None:
            return None
        return self.lease_until_s is not None and self.lease_until_s >= now_s


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """One rollup row: energy of the ticks ending in ``(minute_start_s, +60]``."""

    minute_start_s: int
    component: str
    device: str
    energy_j: float
    covered_s: float
    source: str


def list_nodes(engine: Engine) -> list[NodeSummary]:
    """Every node that ever wrote to the store, by name."""
    query = select(
        Node.node, Node.instance_type, Node.region, Node.cpu_model, Node.agent_version,
        Node.first_seen_s, Node.last_seen_s, Node.writer_id, Node.lease_until_s,
        Node.writer_flush_interval_s,
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


def source_models(engine: Engine, nodes: Iterable[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(node, source) -> the model names of the devices its agent registered under that
    source (``("nvml_power", ...) -> ("NVIDIA H100 80GB HBM3",)``): a sensor's accuracy
    can depend on the board (:mod:`joulestat.reports.bounds`)."""
    wanted = sorted(set(nodes))
    found: dict[tuple[str, str], set[str]] = {}
    if not wanted:
        return {}
    query = (select(NodeDevice.node, NodeDevice.source, NodeDevice.model)
             .where(NodeDevice.node.in_(wanted)).distinct())
    with engine.connect() as connection:
        for node, source, model in connection.execute(query):
            found.setdefault((str(node), str(source)), set()).update([model] if model else [])
    return {key: tuple(sorted(models)) for key, models in found.items()}


def node_accelerators(engine: Engine, nodes: Iterable[str]) -> dict[str, dict[str, int]]:
    """node -> {accelerator model: how many} as its agent registered them at its last
    start (one row per device, whatever number of series it has); ``{}`` for a node
    whose agent registered devices but no named accelerator (it looked and found none,
    or a sensor gave no model); a node known only from imports is absent. What Compare
    labels its rows with: the models measured, not the ones a catalog expects."""
    wanted = sorted(set(nodes))
    found: dict[str, dict[str, int]] = {}
    if not wanted:
        return found
    registered = select(NodeDevice.node).where(NodeDevice.node.in_(wanted)).distinct()
    with engine.connect() as connection:
        found = {str(node): {} for node in connection.execute(registered).scalars()}
    query = (select(NodeDevice.node, NodeDevice.model, func.count())
             .where(NodeDevice.node.in_(wanted),
                    NodeDevice.component == Component.ACCELERATOR, NodeDevice.model != "")
             .group_by(NodeDevice.node, NodeDevice.model)
             .order_by(NodeDevice.node, NodeDevice.model))
    with engine.connect() as connection:
        for node, model, count in connection.execute(query):
            found.setdefault(str(node), {})[str(model)] = int(count)
    return found


def node_window_sums(engine: Engine, since_s: float, until_s: float, key: str,
                     raw_value: Any, rolled_value: Any, node: str | None = None
                     ) -> defaultdict[tuple[str, str, str], float]:
    """Per (node, component, ``key`` column): ``raw_value`` summed over the raw ticks and
    ``rolled_value`` over the minute rollups that count within ``(since_s, until_s]``
    (every node, or ``node``)."""
    since_ms, until_ms = ms(since_s), ms(until_s)
    totals: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    if until_ms <= since_ms:
        return totals
    raw = (select(TickEnergy.node, TickEnergy.component, TickEnergy[key], func.sum(raw_value))
           .where(*ends_within(TickEnergy.t_end_ms, since_ms, until_ms))
           .group_by(TickEnergy.node, TickEnergy.component, TickEnergy[key]))
    rolled = (select(MinuteEnergy.node, MinuteEnergy.component, MinuteEnergy[key],
                     func.sum(rolled_value))
              .where(*minute_ends_within(MinuteEnergy.minute_start_s, since_ms, until_ms))
              .group_by(MinuteEnergy.node, MinuteEnergy.component, MinuteEnergy[key]))
    if node is not None:
        raw, rolled = raw.where(TickEnergy.node == node), rolled.where(MinuteEnergy.node == node)
    with engine.connect() as connection:
        for row_node, component, value_key, value in connection.execute(
                raw_and_rolled(raw, TICK_ENERGY, rolled, MINUTE_ENERGY)):
            totals[(row_node, component, value_key)] += float(value)
    return totals


def node_energy_j(
    engine: Engine, node: str, since_s: float, until_s: float
) -> dict[tuple[str, str], float]:
    """Joules per (component, device) of ``node`` over ``(since_s, until_s]``."""
    sums = node_window_sums(engine, since_s, until_s, "device", TickEnergy.energy_j,
                            MinuteEnergy.energy_j, node)
    return {(component, device): joules for (_n, component, device), joules in sums.items()}


def node_covered_s(engine: Engine, since_s: float, until_s: float) -> dict[str, float]:
    """Seconds each node reported in ``(since_s, until_s]``: the time its best-covered
    device has ticks for (a node is held, and billed, while its agent runs)."""
    per_device = node_window_sums(
        engine, since_s, until_s, "device",
        (TickEnergy.t_end_ms - TickEnergy.t_start_ms) / literal_column("1000.0"),
        MinuteEnergy.covered_s)
    covered: dict[str, float] = {}
    for (node, _component, _device), seconds in per_device.items():
        covered[node] = max(covered.get(node, 0.0), seconds)
    return covered


def _newest(table: Any, time_column: str) -> Any:
    """The newest ``time_column`` in ``table`` of the node of the ``nodes`` row at hand:
    a correlated subquery, so each node's is one seek on the table's primary key (node
    first) inside one statement for all of them. A ``GROUP BY node`` would read every
    row of the raw retention (billions on a fleet's PostgreSQL), and a statement per
    node costs a round trip each (a thousand on the Overview page of a thousand nodes)."""
    return (select(func.max(table.c[time_column])).where(table.c.node == Node.node)
            .scalar_subquery())


def _per_node(nodes: Iterable[str] | None, *columns: Any) -> Any:
    """``nodes`` (None: every node) with ``columns``, as a subquery named ``newest``."""
    query = select(Node.node, *columns)
    if nodes is not None:
        query = query.where(one_of(Node.node, sorted(set(nodes))))
    return query.subquery("newest")


def latest_power_w(engine: Engine, node: str) -> dict[tuple[str, str], float]:
    """Average watts per (component, device) over ``node``'s most recent stored tick
    (:func:`nodes_latest_power_w` for one node)."""
    return nodes_latest_power_w(engine, [node]).get(node, {})


def nodes_latest_power_w(engine: Engine, nodes: Iterable[str] | None = None
                         ) -> dict[str, dict[tuple[str, str], float]]:
    """Per node (of ``nodes``; None: every node), the average watts per (component,
    device) over its most recent stored tick.

    A node with no raw ticks left falls back to its most recent minute rollup; a node
    with no data at all is absent. Two statements for any number of nodes.
    """
    newest = _per_node(nodes, _newest(TICK_ENERGY, "t_end_ms").label("newest"))
    raw = (select(newest.c.node, TickEnergy.component, TickEnergy.device,
                  TickEnergy.energy_j, TickEnergy.t_end_ms - TickEnergy.t_start_ms)
           .select_from(newest.join(TICK_ENERGY, and_(TickEnergy.node == newest.c.node,
                                                      TickEnergy.t_end_ms == newest.c.newest))))
    power: dict[str, dict[tuple[str, str], float]] = {}
    with engine.connect() as connection:
        for node, component, device, energy_j, span_ms in connection.execute(raw):
            power.setdefault(node, {})[(component, device)] = (
                energy_j / (span_ms / 1000) if span_ms > 0 else 0.0)
        wanted = None if nodes is None else set(nodes)
        missing = [n for n in (wanted if wanted is not None else _all_nodes(connection))
                   if n not in power]
        if not missing:
            return power
        minute = _per_node(missing, _newest(MINUTE_ENERGY, "minute_start_s").label("newest"))
        rolled = (select(minute.c.node, MinuteEnergy.component, MinuteEnergy.device,
                         MinuteEnergy.energy_j, MinuteEnergy.covered_s)
                  .select_from(minute.join(MINUTE_ENERGY, and_(
                      MinuteEnergy.node == minute.c.node,
                      MinuteEnergy.minute_start_s == minute.c.newest))))
        for node, component, device, energy_j, covered in connection.execute(rolled):
            power.setdefault(node, {})[(component, device)] = (
                energy_j / covered if covered > 0 else 0.0)
    return power


def _all_nodes(connection: Any) -> list[str]:
    return [str(n) for n in connection.execute(select(Node.node)).scalars()]


def latest_tick_end_s(engine: Engine, node: str) -> float | None:
    """When ``node``'s newest stored tick ended (:func:`latest_tick_ends_s` for one node)."""
    return latest_tick_ends_s(engine, [node]).get(node)


def latest_tick_ends_s(engine: Engine, nodes: Iterable[str] | None = None
                       ) -> dict[str, float]:
    """Per node (of ``nodes``; None: every node), when its newest stored tick ended: its
    raw ticks' newest end, else the end of its newest minute rollup; a node with no data
    is absent. Seeks on the primary keys, one statement for all the nodes, so a page can
    tell a silent node from a live one without reading its series."""
    newest = _per_node(nodes, _newest(TICK_ENERGY, "t_end_ms").label("raw_ms"),
                       _newest(MINUTE_ENERGY, "minute_start_s").label("minute_s"))
    query = select(newest.c.node, newest.c.raw_ms, newest.c.minute_s)
    ends: dict[str, float] = {}
    with engine.connect() as connection:
        for node, latest_ms, latest_minute in connection.execute(query):
            if latest_ms is not None:
                ends[node] = latest_ms / 1000
            elif latest_minute is not None:
                ends[node] = float(latest_minute) + 60
    return ends


def minute_energy_rows(
    engine: Engine, node: str, since_s: float, until_s: float
) -> list[MinuteRow]:
    """Rollup rows of ``node`` for the minutes ending in ``(since_s, until_s]``, in order
    (all of them, on either side of the boundary: what the rollup wrote)."""
    query = (
        select(MinuteEnergy.minute_start_s, MinuteEnergy.component, MinuteEnergy.device,
               MinuteEnergy.energy_j, MinuteEnergy.covered_s, MinuteEnergy.source)
        .where(
            MinuteEnergy.node == node,
            *minute_ends_within(MinuteEnergy.minute_start_s, ms(since_s), ms(until_s)),
        )
        .order_by(MinuteEnergy.minute_start_s, MinuteEnergy.component, MinuteEnergy.device)
    )
    with engine.connect() as connection:
        return [MinuteRow(*row) for row in connection.execute(query)]


def unattributed_check(engine: Engine, node: str) -> list[tuple[int, str, str, float, float]]:
    """``(t_end_ms, component, device, node_j, sum_j)`` for every stored job window of
    ``node``, and every node entry no window covers.

    A window is a set of job rows ending at ``t_end_ms`` (a flush window's raw rows, or
    a minute rollup at the minute's end), the unattributed ``''`` row
    included; ``sum_j`` is their sum and ``node_j`` the node's energy of the entries
    (raw ticks, or minute rollups before the prune boundary) ending after the window's
    start and at or before its end. The conservation identity is ``node_j == sum_j``
    (to float rounding) wherever shares were written; a node entry no window covers is
    listed on its own with ``sum_j`` 0. Each side is read by its own boundary
    (:func:`joulestat.store.read_rule.boundary_of`).
    """
    ticks, shares = TickEnergy, JOB_ENERGY.c
    minutes, job_minutes = MinuteEnergy, JOB_MINUTE_ENERGY.c
    node_raw = (select(ticks.t_end_ms, ticks.component, ticks.device, ticks.energy_j)
                .where(ticks.node == node))
    node_rolled = (select(minute_end_ms(minutes.minute_start_s), minutes.component,
                          minutes.device, minutes.energy_j)
                   .where(minutes.node == node))
    job_raw = (select(shares.t_end_ms, shares.component, shares.device,
                      func.min(shares.t_start_ms),
                      func.sum(shares.dynamic_j + shares.idle_j))
               .where(shares.node == node)
               .group_by(shares.t_end_ms, shares.component, shares.device))
    job_rolled = (select(minute_end_ms(job_minutes.minute_start_s), job_minutes.component,
                         job_minutes.device,
                         job_minutes.minute_start_s * literal_column("1000"),
                         func.sum(job_minutes.dynamic_j + job_minutes.idle_j))
                  .where(job_minutes.node == node)
                  .group_by(job_minutes.minute_start_s, job_minutes.component,
                            job_minutes.device))
    entries: defaultdict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    windows: defaultdict[tuple[str, str], list[tuple[int, int, float]]] = defaultdict(list)
    with engine.connect() as connection:
        for t, c, d, energy_j in connection.execute(
                raw_and_rolled(node_raw, TICK_ENERGY, node_rolled, MINUTE_ENERGY)):
            entries[(c, d)].append((int(t), float(energy_j)))
        for t, c, d, start_ms, sum_j in connection.execute(
                raw_and_rolled(job_raw, JOB_ENERGY, job_rolled, JOB_MINUTE_ENERGY)):
            windows[(c, d)].append((int(t), int(start_ms), float(sum_j)))
    result = []
    for key in sorted(set(entries) | set(windows)):
        component, device = key
        pending = sorted(entries.get(key, []))
        i = 0
        for end_ms, start_ms, sum_j in sorted(windows.get(key, [])):
            while i < len(pending) and pending[i][0] <= start_ms:  # before the window
                result.append((pending[i][0], component, device, pending[i][1], 0.0))
                i += 1
            node_j = 0.0
            while i < len(pending) and pending[i][0] <= end_ms:
                node_j += pending[i][1]
                i += 1
            result.append((end_ms, component, device, node_j, sum_j))
        result += [(t, component, device, energy_j, 0.0) for t, energy_j in pending[i:]]
    return sorted(result)
