"""Reads that only reports need: where a job's energy came from, its rows in time, and
which jobs a period covers.

The report has to say, per component, whether a job's joules were measured (``rapl``,
``nvml_energy``) or estimated (``model:...``) or imported (``import:...``), and draw
power over time. Both read the same rows :mod:`agent.store.job_queries` sums: raw
``job_energy`` rows after each node's prune boundary, minute rollups up to it, so the
chart and the totals never disagree about which rows count.

``job_minute_energy`` has no ``source`` column; a rolled-up minute's provenance is the
``source`` of the node's ``minute_energy`` row for the same minute, component and
device (the rollup joins differing sources with ``+``, split again here).
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import and_, func, literal_column, or_, select, union_all
from sqlalchemy.engine import Engine

from agent.store.job_queries import pruned_last_minute_s as _pruned_last_minute_s
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOBS,
    MINUTE_ENERGY,
    NODES,
)

MINUTE_S = 60


def job_sources(engine: Engine, job_id: str, node: str | None = None) -> dict[str, list[str]]:
    """``{component: [source, ...]}`` of the rows that make up ``job_id``'s energy.

    Sorted and de-duplicated; ``node`` restricts it to one node of the job.
    """
    raw, rolled, minutes, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw_query = (
        select(raw.component, raw.source)
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.job_id == job_id,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms))
        .distinct()
    )
    rolled_query = (
        select(rolled.component, minutes.source)
        .select_from(
            JOB_MINUTE_ENERGY
            .join(NODES, nodes.node == rolled.node)
            .join(MINUTE_ENERGY, and_(
                minutes.node == rolled.node, minutes.minute_start_s == rolled.minute_start_s,
                minutes.component == rolled.component, minutes.device == rolled.device)))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= _pruned_last_minute_s())
        .distinct()
    )
    if node is not None:
        raw_query = raw_query.where(raw.node == node)
        rolled_query = rolled_query.where(rolled.node == node)
    found: defaultdict[str, set[str]] = defaultdict(set)
    with engine.connect() as connection:
        for component, source in connection.execute(union_all(raw_query, rolled_query)):
            found[component].update(part for part in str(source).split("+") if part)
    return {component: sorted(sources) for component, sources in sorted(found.items())}


def job_energy_rows(
    engine: Engine, job_id: str
) -> list[tuple[str, float, float, str, float]]:
    """``(node, t_start_s, t_end_s, component, energy_j)`` of every row of ``job_id``,
    summed over devices, in time order.

    Unlike :func:`agent.store.job_queries.job_energy_series` each row keeps its start,
    so a chart can spread a long row (a minute rollup, an imported aggregate) over the
    time it covers instead of piling it on its end.
    """
    raw, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    raw_query = (
        select(raw.node, raw.t_start_ms, raw.t_end_ms, raw.component,
               func.sum(raw.dynamic_j + raw.idle_j))
        .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
        .where(raw.job_id == job_id,
               or_(nodes.raw_pruned_until_ms.is_(None),
                   raw.t_end_ms > nodes.raw_pruned_until_ms))
        .group_by(raw.node, raw.t_start_ms, raw.t_end_ms, raw.component)
    )
    minute_start_ms = rolled.minute_start_s * literal_column("1000")
    minute_end_ms = (rolled.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_query = (
        select(rolled.node, minute_start_ms, minute_end_ms, rolled.component,
               func.sum(rolled.dynamic_j + rolled.idle_j))
        .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= _pruned_last_minute_s())
        .group_by(rolled.node, rolled.minute_start_s, rolled.component)
    )
    with engine.connect() as connection:
        rows = connection.execute(union_all(raw_query, rolled_query)).all()
    return sorted((str(node), int(start_ms) / 1000, int(end_ms) / 1000, str(component),
                   float(energy_j))
                  for node, start_ms, end_ms, component, energy_j in rows)


def job_ids_active_since(engine: Engine, since_s: float | None = None) -> list[str]:
    """Ids of the jobs that ran at some point after ``since_s`` (epoch seconds): still
    running, or ended after it. All jobs when ``since_s`` is None. By start time."""
    jobs = JOBS.c
    query = select(jobs.id).order_by(jobs.created_s, jobs.id)
    if since_s is not None:
        still_running = select(JOB_NODES.c.job_id).where(JOB_NODES.c.ended_s.is_(None))
        query = query.where(or_(jobs.ended_s.is_(None), jobs.ended_s >= since_s,
                                jobs.id.in_(still_running)))
    with engine.connect() as connection:
        return [str(job_id) for (job_id,) in connection.execute(query)]
