"""Where raw rows end and rollups begin: the one statement of the store's reading rule.

The agent rolls raw rows (``tick_energy``, ``job_energy``) up into minutes
(``minute_energy``, ``job_minute_energy``) and later prunes the raw rows, each node on
its own schedule, up to ``nodes.raw_pruned_until_ms`` (minute-aligned; NULL while
nothing is pruned). Both copies of a pruned minute's ticks may be in the store for a
while, so every reader takes **raw rows after the node's boundary and minute rollups
up to it**: each tick then counts exactly once, before, during and after a prune, and
windows on whole minutes give the same totals either way. Job totals follow the same
rule with their own boundary, ``nodes.totals_until_ms`` (:func:`settled_until_ms`).

Readers build their raw and rolled halves with the columns and filters they need and
hand them to :func:`raw_and_rolled` (or :func:`raw_side` / :func:`rolled_side`), which
join each half to its node and add the boundary, so the rule is written here only.

Time windows are ``(since_s, until_s]``, matching ticks' ``(t0, t1]``: a tick counts when
its end lies in the window, a minute ``m`` when its end ``m + 60`` does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, CompoundSelect, Select, func, literal_column, or_, union_all
from sqlalchemy.sql.elements import ColumnElement

from joulestat.store.tables import MINUTE_MS, MINUTE_S, NODES


def ms(t_s: float) -> int:
    """Epoch seconds as the store's integer milliseconds."""
    return round(t_s * 1000)


def ends_within(t_end_ms: Any, since_ms: int, until_ms: int) -> tuple[ColumnElement[bool], ...]:
    """A raw row's end in ``(since, until]``."""
    return t_end_ms > since_ms, t_end_ms <= until_ms


def minute_ends_within(minute_start_s: Any, since_ms: int, until_ms: int
                       ) -> tuple[ColumnElement[bool], ...]:
    """``minute_start_s + 60`` in ``(since, until]``, as integer bounds on the key column.

    Integers, not floats: PostgreSQL would cast the BIGINT column to compare it with a
    float and could no longer use the primary key index.
    """
    return (minute_start_s > (since_ms - MINUTE_MS) // 1000,
            minute_start_s <= (until_ms - MINUTE_MS) // 1000)


def minute_end_ms(minute_start_s: Any) -> Any:
    """The end of the minute ``minute_start_s`` in milliseconds (where a rolled row sits
    on a time axis, like a raw row's ``t_end_ms``)."""
    return (minute_start_s + literal_column(str(MINUTE_S))) * literal_column("1000")


def pruned_last_minute_s(pruned_ms: Any = NODES.c.raw_pruned_until_ms) -> Any:
    """``minute_start_s`` of the last pruned minute: of the joined node by default, or of
    ``pruned_ms`` (a node's boundary as a scalar subquery). Exact integer division: the
    boundary is minute-aligned. NULL (no rollup counts) while nothing is pruned."""
    return (pruned_ms - literal_column(str(MINUTE_MS))).op(
        "/", precedence=8, return_type=BigInteger)(literal_column("1000"))


def after_boundary(t_end_ms: Any, pruned_ms: Any = NODES.c.raw_pruned_until_ms
                   ) -> ColumnElement[bool]:
    """A raw row that counts: its node has pruned nothing, or the row ends after the
    boundary (of the joined node by default, or ``pruned_ms``)."""
    return or_(pruned_ms.is_(None), t_end_ms > pruned_ms)


def settled_until_ms() -> Any:
    """The joined node's job-totals boundary (``job_energy_totals`` and
    ``job_unit_totals`` hold everything up to it); -1 where nothing is summed yet, so
    that every raw row is after it."""
    return func.coalesce(NODES.c.totals_until_ms, literal_column("-1"))


def _joined(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` with ``table``'s node joined, whatever else its FROM already joins."""
    return query.join_from(table, NODES, NODES.c.node == table.c.node)


def raw_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the raw ``table`` (``tick_energy``, ``job_energy``) kept to the rows
    after each node's prune boundary."""
    return _joined(query, table).where(after_boundary(table.c.t_end_ms))


def rolled_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the rollup ``table`` (``minute_energy``, ``job_minute_energy``) kept
    to the minutes up to each node's prune boundary. Written on ``minute_start_s`` so
    that the primary key serves it."""
    return _joined(query, table).where(table.c.minute_start_s <= pruned_last_minute_s())


def raw_and_rolled(raw: Select[Any], raw_table: Any, rolled: Select[Any], rolled_table: Any
                   ) -> CompoundSelect:
    """``raw`` UNION ALL ``rolled``, each half on its side of its node's boundary: one
    statement, so it is consistent even while the agent prunes in between (SQLite holds
    no snapshot across statements). The halves must select the same column types;
    callers add up rows that share a key."""
    return union_all(raw_side(raw, raw_table), rolled_side(rolled, rolled_table))
