"""Per-job totals: what each (job, node) part used and counted, for job lists.

A job's energy per component and its unit counts are ``job_energy_totals`` and
``job_unit_totals`` (each node's settled past, one row per job, node and component or
unit; see :mod:`agent.store.rollup`) plus the raw rows after that node's
``nodes.totals_until_ms``, in one ``UNION ALL`` statement: one row per part for the
past and a few minutes of raw rows for the present, whatever the retention. The
unattributed ``''`` rows never count toward a job.

Core table clauses only: :func:`part_energy` and :func:`part_units` also run in the
agent at start-up (restoring running jobs), within its memory budget.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Select, and_, func, literal_column, select, union_all
from sqlalchemy.engine import Connection

from agent.store.tables import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    NODES,
    UNATTRIBUTED,
)

# job_id -> (node, component) -> [dynamic_j, idle_j]; job_id -> (node, unit) -> count.
# Keyed by job first: a list of ten thousand jobs looks each one up, never scans.
Energy = dict[str, dict[tuple[str, str], list[float]]]
Units = dict[str, dict[tuple[str, str], float]]


def settled_until_ms() -> Any:
    """The joined node's totals boundary; -1 where nothing is summed yet, so that every
    raw row is after it."""
    return func.coalesce(NODES.c.totals_until_ms, literal_column("-1"))


def _recent_rows(table: Any, keys: list[Any], sums: list[Any], job_ids: Select[Any] | None,
                 node: str | None) -> Select[Any]:
    """The raw rows of ``table`` that each (job, node) part has after its node's totals
    boundary: ``sums`` per job, node and ``keys``.

    The parts are a MATERIALIZED common table expression so that SQLite (which keeps no
    statistics) loops over them and seeks each part's few recent rows by primary key;
    as a plain join it moves the job filter onto ``table`` and walks every raw row of
    the wanted jobs, the whole retention.
    """
    parts = (select(JOB_NODES.c.job_id, JOB_NODES.c.node,
                    settled_until_ms().label("after_ms"))
             .select_from(JOB_NODES.join(NODES, NODES.c.node == JOB_NODES.c.node)))
    if job_ids is not None:
        parts = parts.where(JOB_NODES.c.job_id.in_(job_ids))
    if node is not None:
        parts = parts.where(JOB_NODES.c.node == node)
    cte = parts.cte("parts").prefix_with("MATERIALIZED")
    rows = table.c
    return (select(rows.job_id, rows.node, *keys, *sums)
            .select_from(cte.join(table, and_(rows.job_id == cte.c.job_id,
                                              rows.node == cte.c.node,
                                              rows.t_end_ms > cte.c.after_ms)))
            .group_by(rows.job_id, rows.node, *keys))


def _totals(table: Any, columns: list[Any], job_ids: Select[Any] | None,
            node: str | None) -> Select[Any]:
    """``columns`` of the totals ``table`` for the wanted jobs (and node); without a job
    filter, every job but the unattributed remainder (``jobs`` never holds it)."""
    query = select(table.c.job_id, table.c.node, *columns)
    query = query.where(table.c.job_id != UNATTRIBUTED if job_ids is None
                        else table.c.job_id.in_(job_ids))
    if node is not None:
        query = query.where(table.c.node == node)
    return query


def part_energy(
    connection: Connection, job_ids: Select[Any] | None, node: str | None
) -> Energy:
    """Per (job, node, component): the job totals plus the raw shares after them."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    query = union_all(
        _recent_rows(JOB_ENERGY, [raw.component],
                     [func.sum(raw.dynamic_j), func.sum(raw.idle_j)], job_ids, node),
        _totals(JOB_ENERGY_TOTALS, [totals.component, totals.dynamic_j, totals.idle_j],
                job_ids, node))
    energy: Energy = defaultdict(dict)
    for job_id, row_node, component, dynamic_j, idle_j in connection.execute(query):
        total = energy[job_id].setdefault((row_node, component), [0.0, 0.0])
        total[0] += float(dynamic_j)
        total[1] += float(idle_j)
    return energy


def part_energy_j(connection: Connection, job_ids: Select[Any]) -> dict[tuple[str, str], float]:
    """Per (job, node): joules, all components, dynamic and idle (what job lists show;
    a third of the rows :func:`part_energy` returns)."""
    raw, totals = JOB_ENERGY.c, JOB_ENERGY_TOTALS.c
    query = union_all(
        _recent_rows(JOB_ENERGY, [], [func.sum(raw.dynamic_j + raw.idle_j)], job_ids, None),
        _totals(JOB_ENERGY_TOTALS, [func.sum(totals.dynamic_j + totals.idle_j)], job_ids,
                None).group_by(totals.job_id, totals.node))
    energy: defaultdict[tuple[str, str], float] = defaultdict(float)
    for job_id, node, energy_j in connection.execute(query):
        energy[(job_id, node)] += float(energy_j)
    return energy


def part_units(connection: Connection, job_ids: Select[Any] | None, node: str | None) -> Units:
    """Per (job, node, unit): the unit totals plus the raw counts after them."""
    units, totals = JOB_UNITS.c, JOB_UNIT_TOTALS.c
    query = union_all(
        _recent_rows(JOB_UNITS, [units.unit], [func.sum(units.count)], job_ids, node),
        _totals(JOB_UNIT_TOTALS, [totals.unit, totals.count], job_ids, node))
    counts: Units = defaultdict(dict)
    for job_id, row_node, unit, count in connection.execute(query):
        per_job = counts[job_id]
        per_job[(row_node, unit)] = per_job.get((row_node, unit), 0.0) + float(count)
    return counts
