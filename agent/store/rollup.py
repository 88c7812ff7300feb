"""Minute rollups and raw-row retention, for node ticks and job shares alike.

Both follow one rule (see :mod:`joulestat.store.tables`): the minute ``m`` holds the rows
ending in ``(m, m + 60]``, and ``nodes.raw_pruned_until_ms`` is the one boundary
before which only rollups remain. Ticks and job shares are pruned in the same
transaction at the same boundary, so queries pick rollups or raw rows for both by
that boundary and never count a minute twice, and the conservation identity
(job rows sum to the tick) holds for rollups as it does for raw rows.

Job unit counts have no rollup table: when their raw rows are pruned, each pruned
minute's rows are merged into one row at the minute's end, so sums stay exact and
the table grows by minutes, not ticks.

Job totals (``job_energy_totals``, ``job_unit_totals``) hold each (job, node)'s sums of
the rows ending at or before ``nodes.totals_until_ms``; job lists read them plus the
raw rows after that boundary. The boundary advances here, to the last complete minute
less :data:`SETTLE_MS`, by adding the raw rows in between - never behind the prune
boundary, so those rows always exist. The writer flushes its whole buffer before
maintaining and refuses rows ending at or before the boundary afterwards (only a wall
clock stepped back produces them), so a row is either in the totals or after the
boundary, never both or neither.

On PostgreSQL the raw tables are partitioned by day (:mod:`joulestat.store.partitions`):
pruning there rolls up and moves the boundary like everywhere, but leaves the raw rows
behind it (no read counts them) to go with their day's partition; it deletes only rows
in the DEFAULT partition, which is never dropped, and rows still stored
:data:`~joulestat.store.partitions.OVERDUE_MS` after the boundary passed them (a partition
some other node holds back). SQLite deletes at the boundary, as always.

Called by :meth:`joulestat.store.writer.StoreWriter.maintain` inside one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Double,
    case,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from joulestat.store.partitions import OVERDUE_MS, default_partition
from joulestat.store.tables import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    MINUTE_ENERGY,
    MINUTE_MS,
    NODES,
    TICK_ENERGY,
)

# Raw rows pruned per maintain() call at most, so a long backlog (a retention cut from
# 7d to 1d) is worked off over several minutes instead of one long write lock.
MAX_PRUNE_SPAN_MS = 6 * 3600 * 1000
# How far the totals boundary stays behind the last complete minute: a tick that ended
# just before maintain() ran may still be on its way into the writer's buffer.
SETTLE_MS = 2 * MINUTE_MS
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
    latest = connection.execute(select(func.max(JOB_MINUTE_ENERGY.c.minute_start_s))
                                .where(JOB_MINUTE_ENERGY.c.node == node)).scalar()
    job_rolled = roll_up_jobs(connection, insert, node, resume_after(latest), complete_until_ms)
    # Never summed from before the prune boundary (the boundaries start equal, by
    # migration 0003; this only guards against a NULL totals boundary after a prune).
    totals_until = advance_totals(connection, insert, node, _latest(totals_until, pruned_until),
                                  complete_until_ms - SETTLE_MS)
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
) -> int | None:
    """Add ``node``'s job shares and unit counts ending in (totals_until, until_ms] to the
    job totals and move the boundary to ``until_ms``; returns the boundary."""
    if totals_until is not None and until_ms <= totals_until:
        return totals_until
    shares, units = JOB_ENERGY.c, JOB_UNITS.c
    energy = (select(shares.job_id, shares.node, shares.component, func.sum(shares.dynamic_j),
                     func.sum(shares.idle_j))
              .where(shares.node == node, *_window(shares.t_end_ms, totals_until, until_ms))
              .group_by(shares.job_id, shares.node, shares.component))
    connection.execute(_add_into(insert, JOB_ENERGY_TOTALS,
                                 ["job_id", "node", "component", "dynamic_j", "idle_j"], 3,
                                 energy))
    counts = (select(units.job_id, units.node, units.unit, func.sum(units.count))
              .where(units.node == node, *_window(units.t_end_ms, totals_until, until_ms))
              .group_by(units.job_id, units.node, units.unit))
    connection.execute(_add_into(insert, JOB_UNIT_TOTALS, ["job_id", "node", "unit", "count"],
                                 3, counts))
    connection.execute(update(NODES).where(NODES.c.node == node)
                       .values(totals_until_ms=until_ms))
    return until_ms


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
    """Upsert job_minute_energy from the job shares ending in (after_ms, until_ms]."""
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
    statement = insert(JOB_MINUTE_ENERGY).from_select(names, query)
    statement = statement.on_conflict_do_update(
        index_elements=names[:5],
        set_={name: statement.excluded[name] for name in names[5:]},
    )
    return max(connection.execute(statement).rowcount, 0)


def compact_units(connection: Connection, node: str, after_ms: int | None, bound_ms: int) -> int:
    """Merge each minute's job_units rows in (after_ms, bound_ms] into one at its end.

    Both bounds are minute-aligned, so every merged row lands inside the range whose
    rows were just deleted and cannot collide with a kept row.
    """
    units = JOB_UNITS.c
    minute_end_ms = (_minute_of(units.t_end_ms) + literal_column("60")) * literal_column("1000")
    window = [units.node == node, *_window(units.t_end_ms, after_ms, bound_ms)]
    merged = connection.execute(
        select(units.job_id, minute_end_ms, units.unit, func.sum(units.count))
        .where(*window)
        .group_by(units.job_id, minute_end_ms, units.unit)
    ).all()
    deleted = connection.execute(delete(JOB_UNITS).where(*window)).rowcount
    if merged:
        connection.execute(JOB_UNITS.insert(), [
            {"job_id": job_id, "node": node, "t_end_ms": int(t_end_ms), "unit": unit,
             "count": float(count)}
            for job_id, t_end_ms, unit, count in merged
        ])
    return max(deleted, 0) - len(merged)


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
    # counted, and nothing is deleted that the rollups do not hold.
    roll_up_ticks(connection, insert, node, pruned_until, bound_ms)
    roll_up_jobs(connection, insert, node, pruned_until, bound_ms)
    compact_units(connection, node, pruned_until, bound_ms)
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
    :func:`joulestat.store.partitions.drop_settled_partitions`). Both are index range
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
