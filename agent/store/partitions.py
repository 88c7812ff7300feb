"""Daily partitions of the raw tables on PostgreSQL: made ahead, dropped once settled.

On PostgreSQL ``tick_energy`` and ``job_energy`` are ``PARTITION BY RANGE (t_end_ms)``
(migration 0005): one partition per UTC day, ``<table>_pYYYYMMDD`` holding the rows with
``t_end_ms`` in ``[day, day + 1)`` (epoch milliseconds), plus ``<table>_default`` for
rows no day partition covers; all of them in the schema :data:`PARTITION_SCHEMA`.
SQLite has none of this: there retention deletes rows (:mod:`joulestat.store.rollup`).

Raw rows ending at or before their node's ``raw_pruned_until_ms`` are invisible to
every read (:mod:`joulestat.store.boundary`), so on PostgreSQL pruning only moves that
boundary and the rows stay until their whole day goes:

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
  (:func:`joulestat.store.rollup.prune`), so such a partition shrinks to those rows.
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

from sqlalchemy import column, table, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql.expression import TableClause

from joulestat.store.engine import describe_error
from joulestat.store.tables import JOB_ENERGY, TICK_ENERGY

log = logging.getLogger(__name__)

PARTITION_SCHEMA = "joulestat_partitions"
PARTITIONED_TABLES = (TICK_ENERGY.name, JOB_ENERGY.name)
DAY_MS = 86_400_000
DAYS_AHEAD = 3
# A node's raw rows still stored this long after its boundary passed them sit in a day
# partition some other node holds back; pruning then deletes them (joulestat.store.rollup).
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


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)
