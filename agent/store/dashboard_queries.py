"""The dashboard's reads: a read-only engine, and queries shaped for charts and tables.

The dashboard must never write, so :func:`open_readonly_engine` opens SQLite with a
``mode=ro`` URI (plus ``PRAGMA query_only``) and PostgreSQL with
``default_transaction_read_only=on``; a role with nothing but ``SELECT`` is enough.

Every energy figure follows the rule of :mod:`agent.store.queries`: raw rows after each
node's prune boundary (``nodes.raw_pruned_until_ms``), minute rollups up to it, in one
``UNION ALL`` statement, so nothing is counted twice or missed while the agent prunes.
Series are bucketed in SQL (a week of 1 s ticks is 600,000 rows a component; a chart
needs a few hundred points) and carry each device's covered seconds, so power is
energy over the time actually measured, not over a bucket the job only half filled.

:func:`job_totals` answers what :func:`~agent.store.job_queries.list_jobs` answers for
the job lists, with filters applied in SQL and the energy grouped by (job, node), the
primary keys' prefix, so the Jobs and Compare pages stay fast with tens of thousands of
jobs.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import (
    BigInteger,
    Select,
    create_engine,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import QueuePool

from agent.store.engine import SUPPORTED_DIALECTS, StoreError, redact_url
from agent.store.job_queries import _unit_rows
from agent.store.tables import (
    JOB_ENERGY,
    JOB_MINUTE_ENERGY,
    JOB_NODES,
    JOB_UNITS,
    JOBS,
    MINUTE_ENERGY,
    NODES,
    TICK_ENERGY,
    UNATTRIBUTED,
)

MINUTE_MS = 60_000
NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                  21600, 43200, 86400)


class StoreMissingError(StoreError):
    """The SQLite file does not exist yet: no agent has written to this store."""


# -- read-only engine ---------------------------------------------------------------------


def open_readonly_engine(url: str, *, busy_timeout_s: float = 5.0) -> Engine:
    """An engine that cannot write: SQLite ``mode=ro``, PostgreSQL read-only transactions.

    Raises :class:`StoreMissingError` for a SQLite file that does not exist (read-only
    mode would not create it) and :class:`StoreError` for an unusable URL.
    """
    shown = redact_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(f"{shown!r} is not a database URL") from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_DIALECTS:
        raise StoreError(f"{shown}: unsupported database {backend!r}")
    if backend == "postgresql":
        query = dict(parsed.query)
        options = " ".join(filter(None, [str(query.pop("options", "")),
                                          "-c default_transaction_read_only=on"]))
        connect_args: dict[str, Any] = {"options": options}
        if "connect_timeout" not in query:
            connect_args["connect_timeout"] = 5
        return create_engine(parsed.set(query=query), pool_pre_ping=True,
                             connect_args=connect_args)
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        raise StoreError(f"{shown}: the dashboard needs a SQLite file path")
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise StoreMissingError(f"{path} does not exist yet")
    # A URI keeps SQLite from creating or writing the file; the creator bypasses URL
    # parsing so paths with spaces, '?' or '#' survive.
    uri = f"file:{quote(str(path), safe='/')}?mode=ro"
    busy_ms = max(0, int(busy_timeout_s * 1000))

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
        connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
        connection.execute("PRAGMA query_only = ON")
        return connection

    return create_engine("sqlite://", creator=connect, poolclass=QueuePool)


# -- jobs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What the Jobs and Compare pages ask for; ``None`` means "any".

    A job matches the window when it overlaps ``(since_s, until_s]``.
    """

    kind: str | None = None
    status: str | None = None
    since_s: float | None = None
    until_s: float | None = None
    node: str | None = None
    instance_type: str | None = None
    job_ids: tuple[str, ...] | None = None
    label_key: str | None = None  # jobs carrying this label (any value)


def _job_id_select(where: JobFilter) -> Select[Any]:
    jobs, parts = JOBS.c, JOB_NODES.c
    query = select(jobs.id)
    if where.kind is not None:
        query = query.where(jobs.kind == where.kind)
    if where.status is not None:
        query = query.where(jobs.status == where.status)
    if where.until_s is not None:
        query = query.where(jobs.created_s <= where.until_s)
    if where.since_s is not None:
        query = query.where(or_(jobs.ended_s.is_(None), jobs.ended_s > where.since_s))
    if where.job_ids is not None:
        query = query.where(jobs.id.in_(list(where.job_ids)))
    if where.label_key is not None:
        # labels is JSON text written with sort_keys: '{"concurrency": "8", ...}'. A
        # quoted key followed by ':' cannot occur inside a value, where quotes are
        # escaped; callers still read the parsed labels.
        query = query.where(jobs.labels.contains(f'"{where.label_key}":', autoescape=True))
    if where.node is not None or where.instance_type is not None:
        on_node = select(parts.job_id)
        if where.node is not None:
            on_node = on_node.where(parts.node == where.node)
        if where.instance_type is not None:
            on_node = on_node.where(parts.instance_type == where.instance_type)
        query = query.where(jobs.id.in_(on_node))
    return query


@dataclass(frozen=True, slots=True)
class PartTotals:
    """One node's part in a job: where, when, and the job's energy and units there."""

    node: str
    instance_type: str
    region: str
    started_s: float
    ended_s: float | None
    total_j: float
    units: dict[str, float]


@dataclass(frozen=True, slots=True)
class JobTotals:
    """A job with its totals over all nodes, as the Jobs and Compare pages list it.

    The totals of :class:`~agent.store.job_queries.JobSummary` without the split by
    component, which costs a sort of every energy row; the Job detail page reads that
    split per job with :func:`~agent.store.job_queries.job_detail`.
    """

    id: str
    name: str
    kind: str
    labels: dict[str, str]
    status: str
    started_s: float
    ended_s: float | None
    nodes: tuple[tuple[str, str], ...]  # (node, instance_type), by node
    total_j: float
    units: dict[str, float]
    per_node: tuple[PartTotals, ...]


def _job_node_energy(connection: Connection, job_ids: Select[Any]) -> dict[
        tuple[str, str], float]:
    """Joules per (job, node), raw rows after each node's prune boundary plus rollups up
    to it. Grouped on the primary keys' prefix, so both halves aggregate as they scan."""
    raw, rolled, nodes = JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, NODES.c
    raw_query = (select(raw.job_id, raw.node, func.sum(raw.dynamic_j + raw.idle_j))
                 .select_from(JOB_ENERGY.join(NODES, nodes.node == raw.node))
                 .where(raw.job_id.in_(job_ids),
                        or_(nodes.raw_pruned_until_ms.is_(None),
                            raw.t_end_ms > nodes.raw_pruned_until_ms))
                 .group_by(raw.job_id, raw.node))
    rolled_query = (select(rolled.job_id, rolled.node,
                           func.sum(rolled.dynamic_j + rolled.idle_j))
                    .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
                    .where(rolled.job_id.in_(job_ids),
                           rolled.minute_start_s <= _pruned_last_minute_s())
                    .group_by(rolled.job_id, rolled.node))
    totals: defaultdict[tuple[str, str], float] = defaultdict(float)
    for job_id, node, energy_j in connection.execute(union_all(raw_query, rolled_query)):
        totals[(job_id, node)] += float(energy_j)
    return totals


def _in_connection(engine: Engine, read: Any, *args: Any) -> Any:
    with engine.connect() as connection:
        return read(connection, *args)


def job_totals(engine: Engine, where: JobFilter = JobFilter()) -> list[JobTotals]:
    """Matching jobs with per-node parts, energy and units, by start time.

    The same totals as :func:`~agent.store.job_queries.list_jobs`; job ids are chosen
    in SQL and the rows grouped in one pass, for tens of thousands of jobs.
    """
    job_ids = _job_id_select(where)
    jobs, parts = JOBS.c, JOB_NODES.c
    meta_query = (select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.status,
                         jobs.created_s, jobs.ended_s)
                  .where(jobs.id.in_(job_ids)).order_by(jobs.created_s, jobs.id))
    parts_query = (select(parts.job_id, parts.node, parts.instance_type, parts.region,
                          parts.started_s, parts.ended_s)
                   .where(parts.job_id.in_(job_ids)).order_by(parts.job_id, parts.node))
    # The energy scan is most of the time and sqlite3/psycopg release the GIL while the
    # database works, so it runs on a second connection meanwhile.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_in_connection, engine, _job_node_energy, job_ids)
        with engine.connect() as connection:
            metas = connection.execute(meta_query).all()
            part_rows = connection.execute(parts_query).all()
            units = _unit_rows(connection, job_ids, None)
        energy = pending.result()
    part_units: defaultdict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (job_id, node, unit), count in sorted(units.items()):
        part_units[(job_id, node)][unit] = count
    by_job: defaultdict[str, list[PartTotals]] = defaultdict(list)
    for job_id, node, instance_type, region, started_s, ended_s in part_rows:
        by_job[job_id].append(PartTotals(node, instance_type, region, started_s, ended_s,
                                         energy.get((job_id, node), 0.0),
                                         part_units.get((job_id, node), {})))
    result = []
    for job_id, name, kind, labels, status, created_s, ended_s in metas:
        node_parts = tuple(by_job.get(job_id, ()))
        job_units: defaultdict[str, float] = defaultdict(float)
        for part in node_parts:
            for unit, count in part.units.items():
                job_units[unit] += count
        result.append(JobTotals(
            job_id, name, kind, json.loads(labels), status, created_s, ended_s,
            tuple((p.node, p.instance_type) for p in node_parts),
            sum(p.total_j for p in node_parts), dict(sorted(job_units.items())), node_parts,
        ))
    return result


@dataclass(frozen=True, slots=True)
class JobChoice:
    """Enough to list a job in a picker, without reading its energy."""

    id: str
    name: str
    kind: str
    status: str
    started_s: float


def job_choices(engine: Engine, limit: int = 2000) -> list[JobChoice]:
    """The newest ``limit`` jobs, newest first."""
    jobs = JOBS.c
    query = (select(jobs.id, jobs.name, jobs.kind, jobs.status, jobs.created_s)
             .order_by(jobs.created_s.desc(), jobs.id).limit(limit))
    with engine.connect() as connection:
        return [JobChoice(*row) for row in connection.execute(query)]


def job_units_by_kind(engine: Engine) -> dict[str, list[str]]:
    """Kind -> the units its jobs counted, most used first: the Compare page's choices."""
    # DISTINCT first, then join: five times faster than counting distinct ids per group.
    pairs = select(JOB_UNITS.c.job_id, JOB_UNITS.c.unit).distinct().subquery()
    query = (select(JOBS.c.kind, pairs.c.unit, func.count())
             .select_from(pairs.join(JOBS, JOBS.c.id == pairs.c.job_id))
             .group_by(JOBS.c.kind, pairs.c.unit))
    found: defaultdict[str, list[tuple[int, str]]] = defaultdict(list)
    with engine.connect() as connection:
        for kind, unit, jobs in connection.execute(query):
            found[kind].append((-int(jobs), unit))
    return {kind: [unit for _n, unit in sorted(units)] for kind, units in sorted(found.items())}


def count_jobs(engine: Engine, running: bool | None = None) -> int:
    query = select(func.count()).select_from(JOBS)
    if running is not None:
        query = query.where(JOBS.c.status == ("running" if running else "ended"))
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


# -- provenance -----------------------------------------------------------------------------


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
    since_ms, until_ms = round(since_s * 1000), round(until_s * 1000)
    ticks, minutes, nodes = TICK_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw = (select(ticks.node, ticks.component, ticks.source, func.sum(ticks.energy_j))
           .select_from(TICK_ENERGY.join(NODES, nodes.node == ticks.node))
           .where(ticks.t_end_ms > since_ms, ticks.t_end_ms <= until_ms,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      ticks.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(ticks.node, ticks.component, ticks.source))
    rolled = (select(minutes.node, minutes.component, minutes.source,
                     func.sum(minutes.energy_j))
              .select_from(MINUTE_ENERGY.join(NODES, nodes.node == minutes.node))
              .where(minutes.minute_start_s > (since_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= (until_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(minutes.node, minutes.component, minutes.source))
    totals: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    with engine.connect() as connection:
        for node, component, source, energy_j in connection.execute(union_all(raw, rolled)):
            totals[(node, component, source)] += float(energy_j)
    return [SourceEnergy(n, c, s, j) for (n, c, s), j in sorted(totals.items())]


def node_covered_s(engine: Engine, since_s: float, until_s: float) -> dict[str, float]:
    """Seconds each node reported in ``(since_s, until_s]``: the time its best-covered
    device has ticks for (a node is held, and billed, while its agent runs)."""
    since_ms, until_ms = round(since_s * 1000), round(until_s * 1000)
    ticks, minutes, nodes = TICK_ENERGY.c, MINUTE_ENERGY.c, NODES.c
    raw = (select(ticks.node, ticks.component, ticks.device,
                  func.sum(ticks.t_end_ms - ticks.t_start_ms) / literal_column("1000.0"))
           .select_from(TICK_ENERGY.join(NODES, nodes.node == ticks.node))
           .where(ticks.t_end_ms > since_ms, ticks.t_end_ms <= until_ms,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      ticks.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(ticks.node, ticks.component, ticks.device))
    rolled = (select(minutes.node, minutes.component, minutes.device,
                     func.sum(minutes.covered_s))
              .select_from(MINUTE_ENERGY.join(NODES, nodes.node == minutes.node))
              .where(minutes.minute_start_s > (since_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= (until_ms - MINUTE_MS) // 1000,
                     minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(minutes.node, minutes.component, minutes.device))
    per_device: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    with engine.connect() as connection:
        for node, component, device, seconds in connection.execute(union_all(raw, rolled)):
            per_device[(node, component, device)] += float(seconds)
    covered: dict[str, float] = {}
    for (node, _component, _device), seconds in per_device.items():
        covered[node] = max(covered.get(node, 0.0), seconds)
    return covered


def job_energy_by_source(engine: Engine, job_id: str) -> list[SourceEnergy]:
    """A job's energy per node, component and source; rolled minutes take the node's
    minute source, as job rollups keep none of their own."""
    shares, job_minutes, minutes, nodes = (JOB_ENERGY.c, JOB_MINUTE_ENERGY.c, MINUTE_ENERGY.c,
                                           NODES.c)
    raw = (select(shares.node, shares.component, shares.source,
                  func.sum(shares.dynamic_j + shares.idle_j))
           .select_from(JOB_ENERGY.join(NODES, nodes.node == shares.node))
           .where(shares.job_id == job_id,
                  or_(nodes.raw_pruned_until_ms.is_(None),
                      shares.t_end_ms > nodes.raw_pruned_until_ms))
           .group_by(shares.node, shares.component, shares.source))
    joined = JOB_MINUTE_ENERGY.join(NODES, nodes.node == job_minutes.node).join(
        MINUTE_ENERGY, (minutes.node == job_minutes.node)
        & (minutes.minute_start_s == job_minutes.minute_start_s)
        & (minutes.component == job_minutes.component)
        & (minutes.device == job_minutes.device))
    rolled = (select(job_minutes.node, job_minutes.component, minutes.source,
                     func.sum(job_minutes.dynamic_j + job_minutes.idle_j))
              .select_from(joined)
              .where(job_minutes.job_id == job_id,
                     job_minutes.minute_start_s <= _pruned_last_minute_s())
              .group_by(job_minutes.node, job_minutes.component, minutes.source))
    totals: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    with engine.connect() as connection:
        for node, component, source, energy_j in connection.execute(union_all(raw, rolled)):
            totals[(node, component, source)] += float(energy_j)
    return [SourceEnergy(n, c, s, j) for (n, c, s), j in sorted(totals.items())]


def _pruned_last_minute_s() -> Any:
    """``minute_start_s`` of the joined node's last pruned minute (NULL: none pruned)."""
    return (NODES.c.raw_pruned_until_ms - literal_column("60000")).op(
        "/", precedence=8, return_type=BigInteger)(literal_column("1000"))


# -- series ---------------------------------------------------------------------------------


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
    minutes = (select(rolled_bucket, rolled.node, rolled.component, rolled.device,
                      func.sum(rolled.dynamic_j), func.sum(rolled.idle_j),
                      func.count() * literal_column("60000"))
               .select_from(JOB_MINUTE_ENERGY.join(NODES, nodes.node == rolled.node))
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
