"""Reads of where energy figures come from, and how far to trust them.

Every stored row names its source: measured (``rapl``, ``nvml_energy``...), estimated
(``model:...``), replayed or imported (``import:...``). Reports, ``compare`` and the
dashboard say per component which it was, so these reads return energy by source, the
sources of a job or a node, the share of a node's CPU energy no job tracked, and which
nodes hold only imported snapshots. Energy follows the rule of
:mod:`joulestat.store.schema` (raw rows after each node's prune boundary, rollups up to
it), the rows the totals sum.

A job's energy by source comes from its totals, which keep the raw shares' source,
and the raw shares after them; ``job_minute_energy`` has no
``source`` column. A node's minute rollup names a minute whose source changed ``a+b``
(split again where a caller needs single sources).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, exists, func, literal_column, or_, select
from sqlalchemy.engine import Engine

from joulestat.core.tick import Component
from joulestat.store.jobs import part_energy_by_source
from joulestat.store.nodes import node_window_sums
from joulestat.store.read_rule import ends_within, minute_ends_within, raw_and_rolled
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    MINUTE_ENERGY,
    NODE_DEVICES,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
    ms,
)


@dataclass(frozen=True, slots=True)
class SourceEnergy:
    """Energy of one node's component from one provenance source (``rapl``, ``model:…``)."""

    node: str
    component: str
    source: str
    energy_j: float


def energy_by_source(engine: Engine, since_s: float, until_s: float) -> list[SourceEnergy]:
    """Node energy over ``(since_s, until_s]`` per node, component and source.

    Minute rollups name a minute whose source changed ``a+b``; callers decide how to
    classify those.
    """
    totals = node_window_sums(engine, since_s, until_s, "source",
                              TICK_ENERGY.c.energy_j, MINUTE_ENERGY.c.energy_j)
    return [SourceEnergy(n, c, s, j) for (n, c, s), j in sorted(totals.items())]


@dataclass(frozen=True, slots=True)
class JobSourceEnergy:
    """A job's energy on one node's component from one source, above idle and idle."""

    job_id: str
    node: str
    component: str
    source: str
    dynamic_j: float
    idle_j: float

    @property
    def energy_j(self) -> float:
        return self.dynamic_j + self.idle_j


def jobs_energy_by_source(engine: Engine, job_ids: Iterable[str]
                          ) -> dict[str, list[JobSourceEnergy]]:
    """Per job of ``job_ids``: its energy per node, component and source, above idle and
    idle apart (what a figure's bounds are made of, :mod:`joulestat.reports.bounds`):
    the job totals, kept by source, plus the raw shares after them
    (:func:`joulestat.store.jobs.part_energy_by_source`). One statement for all the jobs,
    and as cheap as the job lists' energy: a page comparing thousands reads once."""
    wanted = sorted(set(job_ids))
    found: dict[str, list[JobSourceEnergy]] = {job_id: [] for job_id in wanted}
    if not wanted:
        return found
    with engine.connect() as connection:
        totals = part_energy_by_source(connection, wanted, None)
    for (job_id, node, component, source), (dynamic_j, idle_j) in sorted(totals.items()):
        found[job_id].append(JobSourceEnergy(job_id, node, component, source, dynamic_j,
                                             idle_j))
    return found


def job_energy_by_source(engine: Engine, job_id: str) -> list[SourceEnergy]:
    """A job's energy per node, component and source (:func:`jobs_energy_by_source`)."""
    return [SourceEnergy(row.node, row.component, row.source, row.energy_j)
            for row in jobs_energy_by_source(engine, [job_id])[job_id]]


def job_sources(engine: Engine, job_id: str, node: str | None = None) -> dict[str, list[str]]:
    """``{component: [source, ...]}`` of the rows that make up ``job_id``'s energy.

    Sorted and de-duplicated, ``a+b`` split; ``node`` restricts it to one node of the job.
    """
    found: defaultdict[str, set[str]] = defaultdict(set)
    with engine.connect() as connection:
        totals = part_energy_by_source(connection, [job_id], node)
    for (_job, _node, component, source) in totals:
        found[component].update(part for part in source.split("+") if part)
    return {component: sorted(sources) for component, sources in sorted(found.items())}


def node_sources(engine: Engine, nodes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """node -> the sources its energy comes from: the devices its agent registered, or,
    for a node known only from imports, the sources of its imported rows (read per node,
    a seek on the energy tables' keys). What ``compare`` classifies a row's energy by,
    without reading every job's rows."""
    wanted = sorted(set(nodes))
    found: defaultdict[str, set[str]] = defaultdict(set)
    devices, ticks, minutes = NODE_DEVICES.c, TICK_ENERGY.c, MINUTE_ENERGY.c
    with engine.connect() as connection:
        for node, source in connection.execute(
                select(devices.node, devices.source).where(devices.node.in_(wanted))
                .distinct()):
            found[str(node)].add(str(source))
        for node in (n for n in wanted if n not in found):
            for table in (ticks, minutes):
                for (source,) in connection.execute(
                        select(table.source).where(table.node == node).distinct()):
                    found[node].update(p for p in str(source).split("+") if p)
    return {node: tuple(sorted(found.get(node, ()))) for node in wanted}


def imported_nodes(engine: Engine) -> set[str]:
    """Nodes that exist only through ``joulestat import``: no agent ever registered
    their devices, and their rows carry an import device. They hold exported snapshots,
    not live readings, so the Overview never calls them reporting. (The row checks are
    per node, a seek on the energy tables' keys, and only for nodes without devices.)"""
    nodes, devices, ticks, minutes = NODES.c, NODE_DEVICES.c, TICK_ENERGY.c, MINUTE_ENERGY.c
    has_agent = select(devices.node).distinct()
    query = select(nodes.node).where(
        nodes.node.not_in(has_agent),
        or_(exists().where(ticks.node == nodes.node, ticks.device.like("import:%")),
            exists().where(minutes.node == nodes.node, minutes.device.like("import:%"))))
    with engine.connect() as connection:
        return {str(node) for (node,) in connection.execute(query)}


def _untracked_sums(table: Any, job_id: Any) -> Any:
    """(dynamic joules of the unattributed rows, all dynamic joules, unattributed rows)."""
    untracked = job_id == UNATTRIBUTED
    return select(func.sum(case((untracked, table.dynamic_j), else_=literal_column("0.0"))),
                  func.sum(table.dynamic_j),
                  func.sum(case((untracked, literal_column("1")), else_=literal_column("0"))))


def untracked_cpu_j(engine: Engine, node: str, since_s: float, until_s: float
                    ) -> tuple[float, float] | None:
    """(dynamic CPU joules no job received, all dynamic CPU joules) on ``node`` over
    ``(since_s, until_s]``; None when the store holds no unattributed CPU row there
    (an imported node: its file did not carry the other processes, so the share is
    unknown, not zero).

    Attribution splits a tick's dynamic CPU energy by each job's share of the node's
    busy CPU time and leaves the rest unattributed (job ``''``), so the first over the
    second is the share of the node's busy CPU time that belonged to processes no job
    tracked: on a shared node, how far to trust a job's CPU figure.
    """
    since_ms, until_ms = ms(since_s), ms(until_s)
    raw, rolled = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c
    raw_query = _untracked_sums(raw, raw.job_id).where(
        raw.node == node, raw.component == Component.CPU,
        *ends_within(raw.t_end_ms, since_ms, until_ms))
    rolled_query = _untracked_sums(rolled, rolled.job_id).where(
        rolled.node == node, rolled.component == Component.CPU,
        *minute_ends_within(rolled.minute_start_s, since_ms, until_ms))
    untracked_j = total_j = 0.0
    rows = 0
    with engine.connect() as connection:
        for part_untracked, part_total, part_rows in connection.execute(
                raw_and_rolled(raw_query, JOB_ENERGY, rolled_query, JOB_MINUTE_ENERGY)):
            untracked_j += float(part_untracked or 0.0)
            total_j += float(part_total or 0.0)
            rows += int(part_rows or 0)
    return (untracked_j, total_j) if rows else None
