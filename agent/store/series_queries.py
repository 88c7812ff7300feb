"""Power and unit series for charts, bucketed in SQL.

A week of 1 s ticks is 600,000 rows a component and a chart needs a few hundred points,
so rows are summed per bucket in the database. Each point carries the seconds its
devices actually covered, so power is energy over the time measured, not over a bucket
the job only half filled. Raw rows after each node's prune boundary, minute rollups up
to it (the rule of :mod:`agent.store.queries`).

A row belongs to the bucket its end falls in and brings its whole length as covered
time, so a bucket's power is the average power of the rows that ended in it: a job of
constant power draws a flat line to its last tick, however its ticks fall on the
bucket grid. A job's minute rollup (``job_minute_energy``) has no length of its own: it
covers the part of its minute the job ran on that node (``job_nodes``' start and end),
not the whole minute, or a job that started or ended inside a minute would dip there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    case,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Engine

from agent.store.job_queries import pruned_last_minute_s as _pruned_last_minute_s
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOB_UNITS,
    MINUTE_ENERGY,
    MINUTE_MS,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
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


def _minute_in_run_ms(minute_start_s: Any, started_s: Any, ended_s: Any) -> Any:
    """Milliseconds of the minute ``(m, m + 60 s]`` the job ran on the node: its
    overlap with ``(started_s, ended_s]`` (a running part runs to the minute's end). A
    rolled row outside that window (clocks a tick apart) counts the whole minute."""
    m_start = minute_start_s * literal_column("1000")
    m_end = m_start + literal_column("60000")
    start = started_s * literal_column("1000.0")
    end = func.coalesce(ended_s * literal_column("1000.0"), m_end)
    low = case((start > m_start, start), else_=m_start)
    high = case((end < m_end, end), else_=m_end)
    return case((high > low, high - low), else_=literal_column("60000"))


def job_power_series(engine: Engine, job_id: str, bucket_s: int) -> list[SeriesPoint]:
    """A job's energy per bucket, node and component (dynamic and idle parts)."""
    bucket_ms = int(bucket_s * 1000)
    shares, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    raw_bucket = _bucket(shares.t_end_ms, bucket_ms)
    raw = (select(raw_bucket, shares.node, shares.component, shares.device,
                  func.sum(shares.dynamic_j), func.sum(shares.idle_j),
                  func.sum(shares.t_end_ms - shares.t_start_ms))
           .select_from(JOB_ENERGY.join(NODES, nodes.node == shares.node))
           .where(shares.job_id == job_id,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      shares.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(raw_bucket, shares.node, shares.component, shares.device))
    minute_end_ms = (rolled.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_bucket = _bucket(minute_end_ms, bucket_ms)
    parts = JOB_NODES.c
    minutes = (select(rolled_bucket, rolled.node, rolled.component, rolled.device,
                      func.sum(rolled.dynamic_j), func.sum(rolled.idle_j),
                      func.sum(_minute_in_run_ms(rolled.minute_start_s, parts.started_s,
                                                 parts.ended_s)))
               .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node).join(
                   JOB_NODES, (parts.job_id == rolled.job_id) & (parts.node == rolled.node)))
               .where(rolled.job_id == job_id,
                      rolled.minute_start_s <= _pruned_last_minute_s())
               .group_by(rolled_bucket, rolled.node, rolled.component, rolled.device))
    with engine.connect() as connection:
        return _collect(connection.execute(union_all(raw, minutes)), bucket_ms)


def node_power_series(engine: Engine, node: str, since_s: float, until_s: float,
                      bucket_s: int) -> list[SeriesPoint]:
    """A node's energy per bucket and component over ``(since_s, until_s]`` (all of it
    counted as dynamic: node rows do not split idle)."""
    bucket_ms = int(bucket_s * 1000)
    since_ms, until_ms = round(since_s * 1000), round(until_s * 1000)
    ticks, minutes, nodes = TICK_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw_bucket = _bucket(ticks.t_end_ms, bucket_ms)
    raw = (select(raw_bucket, ticks.node, ticks.component, ticks.device,
                  func.sum(ticks.energy_j), literal_column("0.0"),
                  func.sum(ticks.t_end_ms - ticks.t_start_ms))
           .select_from(TICK_ENERGY.join(NODES, nodes.node == ticks.node))
           .where(ticks.node == node, ticks.t_end_ms > since_ms, ticks.t_end_ms <= until_ms,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      ticks.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(raw_bucket, ticks.node, ticks.component, ticks.device))
    minute_end_ms = (minutes.minute_start_s + literal_column("60")) * literal_column("1000")
    rolled_bucket = _bucket(minute_end_ms, bucket_ms)
    rolled = (select(rolled_bucket, minutes.node, minutes.component, minutes.device,
                     func.sum(minutes.energy_j), literal_column("0.0"),
                     func.sum(minutes.covered_s) * literal_column("1000"))
              .select_from(MINUTE_ENERGY.join(NODES, nodes.node == minutes.node))
              .where(minutes.node == node,
                     minutes.minute_start_s > (since_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= (until_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(rolled_bucket, minutes.node, minutes.component, minutes.device))
    with engine.connect() as connection:
        return _collect(connection.execute(union_all(raw, rolled)), bucket_ms)


def job_unit_series(engine: Engine, job_id: str,
                    bucket_s: int) -> list[tuple[float, str, str, float]]:
    """``(bucket_end_s, node, unit, count)``: units a job counted per bucket."""
    bucket_ms = int(bucket_s * 1000)
    units = JOB_UNITS.c
    bucket = _bucket(units.t_end_ms, bucket_ms)
    query = (select(bucket, units.node, units.unit, func.sum(units.count))
             .where(units.job_id == job_id).group_by(bucket, units.node, units.unit)
             .order_by(bucket, units.node, units.unit))
    with engine.connect() as connection:
        return [((int(b) + 1) * bucket_ms / 1000, n, u, float(c))
                for b, n, u, c in connection.execute(query)]


def job_min_bucket_s(engine: Engine, job_id: str) -> float:
    """The finest bucket a job's series can use: its mean tick length, and a whole
    minute where any of its rows are minute rollups."""
    shares, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    tick_ms = select(func.avg(shares.t_end_ms - shares.t_start_ms)).where(
        shares.job_id == job_id, shares.job_id != UNATTRIBUTED)
    any_rolled = (select(func.count()).select_from(
        JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
        .where(rolled.job_id == job_id, rolled.minute_start_s <= _pruned_last_minute_s()))
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
