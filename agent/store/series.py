"""Reads of energy and units over time: a job's or a node's rows, and chart series.

Every read takes raw rows after each node's boundary and minute rollups up to it (the
prune boundary for node ticks, the totals boundary for job rows:
:func:`joulestat.store.read_rule.boundary_of`), so a chart, a report's series and the
totals never disagree about which rows count.

Charts: a week of 1 s ticks is 600,000 rows a component and a chart needs a few hundred
points, so rows are summed per bucket in the database. Each point carries the seconds
its devices actually covered, so power is energy over the time measured, not over a
bucket the job only half filled. A row belongs to the bucket its end falls in and brings
its whole length as covered time, so a bucket's power is the average power of the rows
that ended in it: a job of constant power draws a flat line to its last tick, however
its ticks fall on the bucket grid. A job's minute rollup (``job_minute_energy``) has no
length of its own: it covers the part of its minute the job ran on that node
(``job_nodes``' start and end), not the whole minute, or a job that started or ended
inside a minute would dip there; a raw job window (a flush's ticks)
likewise covers only the part of it the job ran.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, case, func, literal_column, select
from sqlalchemy.engine import Engine

from joulestat.store.model_split import ordinary_units
from joulestat.store.read_rule import (
    ends_within,
    every_unit_row,
    minute_end_ms,
    minute_ends_within,
    raw_and_rolled,
    rolled_side,
)
from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    MINUTE_ENERGY,
    MINUTE_MS,
    TICK_ENERGY,
    UNATTRIBUTED,
    ms,
)

NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                  21600, 43200, 86400)


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One bucket of one node's component: energy, and the seconds actually covered.

    ``covered_s`` is per device (summed device-seconds would count an 8-GPU node's
    time eight times): average power of the component is ``energy_j / covered_s``.
    """

    bucket_end_s: float
    node: str
    component: str
    dynamic_j: float
    idle_j: float
    covered_s: float

    @property
    def power_w(self) -> float:
        return (self.dynamic_j + self.idle_j) / self.covered_s if self.covered_s > 0 else 0.0


def job_energy_series(
    engine: Engine, job_id: str, node: str | None = None
) -> list[tuple[float, str, float, float]]:
    """``(t_end_s, component, dynamic_j, idle_j)`` in time order, summed over devices
    (and nodes unless ``node`` is given): per flush window where raw rows remain (the
    last few minutes), per minute (at the minute's end) before the job totals'
    boundary."""
    raw, rolled = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c
    rolled_end_ms = minute_end_ms(rolled.minute_start_s)
    raw_query = (select(raw.t_end_ms, raw.component, func.sum(raw.dynamic_j),
                        func.sum(raw.idle_j))
                 .where(raw.job_id == job_id).group_by(raw.t_end_ms, raw.component))
    rolled_query = (select(rolled_end_ms, rolled.component, func.sum(rolled.dynamic_j),
                           func.sum(rolled.idle_j))
                    .where(rolled.job_id == job_id).group_by(rolled_end_ms, rolled.component))
    if node is not None:
        raw_query = raw_query.where(raw.node == node)
        rolled_query = rolled_query.where(rolled.node == node)
    series: defaultdict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    with engine.connect() as connection:
        for t_end_ms, component, dynamic_j, idle_j in connection.execute(
                raw_and_rolled(raw_query, JOB_ENERGY, rolled_query, JOB_MINUTE_ENERGY)):
            point = series[(int(t_end_ms), component)]
            point[0] += float(dynamic_j)
            point[1] += float(idle_j)
    return [(t / 1000, c, d, i) for (t, c), (d, i) in sorted(series.items())]


def job_energy_parts(
    engine: Engine, job_id: str
) -> list[tuple[str, float, float, str, float, float]]:
    """Every row of ``job_id`` with its start kept, summed over devices, in time order:
    ``(node, t_start_s, t_end_s, component, dynamic_j, idle_j)``.

    Unlike :func:`job_energy_series` each row keeps its start, so a chart can spread a
    long row (a minute rollup, an imported aggregate) over the time it covers instead of
    piling it on its end; dynamic and idle stay apart, so that a report's per-node
    series gives an import both back.
    """
    raw, rolled, parts = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, JOB_NODES.c
    raw_start, raw_end = _span_in_run_ms(raw.t_start_ms, raw.t_end_ms, parts.started_s,
                                         parts.ended_s)
    raw_query = (select(raw.node, raw_start, raw_end, raw.component,
                        func.sum(raw.dynamic_j), func.sum(raw.idle_j))
                 .select_from(_parts_of(JOB_ENERGY))
                 .where(raw.job_id == job_id)
                 .group_by(raw.node, raw.t_start_ms, raw.t_end_ms, raw_start, raw_end,
                           raw.component))
    minute_start = rolled.minute_start_s * literal_column("1000")
    start_ms, end_ms = _span_in_run_ms(minute_start, minute_end_ms(rolled.minute_start_s),
                                       parts.started_s, parts.ended_s)
    rolled_query = (select(rolled.node, start_ms, end_ms, rolled.component,
                           func.sum(rolled.dynamic_j), func.sum(rolled.idle_j))
                    .select_from(_parts_of(JOB_MINUTE_ENERGY))
                    .where(rolled.job_id == job_id)
                    .group_by(rolled.node, rolled.minute_start_s, start_ms, end_ms,
                              rolled.component))
    with engine.connect() as connection:
        rows = connection.execute(
            raw_and_rolled(raw_query, JOB_ENERGY, rolled_query, JOB_MINUTE_ENERGY)).all()
    return sorted((str(node), int(start_ms) / 1000, int(end_ms) / 1000, str(component),
                   float(dynamic_j), float(idle_j))
                  for node, start_ms, end_ms, component, dynamic_j, idle_j in rows)


def job_energy_rows(
    engine: Engine, job_id: str
) -> list[tuple[str, float, float, str, float]]:
    """:func:`job_energy_parts` with dynamic and idle summed: ``(node, t_start_s,
    t_end_s, component, energy_j)``."""
    return [(node, t0, t1, component, dynamic_j + idle_j)
            for node, t0, t1, component, dynamic_j, idle_j in job_energy_parts(engine, job_id)]


def job_unit_rows(engine: Engine, job_id: str) -> list[tuple[str, float, str, float]]:
    """``(node, t_end_s, unit, count)`` of every unit row of ``job_id``, in time order."""
    units = every_unit_row().c
    query = (select(units.node, units.t_end_ms, units.unit, units.count)
             .where(units.job_id == job_id, ordinary_units(units.unit))
             .order_by(units.t_end_ms, units.node, units.unit))
    with engine.connect() as connection:
        return [(str(node), int(t_end_ms) / 1000, str(unit), float(count))
                for node, t_end_ms, unit, count in connection.execute(query)]


def choose_bucket_s(span_s: float, max_points: int = 400, min_bucket_s: float = 1.0) -> int:
    """The smallest round bucket that keeps a series of ``span_s`` under ``max_points``."""
    wanted = max(span_s / max(max_points, 1), min_bucket_s)
    return next((b for b in NICE_BUCKETS_S if b >= wanted), NICE_BUCKETS_S[-1])


def _bucket(t_end_ms: Any, bucket_ms: int) -> Any:
    """Index of the bucket ``(i*b, (i+1)*b]`` a row ending at ``t_end_ms`` falls in."""
    return (t_end_ms - literal_column("1")).op("/", precedence=8, return_type=BigInteger)(
        literal_column(str(int(bucket_ms))))


def _collect(rows: Iterable[Any], bucket_ms: int) -> list[SeriesPoint]:
    """Rows ``(bucket, node, component, device, dynamic, idle, covered_ms)`` to points,
    devices summed as power (each device's energy over its own covered time)."""
    per_device: defaultdict[tuple[int, str, str, str], list[float]] = defaultdict(
        lambda: [0.0, 0.0, 0.0])
    for bucket, node, component, device, dynamic_j, idle_j, covered_ms in rows:
        point = per_device[(int(bucket), node, component, device)]
        point[0] += float(dynamic_j)
        point[1] += float(idle_j)
        point[2] += float(covered_ms) / 1000
    summed: dict[tuple[int, str, str], list[float]] = {}
    for (bucket, node, component, _device), (dynamic_j, idle_j, covered_s) in sorted(
            per_device.items()):
        point = summed.setdefault((bucket, node, component), [0.0, 0.0, covered_s])
        if covered_s > 0:  # energy at the first device's coverage: W x s stays exact
            scale = point[2] / covered_s
            point[0] += dynamic_j * scale
            point[1] += idle_j * scale
    return [SeriesPoint((b + 1) * bucket_ms / 1000, n, c, d, i, cov)
            for (b, n, c), (d, i, cov) in sorted(summed.items())]


def _span_in_run_ms(start_ms: Any, end_ms: Any, started_s: Any, ended_s: Any
                    ) -> tuple[Any, Any]:
    """``(start_ms, end_ms)`` of a job row clipped to the job's run on its node,
    ``(started_s, ended_s]`` (a running part runs on): a minute rollup, or a flush
    window another job's ticks ran to the end of, then spreads over the
    seconds the job ran, not the whole minute or window. The row's own span where they
    do not overlap (clocks a tick apart) or the part is unknown. Whole milliseconds, as
    the store keeps times."""
    start = func.round(started_s * literal_column("1000"))
    end = func.coalesce(func.round(ended_s * literal_column("1000")), end_ms)
    low = case((start > start_ms, start), else_=start_ms)
    high = case((end < end_ms, end), else_=end_ms)
    overlaps = high > low
    return case((overlaps, low), else_=start_ms), case((overlaps, high), else_=end_ms)


def _parts_of(table: Any) -> Any:
    """``table`` (a job table) outer-joined to its rows' job parts (``job_nodes``)."""
    parts = JOB_NODES.c
    return table.outerjoin(JOB_NODES, (parts.job_id == table.c.job_id)
                           & (parts.node == table.c.node))


def _minute_in_run_ms(minute_start_s: Any, started_s: Any, ended_s: Any) -> Any:
    """Milliseconds of the minute ``(m, m + 60 s]`` the job ran on the node: its
    overlap with ``(started_s, ended_s]`` (a running part runs to the minute's end). A
    rolled row outside that window (clocks a tick apart) counts the whole minute."""
    m_start = minute_start_s * literal_column("1000")
    m_end = m_start + literal_column(str(MINUTE_MS))
    start = started_s * literal_column("1000.0")
    end = func.coalesce(ended_s * literal_column("1000.0"), m_end)
    low = case((start > m_start, start), else_=m_start)
    high = case((end < m_end, end), else_=m_end)
    return case((high > low, high - low), else_=literal_column(str(MINUTE_MS)))


def job_power_series(engine: Engine, job_id: str, bucket_s: int) -> list[SeriesPoint]:
    """A job's energy per bucket, node and component (dynamic and idle parts)."""
    bucket_ms = int(bucket_s * 1000)
    shares, rolled, parts = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, JOB_NODES.c
    raw_bucket = _bucket(shares.t_end_ms, bucket_ms)
    raw_start, raw_end = _span_in_run_ms(shares.t_start_ms, shares.t_end_ms,
                                         parts.started_s, parts.ended_s)
    raw = (select(raw_bucket, shares.node, shares.component, shares.device,
                  func.sum(shares.dynamic_j), func.sum(shares.idle_j),
                  func.sum(raw_end - raw_start))
           .select_from(_parts_of(JOB_ENERGY))
           .where(shares.job_id == job_id)
           .group_by(raw_bucket, shares.node, shares.component, shares.device))
    rolled_bucket = _bucket(minute_end_ms(rolled.minute_start_s), bucket_ms)
    minutes = (select(rolled_bucket, rolled.node, rolled.component, rolled.device,
                      func.sum(rolled.dynamic_j), func.sum(rolled.idle_j),
                      func.sum(_minute_in_run_ms(rolled.minute_start_s, parts.started_s,
                                                 parts.ended_s)))
               .select_from(JOB_MINUTE_ENERGY.join(
                   JOB_NODES, (parts.job_id == rolled.job_id) & (parts.node == rolled.node)))
               .where(rolled.job_id == job_id)
               .group_by(rolled_bucket, rolled.node, rolled.component, rolled.device))
    with engine.connect() as connection:
        return _collect(connection.execute(
            raw_and_rolled(raw, JOB_ENERGY, minutes, JOB_MINUTE_ENERGY)), bucket_ms)


def node_power_series(engine: Engine, node: str, since_s: float, until_s: float,
                      bucket_s: int) -> list[SeriesPoint]:
    """A node's energy per bucket and component over ``(since_s, until_s]`` (all of it
    counted as dynamic: node rows do not split idle)."""
    bucket_ms = int(bucket_s * 1000)
    since_ms, until_ms = ms(since_s), ms(until_s)
    ticks, minutes = TICK_ENERGY.c, MINUTE_ENERGY.c
    raw_bucket = _bucket(ticks.t_end_ms, bucket_ms)
    raw = (select(raw_bucket, ticks.node, ticks.component, ticks.device,
                  func.sum(ticks.energy_j), literal_column("0.0"),
                  func.sum(ticks.t_end_ms - ticks.t_start_ms))
           .where(ticks.node == node, *ends_within(ticks.t_end_ms, since_ms, until_ms))
           .group_by(raw_bucket, ticks.node, ticks.component, ticks.device))
    rolled_bucket = _bucket(minute_end_ms(minutes.minute_start_s), bucket_ms)
    rolled = (select(rolled_bucket, minutes.node, minutes.component, minutes.device,
                     func.sum(minutes.energy_j), literal_column("0.0"),
                     func.sum(minutes.covered_s) * literal_column("1000"))
              .where(minutes.node == node,
                     *minute_ends_within(minutes.minute_start_s, since_ms, until_ms))
              .group_by(rolled_bucket, minutes.node, minutes.component, minutes.device))
    with engine.connect() as connection:
        return _collect(connection.execute(
            raw_and_rolled(raw, TICK_ENERGY, rolled, MINUTE_ENERGY)), bucket_ms)


def job_min_bucket_s(engine: Engine, job_id: str) -> float:
    """The finest bucket a job's series can use: its mean tick length, and a whole
    minute where any of its rows that count are minute rollups."""
    shares, rolled = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c
    tick_ms = select(func.avg(shares.t_end_ms - shares.t_start_ms)).where(
        shares.job_id == job_id, shares.job_id != UNATTRIBUTED)
    any_rolled = rolled_side(select(func.count()).where(rolled.job_id == job_id),
                             JOB_MINUTE_ENERGY)
    with engine.connect() as connection:
        mean_ms = connection.execute(tick_ms).scalar()
        rolled_rows = connection.execute(any_rolled).scalar_one()
    floor_s = float(mean_ms) / 1000 if mean_ms else 1.0
    return max(floor_s, 60.0) if rolled_rows else floor_s


def node_power_range(engine: Engine, node: str) -> dict[str, tuple[float, float]]:
    """Component -> (lowest, highest) minute-average power the node ever showed.

    From the minute rollups (all devices of a component summed, minutes at least half
    covered); from raw ticks when no minute has been rolled up yet.
    """
    minutes = MINUTE_ENERGY.c
    per_minute = (select(minutes.component.label("component"),
                         (func.sum(minutes.energy_j) / func.max(minutes.covered_s))
                         .label("power_w"))
                  .where(minutes.node == node, minutes.covered_s >= 30)
                  .group_by(minutes.minute_start_s, minutes.component).subquery())
    ticks = TICK_ENERGY.c
    per_tick = (select(ticks.component.label("component"),
                       (func.sum(ticks.energy_j) * literal_column("1000.0")
                        / func.max(ticks.t_end_ms - ticks.t_start_ms)).label("power_w"))
                .where(ticks.node == node, ticks.t_end_ms > ticks.t_start_ms)
                .group_by(ticks.t_end_ms, ticks.component).subquery())
    result: dict[str, tuple[float, float]] = {}
    with engine.connect() as connection:
        for source in (per_minute, per_tick):
            query = select(source.c.component, func.min(source.c.power_w),
                           func.max(source.c.power_w)).group_by(source.c.component)
            result = {c: (float(low), float(high)) for c, low, high in connection.execute(query)}
            if result:
                break
    return result
