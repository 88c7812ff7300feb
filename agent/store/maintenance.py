"""Keeping the store's size in hand: minute rollups, raw-row retention, and PostgreSQL's
daily partitions of the raw tables.

**Rollups and retention** follow one rule (see :mod:`joulestat.store.read_rule`): the
minute ``m`` holds the rows ending in ``(m, m + 60]``, and a node's boundary is the
instant before which only rollups remain, so queries pick rollups or raw rows by it
and never count a minute twice. Node ticks have ``nodes.raw_pruned_until_ms``: they
are rolled into ``minute_energy`` as they come and kept raw for the retention.

The job tables have ``nodes.totals_until_ms``. Job totals (``job_energy_totals``,
``job_unit_totals``) hold each (job, node)'s sums of the rows ending at or before it;
job lists read them plus the raw windows after it. The boundary advances here, to the
last complete minute less :data:`SETTLE_MS`, and in the same step
(:func:`advance_totals`) the minutes it passes are rolled up into ``job_minute_energy``
from their raw windows, their unit counts into ``job_minute_units`` (one row a minute),
and those raw rows deleted: a job's shares stay at the flush window's resolution for a
few minutes, then at the minute's, and the conservation identity (job rows sum to the
node's ticks) holds per window and per minute. The boundary never falls behind the prune
boundary. The writer flushes its whole buffer before maintaining and refuses rows ending
at or before the boundary afterwards (only a wall clock stepped back produces them), so
a row is either in the totals or after the boundary, never both or neither. Once the
boundary settles a UTC day of the node's ended jobs, the pass sums that day for a
fleet's comparisons (:mod:`joulestat.store.pool_days`).
:func:`maintain_node` is called by :meth:`joulestat.store.writer.StoreWriter.maintain`
inside one transaction.

**Partitions.** On PostgreSQL ``tick_energy`` and ``job_energy`` are ``PARTITION BY
RANGE (t_end_ms)``: one partition per UTC day,
``<table>_pYYYYMMDD`` holding the rows with ``t_end_ms`` in ``[day, day + 1)`` (epoch
milliseconds), plus ``<table>_default`` for rows no day partition covers; all of them
in the schema :data:`PARTITION_SCHEMA`. SQLite has none of this: there retention
deletes rows. Raw rows ending at or before their node's ``raw_pruned_until_ms`` are
invisible to every read, so on PostgreSQL pruning only moves that boundary and leaves
the raw rows to go with their day's partition; it deletes only rows in the DEFAULT
partition, which is never dropped, and rows still stored :data:`OVERDUE_MS` after the
boundary passed them (a partition some other node holds back).

* :func:`ensure_partitions` makes today's partition and the next :data:`DAYS_AHEAD`
  days' (one writer at a time, under an advisory lock; another writer having made one
  already is fine). A day whose range already holds rows in the DEFAULT partition
  cannot get its partition (PostgreSQL refuses): that is logged and the rows stay in
  DEFAULT, where pruning deletes them row by row as before.
* :func:`drop_settled_partitions` drops a day partition once none of its rows counts
  any more: no node has a row in it after that node's boundary (read per node on the
  ``(node, t_end_ms)`` index, so only nodes that really wrote there hold it back, and
  a node whose boundary is still NULL does where it has rows). A node that stopped
  writing keeps its last raw rows, and so the partitions holding them; the other
  nodes' rows there are then deleted row by row once :data:`OVERDUE_MS` late
  (:func:`prune`), so such a partition shrinks to those rows.
* :class:`PartitionKeeper` is what a writer calls: at its start and after each
  maintain pass. It costs no SQL while the partitions it knows of cover the days ahead
  (bar an hourly look for its node's rows in DEFAULT); it looks for droppable
  partitions when its node's boundary enters a new day, and once at start.

DDL here waits at most :data:`LOCK_TIMEOUT_MS` for a lock (a long dashboard read of a
raw table must not queue every writer behind a waiting DROP); what could not be done is
tried again at a later pass.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Double,
    case,
    column,
    delete,
    func,
    literal_column,
    select,
    table,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import TableClause

from joulestat.core.logs import LogOnce
from joulestat.store.engine import describe_error
from joulestat.store.open_parts import copy_open_parts
from joulestat.store.pool_days import sum_days
from joulestat.store.schema import (
    DAY_PARTITIONED,
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
    JOB_MINUTE_UNITS,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    MINUTE_ENERGY,
    MINUTE_MS,
    NODES,
    PARTITION_SCHEMA,
    TICK_ENERGY,
)

log = logging.getLogger(__name__)


# -- Daily partitions of the raw tables on PostgreSQL ----------------------------------

PARTITIONED_TABLES = tuple(DAY_PARTITIONED)
DAY_MS = 86_400_000
DAYS_AHEAD = 3
# A node's raw rows still stored this long after its boundary passed them sit in a day
# partition some other node holds back; pruning then deletes them (joulestat.store.maintenance).
# A day, since a row may be a day older than its partition's end, plus 6 hours in which
# the partition would normally have been dropped.
OVERDUE_MS = DAY_MS + 6 * 3600 * 1000
LOCK_TIMEOUT_MS = 5000
# Advisory lock keys (any constants, unlikely to clash with someone else's).
_ENSURE_LOCK = 0x4A53_5041_5254_0001
_DROP_LOCK = 0x4A53_5041_5254_0002
_BOUNDS = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")
# How often a writer looks for its node's rows in the DEFAULT partitions, and how long
# it waits after a partition it could not create or drop (a lock not granted in time, a
# role that does not own the tables) before it tries again.
DEFAULT_CHECK_S = 3600.0
RETRY_S = 600.0


def day_of(t_ms: int) -> int:
    """The UTC day (days since the epoch) a row ending at ``t_ms`` belongs to."""
    return t_ms // DAY_MS


def partition_name(table_name: str, day: int) -> str:
    """``tick_energy_p20261130``: the partition of ``table_name`` for ``day``."""
    return f"{table_name}_p{datetime.fromtimestamp(day * 86_400, UTC):%Y%m%d}"


def default_partition(table_name: str) -> TableClause:
    """The DEFAULT partition of ``table_name``, with the columns pruning filters on."""
    return table(f"{table_name}_default", column("node"), column("t_end_ms"),
                 schema=PARTITION_SCHEMA)


@dataclass(frozen=True)
class Partition:
    """One partition of a raw table; ``lower_ms``/``upper_ms`` None for the DEFAULT one."""

    table: str
    name: str
    lower_ms: int | None
    upper_ms: int | None

    @property
    def qualified(self) -> str:
        return f"{PARTITION_SCHEMA}.{self.name}"


@dataclass
class Ensured:
    """What :func:`ensure_partitions` did: partitions created, days left to DEFAULT
    because rows of theirs are there already, and a partition it could not create (a
    lock not granted in time, a role that does not own the table), which ended it."""

    created: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: str | None = None


@dataclass
class DropResult:
    """What :func:`drop_settled_partitions` did: partitions dropped, and the ones it
    kept with (some of) the nodes whose rows in them still count."""

    dropped: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # partition -> why not
    skipped: bool = False  # another writer was at it


def is_partitioned(connection: Connection) -> bool:
    """Whether both raw tables are partitioned, each with its DEFAULT partition
    (``<schema>.<table>_default``, which pruning deletes from)."""
    return all(connection.execute(text(
        "SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = to_regclass(:t) "
        "AND inhrelid = to_regclass(:d))"),
        {"t": name, "d": f"{PARTITION_SCHEMA}.{name}_default"}).scalar_one()
        for name in PARTITIONED_TABLES)


def list_partitions(connection: Connection, table_name: str) -> list[Partition]:
    """The partitions of ``table_name``, DEFAULT first, then by time."""
    rows = connection.execute(text(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"),
        {"t": table_name}).all()
    found = []
    for name, bound in rows:
        match = _BOUNDS.search(bound or "")
        lower, upper = (int(match[1]), int(match[2])) if match else (None, None)
        found.append(Partition(table_name, str(name), lower, upper))
    return sorted(found, key=lambda p: (p.lower_ms is not None, p.lower_ms or 0))


@contextmanager
def _lock_timeout(connection: Connection) -> Iterator[None]:
    """Wait at most LOCK_TIMEOUT_MS for locks inside the block (restored after it)."""
    before = connection.exec_driver_sql("SHOW lock_timeout").scalar()
    connection.execute(text("SELECT set_config('lock_timeout', :v, true)"),
                       {"v": f"{LOCK_TIMEOUT_MS}ms"})
    yield
    connection.execute(text("SELECT set_config('lock_timeout', :v, true)"), {"v": before})


def ensure_partitions(connection: Connection, now_s: float,
                      days_ahead: int = DAYS_AHEAD) -> Ensured:
    """Create the partitions of today and the next ``days_ahead`` days that are missing.
    Serialised across writers by an advisory lock (a partition another writer made
    meanwhile is simply there); a day whose range holds rows in the DEFAULT partition
    is logged and skipped; a failed creation is logged and ends the pass."""
    today = day_of(round(now_s * 1000))
    wanted = range(today, today + days_ahead + 1)
    result = Ensured()
    if not _missing(connection, wanted):
        return result
    with _lock_timeout(connection):
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ENSURE_LOCK})
        for table_name, day in _missing(connection, wanted):  # again, under the lock
            name = partition_name(table_name, day)
            lower, upper = day * DAY_MS, (day + 1) * DAY_MS
            default = f"{PARTITION_SCHEMA}.{table_name}_default"
            if connection.exec_driver_sql(
                    f"SELECT 1 FROM {default} WHERE t_end_ms >= {lower} "
                    f"AND t_end_ms < {upper} LIMIT 1").first():
                _warn_once(f"overlap:{name}", "cannot create partition %s.%s: rows of its "
                           "day are in %s already (a clock ahead, or rows written before "
                           "the partition existed); they stay there and are pruned row "
                           "by row", PARTITION_SCHEMA, name, default)
                result.blocked.append(name)
                continue
            try:
                with connection.begin_nested():
                    connection.exec_driver_sql(
                        f"CREATE TABLE IF NOT EXISTS {PARTITION_SCHEMA}.{name} PARTITION OF "
                        f"{table_name} FOR VALUES FROM ({lower}) TO ({upper})")
            except DBAPIError as exc:
                log.warning("cannot create partition %s.%s now: %s", PARTITION_SCHEMA, name,
                            describe_error(exc))
                result.failed = name
                break  # the next would wait as long: try again at a later pass
            result.created.append(name)
    if result.created:
        log.info("created partitions %s", ", ".join(result.created))
    return result


def _missing(connection: Connection, days: range) -> list[tuple[str, int]]:
    missing = []
    for table_name in PARTITIONED_TABLES:
        have = {p.name for p in list_partitions(connection, table_name)}
        missing += [(table_name, d) for d in days if partition_name(table_name, d) not in have]
    return missing


def visible_nodes(connection: Connection, partition: Partition, limit: int = 3) -> list[str]:
    """Up to ``limit`` nodes with a row in ``partition`` after their prune boundary (a
    row some read still counts). One probe of the ``(node, t_end_ms)`` index per node
    whose boundary lies before the partition's end."""
    last_ms = (partition.upper_ms or 0) - 1
    rows = connection.execute(text(
        "SELECT n.node FROM nodes n CROSS JOIN LATERAL (SELECT 1 FROM "
        f"{partition.qualified} t WHERE t.node = n.node "
        "AND t.t_end_ms > COALESCE(n.raw_pruned_until_ms, -1) LIMIT 1) AS counted "
        "WHERE n.raw_pruned_until_ms IS NULL OR n.raw_pruned_until_ms < :last "
        "ORDER BY n.node LIMIT :limit"), {"last": last_ms, "limit": limit})
    return [str(node) for (node,) in rows]


def drop_settled_partitions(connection: Connection, until_ms: int | None = None) -> DropResult:
    """Drop every day partition that ends at or before ``until_ms`` (default: the
    latest prune boundary of any node) and holds no row that counts (see
    :func:`visible_nodes`). Skipped when another writer is at it (advisory lock)."""
    result = DropResult()
    if not connection.execute(text("SELECT pg_try_advisory_xact_lock(:k)"),
                              {"k": _DROP_LOCK}).scalar():
        result.skipped = True
        return result
    if until_ms is None:
        until_ms = connection.execute(text("SELECT max(raw_pruned_until_ms) FROM nodes")).scalar()
        if until_ms is None:
            return result
    with _lock_timeout(connection):
        for table_name in PARTITIONED_TABLES:
            for partition in list_partitions(connection, table_name):
                if partition.upper_ms is None or partition.upper_ms - 1 > until_ms:
                    continue
                blocking = visible_nodes(connection, partition)
                if blocking:
                    result.kept[partition.name] = blocking
                    continue
                try:
                    with connection.begin_nested():
                        _drop_if_settled(connection, partition, result)
                except DBAPIError as exc:
                    result.failed[partition.name] = describe_error(exc)
    if result.dropped:
        log.info("dropped partitions %s: their rows were past every node's prune "
                 "boundary", ", ".join(result.dropped))
    return result


def _drop_if_settled(connection: Connection, partition: Partition, result: DropResult) -> None:
    # A writer inserts into a partition under a lock that conflicts with this one: once
    # it is granted no row can arrive, so look again, then drop (which also locks the
    # parent table, for as long as this transaction lasts).
    connection.exec_driver_sql(f"LOCK TABLE {partition.qualified} IN ACCESS EXCLUSIVE MODE")
    blocking = visible_nodes(connection, partition)
    if blocking:
        result.kept[partition.name] = blocking
        return
    connection.exec_driver_sql(f"DROP TABLE {partition.qualified}")
    result.dropped.append(partition.name)


def default_rows(connection: Connection, node: str) -> dict[str, bool]:
    """Per raw table: whether its DEFAULT partition holds rows of ``node``."""
    return {name: connection.execute(
        text(f"SELECT EXISTS (SELECT 1 FROM {PARTITION_SCHEMA}.{name}_default "
             "WHERE node = :node)"), {"node": node}).scalar_one()
            for name in PARTITIONED_TABLES}


class PartitionKeeper:
    """A writer's partition chores (PostgreSQL with partitioned raw tables only; on
    any other store every method returns at once and :attr:`active` stays False)."""

    def __init__(self, dialect_name: str, node: str) -> None:
        self.enabled = dialect_name == "postgresql"
        self.node = node
        self.active = False  # known partitioned: prune leaves raw rows to the drops
        self._covered: range = range(0)  # days known to have their partitions
        self._checked_day: int | None = None
        self._next_default_check_s = 0.0
        self._next_ensure_s = self._next_drop_s = 0.0  # time.monotonic(), after a failure

    def start(self, engine: Engine, now_s: float) -> None:
        """At the writer's (re)registration: is the store partitioned, and are the days
        ahead covered. Only the first question's failure is raised."""
        if not self.enabled:
            return
        with engine.connect() as connection:
            self.active = is_partitioned(connection)
        self._checked_day = None
        if self.active:
            self._ensure(engine, now_s)

    def after_maintain(self, engine: Engine, now_s: float, pruned_until_ms: int | None) -> None:
        """After a maintain pass: partitions ahead, settled ones dropped, DEFAULT rows
        reported. Failures are logged and tried again RETRY_S later."""
        if not self.active:
            return
        self._ensure(engine, now_s)
        if (pruned_until_ms is not None and day_of(pruned_until_ms) != self._checked_day
                and time.monotonic() >= self._next_drop_s):
            self._drop(engine, day_of(pruned_until_ms))
        if time.monotonic() >= self._next_default_check_s:
            self._next_default_check_s = time.monotonic() + DEFAULT_CHECK_S
            self._check_default(engine)

    def _drop(self, engine: Engine, day: int) -> None:
        try:
            with engine.begin() as connection:
                result = drop_settled_partitions(connection)
        except SQLAlchemyError as exc:
            result = DropResult(failed={"(all)": describe_error(exc)})
        for name, nodes in result.kept.items():
            log.debug("partition %s kept: node(s) %s still have rows there after their "
                      "prune boundary", name, ", ".join(nodes))
        if result.failed:
            self._next_drop_s = time.monotonic() + RETRY_S
            log.warning("could not drop settled partitions now (trying again in %.0f s): %s",
                        RETRY_S, "; ".join(f"{n}: {e}" for n, e in result.failed.items()))
        elif not result.skipped:
            self._checked_day = day

    def _ensure(self, engine: Engine, now_s: float) -> None:
        today = day_of(round(now_s * 1000))
        if (today in self._covered and today + DAYS_AHEAD in self._covered
                or time.monotonic() < self._next_ensure_s):
            return
        try:
            with engine.begin() as connection:
                result = ensure_partitions(connection, now_s)
        except SQLAlchemyError as exc:
            log.warning("could not create the partitions ahead (trying again in %.0f s): %s",
                        RETRY_S, describe_error(exc))
            self._next_ensure_s = time.monotonic() + RETRY_S
            return
        if result.failed is not None:
            self._next_ensure_s = time.monotonic() + RETRY_S
        else:
            # Done for these days, even where a day's rows sit in DEFAULT already (logged:
            # they keep going there), so that is not looked at again every minute.
            self._covered = range(today, today + DAYS_AHEAD + 1)

    def _check_default(self, engine: Engine) -> None:
        try:
            with engine.connect() as connection:
                found = [name for name, rows in default_rows(connection, self.node).items()
                         if rows]
        except SQLAlchemyError as exc:
            log.debug("could not look at the DEFAULT partitions: %s", describe_error(exc))
            return
        for name in found:
            _warn_once(f"default:{name}:{self.node}", "rows of node %s are in %s.%s_default: "
                       "no day partition covered their time when they were written (a "
                       "clock off by days, an old spool replayed, an import of old "
                       "data). They count as usual and are pruned row by row.",
                       self.node, PARTITION_SCHEMA, name)


_ONCE = LogOnce(log)  # a partition's state said once a process, not every pass


def _warn_once(key: str, message: str, *args: object) -> None:
    _ONCE.problem(key, "said", message, *args)


# -- Minute rollups and raw-row retention, for node ticks and job shares alike ---------

# Raw rows pruned per maintain() call at most, so a long backlog (a retention cut from
# 7d to 1d) is worked off over several minutes instead of one long write lock.
MAX_PRUNE_SPAN_MS = 6 * 3600 * 1000
# How far the totals boundary stays behind the last complete minute: a tick that ended
# just before maintain() ran may still be on its way into the writer's buffer.
SETTLE_MS = 2 * MINUTE_MS
# How often an agent runs its node's maintain pass (agent/runtime/daemon.py): rollups and
# pruning cost ~11 ms of CPU a run; queries combine raw rows and rollups, so running them
# every 5 minutes changes no figure, only the table sizes.
ROLLUP_EVERY_S = 300.0
# Integer division on both backends (BIGINT / INTEGER), rendered with '/' precedence
# so that (a - 1) / b is parenthesised.
_DIVIDE = {"precedence": 8}


@dataclass(frozen=True)
class MaintainResult:
    """What one maintain pass did: rollup rows upserted, raw rows deleted (ticks and jobs;
    on partitioned PostgreSQL only those deleted row by row, see :func:`prune`)."""

    rolled_rows: int
    pruned_rows: int
    raw_pruned_until_ms: int | None
    job_rolled_rows: int = 0
    job_pruned_rows: int = 0
    totals_until_ms: int | None = None


def _minute_of(t_end_ms: Any) -> ColumnElement[int]:
    """``minute_start_s`` of the minute a row ending at ``t_end_ms`` belongs to.

    Literals, not bind parameters, so PostgreSQL sees the same expression in SELECT
    and GROUP BY.
    """
    return (t_end_ms - literal_column("1")).op("/", return_type=BigInteger, **_DIVIDE)(
        literal_column("60000")) * literal_column("60")


def _window(t_end_ms: Any, after_ms: int | None, until_ms: int) -> list[ColumnElement[bool]]:
    conditions = [t_end_ms <= until_ms]
    if after_ms is not None:
        conditions.append(t_end_ms > after_ms)
    return conditions


def _latest(*values: int | None) -> int | None:
    return max((v for v in values if v is not None), default=None)


def maintain_node(
    connection: Connection, insert: Any, node: str, now_s: float, raw_retention_s: float,
    partitioned: bool = False,
) -> MaintainResult:
    """Roll up complete minutes of ``node`` and prune raw rows older than the retention
    (``partitioned``: the raw tables are PostgreSQL's daily partitions)."""
    now_ms = round(now_s * 1000)
    complete_until_ms = now_ms // MINUTE_MS * MINUTE_MS
    keep_after_ms = (now_ms - round(raw_retention_s * 1000)) // MINUTE_MS * MINUTE_MS
    connection.execute(update(NODES).where(NODES.c.node == node).values(last_seen_s=now_s))
    # FOR UPDATE (PostgreSQL; SQLite serialises writers anyway): an import writing into
    # this node's totals waits for this pass, and this pass for it.
    pruned_until, totals_until = connection.execute(
        select(NODES.c.raw_pruned_until_ms, NODES.c.totals_until_ms)
        .where(NODES.c.node == node).with_for_update()
    ).one()

    def resume_after(latest_minute_s: int | None) -> int | None:
        # Recompute from the latest rolled minute itself (it may have been rolled while
        # its last tick was in flight), never before the prune boundary (raw rows there
        # are gone, strays, or on PostgreSQL kept until their partition is dropped).
        return _latest(None if latest_minute_s is None else latest_minute_s * 1000,
                       pruned_until)

    latest = connection.execute(select(func.max(MINUTE_ENERGY.c.minute_start_s))
                                .where(MINUTE_ENERGY.c.node == node)).scalar()
    rolled = roll_up_ticks(connection, insert, node, resume_after(latest), complete_until_ms)
    # Never summed from before the prune boundary (the boundaries start equal; this
    # only guards against a NULL totals boundary after a prune).
    totals_until, job_rolled = advance_totals(
        connection, insert, node, _latest(totals_until, pruned_until),
        complete_until_ms - SETTLE_MS)
    # Then the days that boundary settled, and the day so far, summed for a fleet's
    # comparisons, and the parts left open copied for them.
    sum_days(connection, node, totals_until)
    copy_open_parts(connection, node, totals_until)
    bound = min(complete_until_ms, keep_after_ms)
    if totals_until is not None:
        bound = min(bound, totals_until)
    pruned, job_pruned, pruned_until = prune(connection, insert, node, pruned_until, bound,
                                             partitioned)
    return MaintainResult(rolled, pruned, pruned_until, job_rolled, job_pruned, totals_until)


def _add_into(insert: Any, target: Any, names: list[str], keys: int, query: Any) -> Any:
    """INSERT the grouped ``query`` into ``target``, adding its sums to existing rows."""
    statement = insert(target).from_select(names, query)
    return statement.on_conflict_do_update(
        index_elements=names[:keys],
        set_={name: target.c[name] + statement.excluded[name] for name in names[keys:]},
    )


def advance_totals(
    connection: Connection, insert: Any, node: str, totals_until: int | None, until_ms: int
) -> tuple[int | None, int]:
    """Add ``node``'s job shares and unit counts ending in (totals_until, until_ms] to the
    job totals and move the boundary to ``until_ms``; returns the boundary and the job
    minute rows rolled up.

    The job tables' raw rows go here too: before the boundary moves,
    the minutes of (totals_until, until_ms] are rolled up into ``job_minute_energy``
    from their raw windows (late ones included), their unit counts into
    ``job_minute_units`` (one row a minute), and those raw rows are
    deleted. Readers take job rows up to this boundary from the minute rollups
    (:func:`joulestat.store.read_rule.boundary_of`), so a busy node's store keeps one row
    per job, device and minute instead of one per flush window for the whole raw
    retention. The node's own ticks stay raw until
    :func:`prune`."""
    if totals_until is not None and until_ms <= totals_until:
        return totals_until, 0
    rolled = roll_up_jobs(connection, insert, node, totals_until, until_ms)
    shares, units = JOB_ENERGY.c, JOB_UNITS.c
    # Grouped by the totals' key, (job, node, component, source): every key column is a
    # column of the raw shares.
    keys = [column.name for column in JOB_ENERGY_TOTALS.primary_key.columns]
    energy = (select(*(shares[k] for k in keys), func.sum(shares.dynamic_j),
                     func.sum(shares.idle_j))
              .where(shares.node == node, *_window(shares.t_end_ms, totals_until, until_ms))
              .group_by(*(shares[k] for k in keys)))
    connection.execute(_add_into(insert, JOB_ENERGY_TOTALS, [*keys, "dynamic_j", "idle_j"],
                                 len(keys), energy))
    counts = (select(units.job_id, units.node, units.unit, func.sum(units.count))
              .where(units.node == node, *_window(units.t_end_ms, totals_until, until_ms))
              .group_by(units.job_id, units.node, units.unit))
    connection.execute(_add_into(insert, JOB_UNIT_TOTALS, ["job_id", "node", "unit", "count"],
                                 3, counts))
    connection.execute(delete(JOB_ENERGY).where(
        shares.node == node, *_window(shares.t_end_ms, totals_until, until_ms)))
    roll_up_units(connection, node, totals_until, until_ms)
    connection.execute(update(NODES).where(NODES.c.node == node)
                       .values(totals_until_ms=until_ms))
    return until_ms, rolled


def roll_up_ticks(
    connection: Connection, insert: Any, node: str, after_ms: int | None, until_ms: int
) -> int:
    """Upsert minute_energy from the raw ticks ending in (after_ms, until_ms]."""
    if after_ms is not None and until_ms <= after_ms:
        return 0
    ticks = TICK_ENERGY.c
    minute = _minute_of(ticks.t_end_ms)
    first, last = func.min(ticks.source), func.max(ticks.source)
    source = case((first == last, first), else_=first + literal_column("'+'") + last)
    covered = func.sum(ticks.t_end_ms - ticks.t_start_ms).op(
        "/", return_type=Double, **_DIVIDE)(literal_column("1000.0"))
    query = (
        select(ticks.node, minute, ticks.component, ticks.device,
               func.sum(ticks.energy_j), covered, source)
        .where(ticks.node == node, *_window(ticks.t_end_ms, after_ms, until_ms))
        .group_by(ticks.node, minute, ticks.component, ticks.device)
    )
    names = ["node", "minute_start_s", "component", "device", "energy_j", "covered_s",
             "source"]
    statement = insert(MINUTE_ENERGY).from_select(names, query)
    statement = statement.on_conflict_do_update(
        index_elements=names[:4],
        set_={name: statement.excluded[name] for name in names[4:]},
    )
    return max(connection.execute(statement).rowcount, 0)


def roll_up_jobs(
    connection: Connection, insert: Any, node: str, after_ms: int | None, until_ms: int
) -> int:
    """Add job_minute_energy rows from the job shares ending in (after_ms, until_ms].

    A plain INSERT: the window starts at the node's totals boundary, which only this
    pass moves, and the writer refuses shares ending at or before it, so no minute in
    the window has rows yet (on PostgreSQL no unique key would catch one that had:
    agent/store/schema.py; on SQLite the key would refuse it)."""
    if after_ms is not None and until_ms <= after_ms:
        return 0
    shares = JOB_ENERGY.c
    minute = _minute_of(shares.t_end_ms)
    query = (
        select(shares.job_id, shares.node, minute, shares.component, shares.device,
               func.sum(shares.dynamic_j), func.sum(shares.idle_j))
        .where(shares.node == node, *_window(shares.t_end_ms, after_ms, until_ms))
        .group_by(shares.job_id, shares.node, minute, shares.component, shares.device)
    )
    names = ["job_id", "node", "minute_start_s", "component", "device", "dynamic_j", "idle_j"]
    statement = JOB_MINUTE_ENERGY.insert().from_select(names, query)
    return max(connection.execute(statement).rowcount, 0)


def roll_up_units(connection: Connection, node: str, after_ms: int | None, bound_ms: int
                  ) -> None:
    """Move ``node``'s job_units rows ending in (after_ms, bound_ms] into
    job_minute_units, one row per job, unit and minute.

    A plain INSERT, as :func:`roll_up_jobs`: the window starts at the node's totals
    boundary, which only this pass moves, and the writer refuses unit rows at or before
    it, so no minute in the window has a row yet. Both bounds are minute-aligned, so no
    minute is split between two passes."""
    units = JOB_UNITS.c
    window = [units.node == node, *_window(units.t_end_ms, after_ms, bound_ms)]
    minute = _minute_of(units.t_end_ms)
    names = ["job_id", "node", "minute_start_s", "unit", "count"]
    connection.execute(JOB_MINUTE_UNITS.insert().from_select(names, (
        select(units.job_id, units.node, minute, units.unit, func.sum(units.count))
        .where(*window)
        .group_by(units.job_id, units.node, minute, units.unit))))
    connection.execute(delete(JOB_UNITS).where(*window))


def prune(
    connection: Connection, insert: Any, node: str, pruned_until: int | None, bound_ms: int,
    partitioned: bool = False,
) -> tuple[int, int, int | None]:
    """Move the prune boundary to ``bound_ms``, rolling the rows before it up first, and
    delete those raw rows (``partitioned``: only where no partition drop will, see
    :func:`_delete_partitioned`).

    Returns (tick rows deleted, job share rows deleted, the new prune boundary).
    """
    ticks = TICK_ENERGY.c
    oldest_query = select(func.min(ticks.t_end_ms)).where(ticks.node == node)
    if pruned_until is not None:
        oldest_query = oldest_query.where(ticks.t_end_ms > pruned_until)
    oldest = connection.execute(oldest_query).scalar()
    if oldest is None:
        return 0, 0, pruned_until
    oldest_minute_end = ((oldest - 1) // MINUTE_MS + 1) * MINUTE_MS
    bound_ms = min(bound_ms, oldest_minute_end - MINUTE_MS + MAX_PRUNE_SPAN_MS)
    if bound_ms < oldest_minute_end:
        return 0, 0, pruned_until
    # The minutes about to lose their raw rows are rolled up from those very rows, in
    # this transaction: rows that arrived late for an already rolled minute are
    # counted, and nothing is deleted that the rollups do not hold. (The job tables'
    # raw rows before the boundary went already, with the totals: advance_totals.)
    roll_up_ticks(connection, insert, node, pruned_until, bound_ms)
    if partitioned:
        deleted, job_deleted = (_delete_partitioned(connection, table, node, pruned_until,
                                                    bound_ms)
                                for table in (TICK_ENERGY, JOB_ENERGY))
    else:
        deleted, job_deleted = (
            connection.execute(delete(table).where(table.c.node == node,
                                                   table.c.t_end_ms <= bound_ms)).rowcount
            for table in (TICK_ENERGY, JOB_ENERGY))
    connection.execute(update(NODES).where(NODES.c.node == node)
                       .values(raw_pruned_until_ms=bound_ms))
    return max(deleted, 0), max(job_deleted, 0), bound_ms


def _delete_partitioned(connection: Connection, table: Any, node: str,
                        pruned_until: int | None, bound_ms: int) -> int:
    """The raw rows of ``node`` no partition drop will take, now behind the boundary:
    those in the DEFAULT partition (never dropped), and those the boundary passed
    :data:`OVERDUE_MS` ago, whose day partition some other node still holds (see
    :func:`joulestat.store.maintenance.drop_settled_partitions`). Both are index range
    scans; the second touches only the partitions of that slice of time."""
    default = default_partition(table.name)
    deleted = connection.execute(delete(default).where(
        default.c.node == node, default.c.t_end_ms <= bound_ms)).rowcount
    overdue_after = None if pruned_until is None else pruned_until - OVERDUE_MS
    overdue_until = bound_ms - OVERDUE_MS
    if overdue_after is None or overdue_until > overdue_after:
        deleted += connection.execute(delete(table).where(
            table.c.node == node, *_window(table.c.t_end_ms, overdue_after, overdue_until))
        ).rowcount
    return deleted
