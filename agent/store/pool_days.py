"""Days of a node's ended single-node jobs, summed for a fleet's comparison by setup.

``joulestat compare`` and the Compare page pool a fleet's jobs per setup
(:mod:`joulestat.store.job_pools`). Read job by job from their totals, a week of
1,000 nodes holds 10^5 ended jobs and the read grows with them. Once a day is settled
on a node (every job that ended on it that UTC day is behind the node's totals boundary,
so its totals no longer move), the node's maintain pass sums that day here, per what a
comparison tells apart (kind, instance type, region, name, agent labels, the units the
jobs counted): ``job_pool_sums`` and ``job_pool_sources`` (energy per component and
source), and marks it done in ``job_pool_days``. A comparison then reads a summed
day's few rows per node instead of its jobs, and the rest (running jobs, the days not
summed yet, the edges of a window) job by job, in the same statement.

The day that is not over is summed too, up to its settle line (``summed_until_s``: the
node's totals boundary less :data:`SETTLE_S`), and summed again by the passes after
whenever more of its jobs have ended: read job by job until the day was summed, late in
a UTC day the day's ended jobs were half a fleet's comparison (48,000 of 98,000 parts
over 1,000 nodes at 23:30). A job that ends after the line is not one of the day's
members, so the triggers leave the day's row alone when it ends or its totals move.

The sums are derived, never kept by the write paths: each is built here from the job
totals through :mod:`joulestat.store.read_rule` (the one rule every reader uses), and
triggers of the baseline migration delete a day's ``job_pool_days`` row whenever one of
its jobs changes (its job row, a part, its energy or unit totals: a deletion, an
import, a relabel). A reader joins the sums to ``job_pool_days``, so it never reads a
day whose sums no longer hold; the day is read job by job until a later pass sums it
again (its old rows are replaced then). Only days within :data:`LOOKBACK_S` of the
boundary are (re)built; an older day that a change took out of use is read job by job.

A day's members are the node's single-node parts whose job ended that day; a job on
several nodes is never summed (its setup is named by all its nodes' types). Each sums
row keeps its runs' figures as a :class:`~joulestat.core.spread.Spread` (count, mean,
squared deviations), so the comparison's mean and spread across runs merge exactly,
whichever way a pool's runs were read.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Connection,
    Double,
    and_,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
)

from joulestat.core.spread import Spread
from joulestat.core.tick import Component
from joulestat.store.model_split import ordinary_units
from joulestat.store.read_rule import job_parts, part_energy_rows, part_unit_rows
from joulestat.store.schema import (
    DAY_S,
    JOB_NODES,
    JOB_POOL_DAYS,
    JOB_POOL_SOURCES,
    JOB_POOL_SUMS,
    JOBS,
    NODES,
    day_of,
)

# A day is summed whole once the node's totals boundary is this far past its end, and
# the day not over up to the boundary less this (its settle line): the
# writer's late windows of the day's last jobs are in their totals by then.
SETTLE_S = 300.0
# How far back a pass looks for days to sum: a week's comparison and a day more.
LOOKBACK_S = 8 * DAY_S
# Days summed per pass at most, so that a pass after a long gap stays short; the rest
# come in the passes after it.
DAYS_PER_PASS = 2
def units_key(units: list[str]) -> str:
    """The ordinary units a job counted, sorted, as ``,a,b,`` (``,`` for none): a
    reader finds the jobs that counted ``u`` as the key containing ``,u,``."""
    return "," + "".join(f"{unit}," for unit in sorted(units))


def counted_unit(units_key_column: Any, unit: str) -> Any:
    """SQL: the jobs of a summed row with ``units_key_column`` counted ``unit``."""
    return units_key_column.contains(f",{unit},", autoescape=True)


@dataclass(slots=True)
class _Group:
    """One sums row being added up."""

    runs: int = 0
    energy_j: float = 0.0
    accelerator_j: float = 0.0
    dynamic_j: float = 0.0
    held_s: float = 0.0
    units: float = 0.0
    values: list[float] = field(default_factory=list)
    first: tuple[float, str] = (math.inf, "")


@dataclass(frozen=True, slots=True)
class DayToSum:
    """A day of a node to sum: whole (``until_s`` None, the day settled) or its jobs
    that ended up to ``until_s`` (the day not over, or not settled yet)."""

    day_s: int
    until_s: float | None


def days_to_sum(connection: Connection, node: str, totals_until_ms: int | None
                ) -> list[DayToSum]:
    """What ``node``'s pass sums: the settled days within :data:`LOOKBACK_S` that some
    part ended on and that are not summed whole (oldest first, at most
    :data:`DAYS_PER_PASS`), then the day the settle line lies in, up to that line, when
    a part ended in it since it was last summed."""
    if totals_until_ms is None:
        return []
    boundary_s = totals_until_ms / 1000
    settled_s = boundary_s - SETTLE_S
    p, jobs, days = JOB_NODES.c, JOBS.c, JOB_POOL_DAYS.c
    day = day_of(jobs.ended_s)
    query = (select(day.label("day_s")).select_from(JOB_NODES.join(JOBS, jobs.id == p.job_id))
             .where(p.node == node, p.ended_s > boundary_s - LOOKBACK_S,
                    jobs.ended_s.is_not(None), day + DAY_S <= settled_s,
                    ~exists().where(days.node == node, days.day_s == day,
                                    days.summed_until_s.is_(None)))
             .distinct().order_by(day).limit(DAYS_PER_PASS))
    found = [DayToSum(int(d), None) for d in connection.execute(query).scalars()]
    current_s = int(settled_s // DAY_S * DAY_S)
    summed = connection.execute(select(days.summed_until_s).where(
        days.node == node, days.day_s == current_s)).first()
    if summed is not None and summed.summed_until_s is None:
        return found  # summed whole (the settle line at midnight)
    since = p.ended_s >= current_s if summed is None else p.ended_s > summed.summed_until_s
    ended = select(p.job_id).where(p.node == node, since, p.ended_s <= settled_s).limit(1)
    if connection.execute(ended).first() is not None:
        found.append(DayToSum(current_s, settled_s))
    return found


def sum_day(connection: Connection, node: str, day: DayToSum, totals_until_ms: int) -> bool:
    """Sum ``node``'s ``day`` (see the module's docstring) in the caller's
    transaction; False (nothing written) while one of its parts is still running or
    not settled."""
    day_s = day.day_s
    p, jobs = JOB_NODES.c, JOBS.c
    other = JOB_NODES.alias("other_part")
    ends = [jobs.ended_s >= day_s, jobs.ended_s < day_s + DAY_S]
    if day.until_s is not None:
        ends.append(jobs.ended_s <= day.until_s)
    members = (job_parts(None, node)
               .add_columns(p.instance_type, p.region, p.started_s, p.ended_s, jobs.created_s,
                            jobs.kind, jobs.name, jobs.agent_labels)
               .join(JOBS, jobs.id == p.job_id)
               .where(*ends,
                      ~exists().where(other.c.job_id == p.job_id, other.c.node != p.node))
               .cte("members").prefix_with("MATERIALIZED"))
    m = members.c
    rows = connection.execute(select(
        m.job_id, m.instance_type, m.region, m.started_s, m.ended_s, m.created_s, m.kind,
        m.name, m.agent_labels)).all()
    settled_s = totals_until_ms / 1000 - SETTLE_S
    if any(row.ended_s is None or row.ended_s > settled_s for row in rows):
        return False
    energy = _energy(connection, members)
    counts = _counts(connection, members)
    groups: dict[tuple[Any, ...], _Group] = defaultdict(_Group)
    sources: dict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        per_source = energy.get(row.job_id, {})
        energy_j = sum(e for e, _d in per_source.values())
        counted = {u: c for u, c in counts.get(row.job_id, {}).items() if c > 0}
        key = units_key(list(counted))
        where = (row.kind, row.instance_type, row.region, row.name, row.agent_labels, key)
        for unit, count in [("", 0.0), *counted.items()]:
            group = groups[(*where, unit)]
            group.runs += 1
            group.energy_j += energy_j
            group.accelerator_j += sum(e for (component, _s), (e, _d) in per_source.items()
                                       if component == Component.ACCELERATOR)
            group.dynamic_j += sum(d for _e, d in per_source.values())
            group.held_s += max(row.ended_s - row.started_s, 0.0)
            group.units += count
            group.values.append(energy_j / count if count > 0 else energy_j)
            group.first = min(group.first, (row.created_s, row.job_id))
        for (component, source), (e, d) in per_source.items():
            summed = sources[(row.kind, row.instance_type, key, component, source)]
            summed[0] += e
            summed[1] += d
    _replace(connection, node, day, len(rows), groups, sources)
    return True


def _energy(connection: Connection, members: Any
            ) -> dict[str, dict[tuple[str, str], tuple[float, float]]]:
    """Per member job, (energy, energy above idle) per (component, source): its totals
    and raw rows after them, the read rule's (:mod:`joulestat.store.read_rule`)."""
    both = part_energy_rows(members, [members.c.job_id]).subquery("member_energy")
    b = both.c
    found: dict[str, dict[tuple[str, str], tuple[float, float]]] = defaultdict(dict)
    for job_id, component, source, dynamic_j, idle_j in connection.execute(
            select(b.job_id, b.component, b.source, func.sum(b.dynamic_j), func.sum(b.idle_j))
            .group_by(b.job_id, b.component, b.source)):
        found[job_id][(component, source)] = (dynamic_j + idle_j, dynamic_j)
    return found


def _counts(connection: Connection, members: Any) -> dict[str, dict[str, float]]:
    """Per member job, its count of each ordinary unit (totals and raw rows after)."""
    both = part_unit_rows(members, [members.c.job_id], ordinary_units).subquery("member_units")
    b = both.c
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for job_id, unit, count in connection.execute(
            select(b.job_id, b.unit, func.sum(b.count)).group_by(b.job_id, b.unit)):
        found[job_id][unit] = float(count)
    return found


def _replace(connection: Connection, node: str, day: DayToSum, parts: int,
             groups: dict[tuple[Any, ...], _Group],
             sources: dict[tuple[Any, ...], list[float]]) -> None:
    """The day's rows, replacing any left from before a change took it out of use or
    from the pass before (a day not over)."""
    day_s = day.day_s
    for table in (JOB_POOL_SUMS, JOB_POOL_SOURCES, JOB_POOL_DAYS):
        connection.execute(delete(table).where(table.c.node == node, table.c.day_s == day_s))
    if groups:
        connection.execute(insert(JOB_POOL_SUMS), [
            {"node": node, "day_s": day_s, "kind": kind, "instance_type": itype,
             "region": region, "name": name, "agent_labels": labels, "units_key": key,
             "unit": unit, "runs": g.runs, "energy_j": g.energy_j,
             "accelerator_j": g.accelerator_j, "dynamic_j": g.dynamic_j,
             "held_s": g.held_s, "units": g.units, "value_mean": spread.mean,
             "value_m2": spread.m2, "first_created_s": g.first[0], "first_job_id": g.first[1]}
            for (kind, itype, region, name, labels, key, unit), g in groups.items()
            for spread in [Spread.of(g.values)]])
    if sources:
        connection.execute(insert(JOB_POOL_SOURCES), [
            {"node": node, "day_s": day_s, "kind": kind, "instance_type": itype,
             "units_key": key, "component": component, "source": source,
             "energy_j": e, "dynamic_j": d}
            for (kind, itype, key, component, source), (e, d) in sources.items()])
    connection.execute(insert(JOB_POOL_DAYS).values(node=node, day_s=day_s, parts=parts,
                                                    summed_until_s=day.until_s))


def sum_days(connection: Connection, node: str, totals_until_ms: int | None) -> int:
    """Sum the days :func:`days_to_sum` finds (the maintain pass's last step); returns
    how many were summed."""
    summed = 0
    for day in days_to_sum(connection, node, totals_until_ms):
        assert totals_until_ms is not None
        summed += sum_day(connection, node, day, totals_until_ms)
    return summed


def summed_day_in(node: Any, ended_s: Any, since_s: float | None, until_s: float | None
                  ) -> Any:
    """SQL: a single-node part on ``node`` whose job ended at ``ended_s`` lies in a
    summed day wholly inside the window ``(since_s, until_s]`` (each of its jobs
    overlaps the window), and up to the day's ``summed_until_s`` where it is summed only
    so far, so it is read from the sums, not job by job."""
    days = JOB_POOL_DAYS.c
    return _in_window(exists().where(days.node == node, days.day_s == day_of(ended_s),
                                     or_(days.summed_until_s.is_(None),
                                         ended_s <= days.summed_until_s)),
                      since_s, until_s)


def maybe_unsummed(ended_s: Any, since_s: float | None, until_s: float | None) -> Any:
    """SQL: a part of ``job_nodes`` that ended at ``ended_s`` may lie on no summed day
    of the window ``(since_s, until_s]`` (:func:`summed_day_in` says for sure): it runs,
    or it ended at or after the earliest end that any node's summed days leave out.
    Written on the end alone, before the exact test, so that finding a fleet's few
    unsummed ended parts reads each part's end once instead of looking up its day
    (95 ms against 150 over a week of 1,000 nodes, 398,000 parts, timed in psql).

    Per node, the ends its summed days leave out start at each summed stretch's end
    (a day not followed by the next, or summed only up to its ``summed_until_s``) and,
    before its first summed day, at its earliest ended part (one seek of
    ``ix_job_nodes_node_ended_s`` a node); a node with no summed day leaves out all of
    its ends. The bound is the least of these over the nodes; NULL (no ended part is
    left out) keeps the running parts only. A part that ended at or before ``since_s``
    overlaps no part of the window, so it is not looked for."""
    days, parts, nodes = JOB_POOL_DAYS.c, JOB_NODES.alias("ended_part").c, NODES.c
    day_end = func.coalesce(days.summed_until_s, days.day_s + DAY_S)
    stretch = _in_window(select(
        day_end.label("end_s"),
        func.lead(days.day_s).over(partition_by=days.node, order_by=days.day_s).label("next_s"),
    ), since_s, until_s).subquery("summed_stretches")
    firsts = _in_window(select(days.node, func.min(days.day_s).label("first_s"))
                        .group_by(days.node), since_s, until_s).subquery("first_summed")
    first_s = func.coalesce(firsts.c.first_s, literal(1e18, Double))
    earliest = (select(func.min(parts.ended_s))
                .where(parts.node == nodes.node, parts.ended_s.is_not(None),
                       parts.ended_s < first_s,
                       *([] if since_s is None else [parts.ended_s > since_s]))
                .scalar_subquery())
    starts = union_all(
        select(stretch.c.end_s.label("start_s")).where(or_(stretch.c.next_s.is_(None),
                                                           stretch.c.next_s > stretch.c.end_s)),
        select(earliest.label("start_s"))
        .select_from(NODES.outerjoin(firsts, firsts.c.node == nodes.node)),
    ).subquery("unsummed_starts")
    bound = select(func.min(starts.c.start_s)).scalar_subquery()
    after = [ended_s >= bound] if since_s is None else [ended_s >= bound, ended_s > since_s]
    return or_(ended_s.is_(None), and_(*after))


def summed_days(since_s: float | None, until_s: float | None) -> Any:
    """The summed (node, day) pairs wholly inside ``(since_s, until_s]``, a select of
    ``job_pool_days`` (:func:`summed_day_in`)."""
    days = JOB_POOL_DAYS.c
    return _in_window(select(days.node, days.day_s), since_s, until_s)


def _in_window(query: Any, since_s: float | None, until_s: float | None) -> Any:
    """``query`` kept to the summed days wholly inside ``(since_s, until_s]``: the day
    after ``since_s``, and its last summed end (the day's end, or ``summed_until_s``) at
    or before ``until_s``."""
    days = JOB_POOL_DAYS.c
    if since_s is not None:
        query = query.where(days.day_s > since_s)
    if until_s is not None:
        query = query.where(func.coalesce(days.summed_until_s, days.day_s + DAY_S) <= until_s)
    return query
