"""Ended single-node jobs folded into sums per node and day, for comparisons over a fleet.

A comparison by setup (``joulestat compare --by instance_type``, the Compare page)
adds up a window's jobs per instance type (:mod:`joulestat.store.job_pools`). Read from
each job's totals, that grows with the jobs: 3.5 s per 124,200 jobs on PostgreSQL, ten
seconds or more for a fleet's week (issue 28). A job that has ended on one node, and
whose node's totals boundary is past its end by :data:`FOLD_AFTER_MS`, no longer changes:
the writer refuses rows behind the boundary and a tick is at most a minute long. So the
node's maintain pass (:func:`fold_settled`) marks such parts with the UTC day of their
end (``job_nodes.pooled_day_s``) and adds them to that (node, day)'s rows in
``job_day_sums`` and ``job_day_sources`` (agent/store/schema.py): per kind, instance
type, region, name, agent labels and set of units counted, the jobs' runs, energy, held
time, units, and their values' sum and sum of squares, for each unit and per run; per
component and source their energy. A comparison reads those rows for the days its
window holds whole, and the other jobs (running, not yet settled, on several nodes, on
a day the window cuts) one by one as before.

Running single-node jobs are kept the same way, as of their node's totals boundary: each
maintain pass rebuilds the node's rows of :data:`RUNNING_DAY_S`, a day after every real
one, from the running parts with something settled (:func:`fold_running`), their energy
and units the totals up to the boundary and their held time up to it. That is what a
fleet comparison counts of a running job (:mod:`joulestat.store.job_pools`), so over
50,000 running jobs it reads a few thousand rows instead of every job's totals.

What keeps the sums true: a (node, day)'s rows change only in the transaction that
marks or unmarks its parts (a fold adds exactly the parts it marks); and whatever
writes a job (the agent's writer, an import, a delete) first calls :func:`unpool` on it
in its own transaction, which deletes the sums of the days holding it and unmarks their
parts, so the next maintain pass folds them again as they now are. A sum therefore
always holds exactly the parts marked with its (node, day).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, exists, select, update
from sqlalchemy.engine import Connection

from joulestat.core.tick import Component
from joulestat.store.jobs import part_energy_by_source, part_units
from joulestat.store.schema import (
    JOB_DAY_SOURCES,
    JOB_DAY_SUMS,
    JOB_ENERGY_TOTALS,
    JOB_NODES,
    JOBS,
    MINUTE_MS,
    NODES,
    one_of,
)

# How far the node's totals boundary must be past a part's end before it is folded: a
# tick (at most 60 s, --interval) that began before the end may end after it, and its
# shares reach the store at the next flush (at most 300 s, --flush-interval) or are
# refused once behind the boundary.
FOLD_AFTER_MS = 5 * MINUTE_MS
DAY_S = 86_400
# Parts one maintain pass folds at most, the earliest ended first: the first pass after
# migration 0012 on a node with a long history works it off over several passes instead
# of holding the node's row (which its writer's flushes wait on) for one long one.
MAX_FOLD_PARTS = 20_000
# How many days back a maintain pass looks for folded jobs that gained another node.
RECHECK_DAYS = 2
# The day that holds a node's running parts (:func:`fold_running`): after every real day,
# so that a window's ``since`` never cuts it (a running job matches every ``since``).
RUNNING_DAY_S = 2**53
# Parts marked or read per statement (SQLite's bound parameters are limited).
_CHUNK = 5_000


def day_of(t_s: float) -> int:
    """The UTC day (its first second) that ``t_s`` lies in."""
    return math.floor(t_s / DAY_S) * DAY_S


def units_key(units: Sequence[str]) -> str:
    """The set of units a job counted, as ``job_day_sums.units_key`` keeps it: ",a,b,"
    (sorted; "," for none), so "counted ``u``" is a match of ",u," in SQL."""
    return "," + "".join(f"{unit}," for unit in sorted(units))


def unpool(connection: Connection, job_ids: Sequence[str]) -> int:
    """Take apart the day sums that hold any of ``job_ids``: delete them and unmark
    every part they held, so the next maintain pass folds those parts again. Called by
    whatever writes these jobs, before it writes, in its transaction; returns how many
    (node, day) sums went."""
    if not job_ids:
        return 0
    parts = JOB_NODES.c
    pooled = (select(parts.node, parts.pooled_day_s)
              .where(one_of(parts.job_id, list(job_ids)), parts.pooled_day_s.is_not(None))
              .distinct())
    found = connection.execute(pooled).all()
    if not found:
        return 0  # the usual case: no lock taken
    # Their nodes' rows, in node order, as a maintain pass locks its node before it
    # folds (PostgreSQL; SQLite has one writer); then the days, as they are now.
    connection.execute(
        select(NODES.c.node).where(NODES.c.node.in_(sorted({str(n) for n, _day in found})))
        .order_by(NODES.c.node).with_for_update()).all()
    days = connection.execute(pooled).all()
    for node, day_s in days:
        _clear(connection, str(node), int(day_s))
        connection.execute(update(JOB_NODES)
                           .where(parts.node == node, parts.pooled_day_s == day_s)
                           .values(pooled_day_s=None))
    return len(days)


def _clear(connection: Connection, node: str, day_s: int) -> None:
    for table in (JOB_DAY_SUMS, JOB_DAY_SOURCES):
        connection.execute(delete(table).where(table.c.node == node, table.c.day_s == day_s))


def fold_settled(connection: Connection, node: str, totals_until_ms: int | None) -> int:
    """Fold ``node``'s settled parts into its day sums (see the module's docstring):
    ended single-node jobs whose end is :data:`FOLD_AFTER_MS` or more before the node's
    totals boundary and that no sum holds yet (at most :data:`MAX_FOLD_PARTS`), added
    to the day each ended on. Runs in the node's maintain transaction, which holds the
    node's row (one fold of a node at once); returns how many parts it folded."""
    if totals_until_ms is None:
        return 0
    parts, jobs = JOB_NODES.c, JOBS.c
    other = JOB_NODES.alias("other_parts")
    # A job that gained a part on another node while a recent pass folded it (another
    # node's writer, whose transaction could not yet see the fold, and so did not take
    # it apart) is no longer a single-node job: out of the sums, it is read one by one.
    # Only the last days are looked at, so a pass costs the same whatever the history.
    unpool(connection, list(connection.execute(
        select(parts.job_id).where(
            parts.node == node,
            parts.pooled_day_s >= day_of(totals_until_ms / 1000) - RECHECK_DAYS * DAY_S,
            exists().where(other.c.job_id == parts.job_id, other.c.node != parts.node))
    ).scalars()))
    settled = connection.execute(
        select(parts.job_id, parts.ended_s).where(
            parts.node == node, parts.pooled_day_s.is_(None), parts.ended_s.is_not(None),
            parts.ended_s * 1000 + FOLD_AFTER_MS <= totals_until_ms,
            ~exists().where(other.c.job_id == parts.job_id, other.c.node != parts.node),
            exists().where(jobs.id == parts.job_id, jobs.status == "ended"))
        .order_by(parts.ended_s, parts.job_id).limit(MAX_FOLD_PARTS)).all()
    by_day: defaultdict[int, list[str]] = defaultdict(list)
    for job_id, ended_s in settled:
        by_day[day_of(float(ended_s))].append(str(job_id))
    for day_s, ids in sorted(by_day.items()):
        for start in range(0, len(ids), _CHUNK):
            connection.execute(
                update(JOB_NODES)
                .where(parts.node == node, one_of(parts.job_id, ids[start:start + _CHUNK]))
                .values(pooled_day_s=day_s))
        add_to_day(connection, node, day_s, ids)
    return len(settled)


def fold_running(connection: Connection, node: str, totals_until_ms: int | None) -> int:
    """Rebuild ``node``'s sums of :data:`RUNNING_DAY_S`: its running single-node jobs
    that have settled totals, counted up to the node's totals boundary (energy and units
    from the totals, held time up to the boundary). Runs in the node's maintain pass,
    after the boundary moved and :func:`fold_settled`; only the parts that started or
    stopped running since the last pass are marked or unmarked. Returns how many parts
    the rows hold."""
    if totals_until_ms is None:
        return 0
    parts, totals = JOB_NODES.c, JOB_ENERGY_TOTALS.c
    other = JOB_NODES.alias("other_parts")
    wanted = {str(job_id) for job_id in connection.execute(
        select(parts.job_id).where(
            parts.node == node, parts.ended_s.is_(None),
            parts.pooled_day_s.is_(None) | (parts.pooled_day_s == RUNNING_DAY_S),
            ~exists().where(other.c.job_id == parts.job_id, other.c.node != parts.node),
            exists().where(totals.job_id == parts.job_id, totals.node == parts.node))
    ).scalars()}
    marked = {str(job_id) for job_id in connection.execute(
        select(parts.job_id).where(parts.node == node, parts.pooled_day_s == RUNNING_DAY_S)
    ).scalars()}
    _clear(connection, node, RUNNING_DAY_S)
    for ids, day_s in ((sorted(marked - wanted), None), (sorted(wanted - marked),
                                                         RUNNING_DAY_S)):
        for start in range(0, len(ids), _CHUNK):
            connection.execute(
                update(JOB_NODES)
                .where(parts.node == node, one_of(parts.job_id, ids[start:start + _CHUNK]))
                .values(pooled_day_s=day_s))
    if wanted:
        add_to_day(connection, node, RUNNING_DAY_S, sorted(wanted),
                   held_until_s=totals_until_ms / 1000)
    return len(wanted)


@dataclass
class _Group:
    """One row of ``job_day_sums`` being added up."""

    runs: int = 0
    energy_j: float = 0.0
    accelerator_j: float = 0.0
    dynamic_j: float = 0.0
    held_s: float = 0.0
    units: float = 0.0
    value_sum: float = 0.0
    value_squares: float = 0.0
    first: tuple[float, str] = (math.inf, "")
    last_created_s: float = -math.inf

    def add(self, other: _Group) -> None:
        self.runs += other.runs
        self.energy_j += other.energy_j
        self.accelerator_j += other.accelerator_j
        self.dynamic_j += other.dynamic_j
        self.held_s += other.held_s
        self.units += other.units
        self.value_sum += other.value_sum
        self.value_squares += other.value_squares
        self.first = min(self.first, other.first)
        self.last_created_s = max(self.last_created_s, other.last_created_s)


# job_day_sums' key: kind, instance type, region, name, agent labels, units key, unit.
_SumKey = tuple[str, str, str, str, str, str, str]
# job_day_sources' key: kind, instance type, units key, component, source.
_SourceKey = tuple[str, str, str, str, str]


@dataclass
class _Day:
    """A (node, day)'s rows being added up: sums, and (energy, dynamic) per source."""

    sums: dict[_SumKey, _Group] = field(default_factory=dict)
    sources: dict[_SourceKey, list[float]] = field(default_factory=dict)

    def add_source(self, key: _SourceKey, energy_j: float, dynamic_j: float) -> None:
        total = self.sources.setdefault(key, [0.0, 0.0])
        total[0] += energy_j
        total[1] += dynamic_j


def add_to_day(connection: Connection, node: str, day_s: int, job_ids: Sequence[str],
               held_until_s: float | None = None) -> None:
    """Add the parts of ``job_ids`` on ``node`` (marked with ``day_s``) to the (node,
    day)'s sums: their rows are read, added to, and written back. A maintain pass adds
    the few jobs that ended since the last, not the whole day again. A running part is
    held up to ``held_until_s`` (its node's totals boundary)."""
    day = _stored(connection, node, day_s)
    for start in range(0, len(job_ids), _CHUNK):
        _add_parts(connection, node, list(job_ids[start:start + _CHUNK]), day, held_until_s)
    _clear(connection, node, day_s)
    if day.sums:
        connection.execute(JOB_DAY_SUMS.insert(), [
            {"node": node, "day_s": day_s, "kind": kind, "instance_type": itype,
             "region": region, "name": name, "agent_labels": labels, "units_key": counted,
             "unit": unit, "runs": g.runs, "energy_j": g.energy_j,
             "accelerator_j": g.accelerator_j, "dynamic_j": g.dynamic_j, "held_s": g.held_s,
             "units": g.units, "value_sum": g.value_sum, "value_squares": g.value_squares,
             "first_s": g.first[0], "first_job_id": g.first[1],
             "last_created_s": g.last_created_s}
            for (kind, itype, region, name, labels, counted, unit), g in day.sums.items()])
    if day.sources:
        connection.execute(JOB_DAY_SOURCES.insert(), [
            {"node": node, "day_s": day_s, "kind": kind, "instance_type": itype,
             "units_key": counted, "component": component, "source": source,
             "energy_j": energy_j, "dynamic_j": dynamic_j}
            for (kind, itype, counted, component, source), (energy_j, dynamic_j)
            in day.sources.items()])


def _stored(connection: Connection, node: str, day_s: int) -> _Day:
    """The (node, day)'s rows as they are in the store."""
    day = _Day()
    d, b = JOB_DAY_SUMS.c, JOB_DAY_SOURCES.c
    for row in connection.execute(select(JOB_DAY_SUMS).where(d.node == node,
                                                             d.day_s == day_s)):
        key = (row.kind, row.instance_type, row.region, row.name, row.agent_labels,
               row.units_key, row.unit)
        day.sums.setdefault(key, _Group()).add(_Group(
            row.runs, row.energy_j, row.accelerator_j, row.dynamic_j, row.held_s, row.units,
            row.value_sum, row.value_squares, (row.first_s, row.first_job_id),
            row.last_created_s))
    for row in connection.execute(select(JOB_DAY_SOURCES).where(b.node == node,
                                                                b.day_s == day_s)):
        day.add_source((row.kind, row.instance_type, row.units_key, row.component,
                        row.source), row.energy_j, row.dynamic_j)
    return day


def _add_parts(connection: Connection, node: str, ids: list[str], day: _Day,
               held_until_s: float | None) -> None:
    """Add the parts of ``ids`` on ``node`` to ``day``: each job's energy, held time and
    units (its totals, and the raw rows after them if it ended, as a fleet comparison
    takes them; a running part up to its totals and ``held_until_s``)."""
    parts, jobs = JOB_NODES.c, JOBS.c
    held = connection.execute(
        select(parts.job_id, parts.instance_type, parts.region, parts.started_s,
               parts.ended_s, jobs.kind, jobs.name, jobs.agent_labels, jobs.created_s)
        .join_from(JOB_NODES, JOBS, jobs.id == parts.job_id)
        .where(parts.node == node, one_of(parts.job_id, ids))).all()
    energy: defaultdict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_source: defaultdict[str, dict[tuple[str, str], tuple[float, float]]] = defaultdict(dict)
    for (job_id, _node, component, source), (dynamic_j, idle_j) in (
            part_energy_by_source(connection, ids, node, ended_only=True).items()):
        total = energy[job_id]
        total[0] += dynamic_j + idle_j
        total[1] += (dynamic_j + idle_j) if component == Component.ACCELERATOR else 0.0
        total[2] += dynamic_j
        by_source[job_id][(component, source)] = (dynamic_j + idle_j, dynamic_j)
    counts = part_units(connection, select(JOBS.c.id).where(one_of(JOBS.c.id, ids)), node,
                        ended_only=True)
    for row in held:
        job_id = str(row.job_id)
        energy_j, accelerator_j, dynamic_j = energy[job_id]
        units = {unit: count for (_n, unit), count in counts.get(job_id, {}).items()
                 if count > 0}
        counted = units_key(list(units))
        created_s = float(row.created_s)
        until_s = row.ended_s if row.ended_s is not None else held_until_s
        held_s = max(float(until_s) - float(row.started_s), 0.0) if until_s is not None else 0.0
        for unit, count in [("", None), *sorted(units.items())]:
            value = energy_j if count is None else energy_j / count
            key = (row.kind, row.instance_type, row.region, row.name, row.agent_labels,
                   counted, unit)
            day.sums.setdefault(key, _Group()).add(_Group(
                1, energy_j, accelerator_j, dynamic_j, held_s, count or 0.0, value,
                value * value, (created_s, job_id), created_s))
        for (component, source), (source_j, source_dynamic_j) in by_source[job_id].items():
            day.add_source((row.kind, row.instance_type, counted, component, source),
                           source_j, source_dynamic_j)
