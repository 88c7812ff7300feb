"""The one rule for reading the store's energy rows: which copy of a tick or a job's share
counts, raw or rolled up, and a job's totals plus what came after them.

The agent rolls raw rows (``tick_energy``, ``job_energy``) up into minutes
(``minute_energy``, ``job_minute_energy``) and later prunes the raw rows, each node on
its own schedule, up to a boundary of the node (minute-aligned; NULL while nothing is
pruned). Both copies of a pruned minute's ticks may be in the store for a while, so
every reader takes **raw rows after the node's boundary and minute rollups up to it**:
each tick then counts exactly once, before, during and after a prune, and windows on
whole minutes give the same totals either way. The boundary is
``nodes.raw_pruned_until_ms`` for the node's ticks (raw for ``--raw-retention``) and
``nodes.totals_until_ms`` for the job tables, whose raw windows go as soon as the job
totals hold them, a few minutes behind the clock (:func:`boundary_of`); job totals use
that boundary too (:func:`settled_until_ms`). Readers build their raw and rolled halves
with the columns and filters they need and hand them to :func:`raw_and_rolled` (or
:func:`raw_side` / :func:`rolled_side`), which join each half to its node and add the
boundary, so the rule is written here only. Time windows are ``(since_s, until_s]``,
matching ticks' ``(t0, t1]``: a tick counts when its end lies in the window, a minute
``m`` when its end ``m + 60`` does.

A job's figures (energy per component and source, units) are its node's job totals
(``job_energy_totals``, ``job_unit_totals``: everything up to the node's
``totals_until_ms``) plus its raw rows after that boundary (:func:`recent_rows`,
:func:`totals_rows`, or :func:`job_parts` with :func:`part_energy_rows` and
:func:`part_unit_rows` for a statement that joins more to the parts): the same for a
running job as for an ended one, to its last flush, in every view (report, jobs,
compare, the pages, the job API). Every reader builds its statements from the functions
here; none restates a boundary. Where the maintain pass has copied a part's totals
(:mod:`joulestat.store.open_parts`), a reader that marks the part ``copied`` reads them
from the copy: the same rows, in a table of the open parts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    CompoundSelect,
    Select,
    Subquery,
    and_,
    func,
    literal_column,
    or_,
    select,
    true,
    union_all,
)

from joulestat.store.schema import (
    JOB_ENERGY,
    JOB_ENERGY_TOTALS,
    JOB_MINUTE_ENERGY,
    JOB_MINUTE_UNITS,
    JOB_NODES,
    JOB_OPEN_ENERGY,
    JOB_OPEN_UNITS,
    JOB_UNIT_TOTALS,
    JOB_UNITS,
    MINUTE_MS,
    MINUTE_S,
    NODES,
    UNATTRIBUTED,
    one_of,
)


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


def boundary_of(table: Any) -> Any:
    """The joined node's boundary between ``table``'s raw rows and its minute rollups:
    ``totals_until_ms`` for the job tables (a job's shares are rolled into minutes and
    their raw windows deleted as the job totals advance, a few minutes behind the
    clock), ``raw_pruned_until_ms`` for the node's ticks (kept raw
    for ``--raw-retention``)."""
    if table.name in (JOB_ENERGY.name, JOB_MINUTE_ENERGY.name):
        return NODES.c.totals_until_ms
    return NODES.c.raw_pruned_until_ms


def raw_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the raw ``table`` (``tick_energy``, ``job_energy``) kept to the rows
    after each node's boundary (:func:`boundary_of`)."""
    return _joined(query, table).where(after_boundary(table.c.t_end_ms, boundary_of(table)))


def rolled_side(query: Select[Any], table: Any) -> Select[Any]:
    """``query`` over the rollup ``table`` (``minute_energy``, ``job_minute_energy``) kept
    to the minutes up to each node's boundary (:func:`boundary_of`). Written on
    ``minute_start_s`` so that the primary key serves it."""
    return _joined(query, table).where(
        table.c.minute_start_s <= pruned_last_minute_s(boundary_of(table)))


def raw_and_rolled(raw: Select[Any], raw_table: Any, rolled: Select[Any], rolled_table: Any
                   ) -> CompoundSelect:
    """``raw`` UNION ALL ``rolled``, each half on its side of its node's boundary: one
    statement, so it is consistent even while the agent prunes in between (SQLite holds
    no snapshot across statements). The halves must select the same column types;
    callers add up rows that share a key."""
    return union_all(raw_side(raw, raw_table), rolled_side(rolled, rolled_table))


def every_unit_row() -> Subquery:
    """Every unit row of every job as ``(job_id, node, t_end_ms, unit, count)``: the raw
    ``job_units`` rows and the ``job_minute_units`` rows at their minute's end, UNION ALL
    in one statement (consistent while a maintain pass moves rows between them). Filter
    it by job: both tables are read by job."""
    raw, minutes = JOB_UNITS.c, JOB_MINUTE_UNITS.c
    minute_end_ms = (minutes.minute_start_s + literal_column("60")) * literal_column("1000")
    return union_all(
        select(raw.job_id, raw.node, raw.t_end_ms, raw.unit, raw.count),
        select(minutes.job_id, minutes.node, minute_end_ms.label("t_end_ms"), minutes.unit,
               minutes.count),
    ).subquery("unit_rows")


# -- A job's totals and the raw rows after them ---------------------------------------

def _job_in(column: Any, job_ids: Select[Any] | Sequence[str]) -> ColumnElement[bool]:
    """``column`` is one of ``job_ids``: a query's, or a list's (one array parameter on
    PostgreSQL, :func:`joulestat.store.schema.one_of`)."""
    if isinstance(job_ids, Select):
        return column.in_(job_ids)
    return one_of(column, list(job_ids))


def job_parts(job_ids: Select[Any] | Sequence[str] | None, node: str | None) -> Select[Any]:
    """The wanted (job, node) parts, each with its node's totals boundary as ``after_ms``
    (:func:`settled_until_ms`): what :func:`after_totals` joins a raw table to. A
    caller may add columns of ``job_nodes`` (or joins) before making it a common table
    expression."""
    parts = (select(JOB_NODES.c.job_id, JOB_NODES.c.node,
                    settled_until_ms().label("after_ms"))
             .select_from(JOB_NODES.join(NODES, NODES.c.node == JOB_NODES.c.node)))
    if job_ids is not None:
        parts = parts.where(_job_in(JOB_NODES.c.job_id, job_ids))
    if node is not None:
        parts = parts.where(JOB_NODES.c.node == node)
    return parts


def after_totals(parts: Any, table: Any) -> tuple[Any, ColumnElement[bool]]:
    """``parts`` (a common table expression of :func:`job_parts`' columns) joined to the
    raw ``table``'s rows after each part's totals boundary, and the condition to add to
    the statement's WHERE: ``(join, condition)``.

    Make ``parts`` MATERIALIZED so that SQLite (which keeps no statistics) loops over
    them and seeks each part's few recent rows by primary key; as a plain join it moves
    the job filter onto ``table`` and walks every raw row of the wanted jobs, the whole
    retention. The condition says that every part's boundary is at or after the
    earliest node's: a bound of its own lets PostgreSQL read only the raw rows after it
    (an index range, the day partitions it spans) instead of hashing the whole raw
    retention to join the parts.
    """
    rows = table.c
    joined = parts.join(table, and_(rows.job_id == parts.c.job_id, rows.node == parts.c.node,
                                    rows.t_end_ms > parts.c.after_ms))
    earliest = select(func.min(settled_until_ms())).select_from(NODES).scalar_subquery()
    return joined, rows.t_end_ms > earliest


def totals_of(parts: Any, table: Any) -> Any:
    """``parts`` (:func:`job_parts`' columns) joined to their rows of the totals
    ``table`` (``job_energy_totals``, ``job_unit_totals``): the settled half that
    :func:`after_totals` completes."""
    return parts.join(table, and_(table.c.job_id == parts.c.job_id,
                                  table.c.node == parts.c.node))


# The copies of the totals tables that a copied open part is read from
# (:mod:`joulestat.store.open_parts`): the same columns, for the open parts only.
_COPIES = {JOB_ENERGY_TOTALS.name: JOB_OPEN_ENERGY, JOB_UNIT_TOTALS.name: JOB_OPEN_UNITS}


def _settled_halves(parts: Any, table: Any, copies_where: Any = None
                    ) -> list[tuple[Any, Any, list[Any]]]:
    """Where ``parts``' totals are read, as (FROM, the totals table, conditions): the
    totals ``table``; or, when ``parts`` has a ``copied`` column (1 where its part's
    copy holds, :mod:`joulestat.store.open_parts`), the copy for those parts (those of
    them ``copies_where`` keeps, when given: the caller reads the others' copies added
    up) and ``table`` for the others."""
    if "copied" not in parts.c:
        return [(totals_of(parts, table), table, [])]
    copy = _COPIES[table.name]
    copied = [parts.c.copied == 1] + ([] if copies_where is None else [copies_where(copy)])
    return [(totals_of(parts, copy), copy, copied),
            (totals_of(parts, table), table, [parts.c.copied == 0])]


def part_energy_rows(parts: Any, carry: list[Any], copies_where: Any = None,
                     on_nodes: Any = None) -> CompoundSelect:
    """The energy rows of ``parts`` (:func:`job_parts`' columns): the raw rows after each
    part's totals boundary and its totals, as (``carry``..., component, source,
    dynamic_j, idle_j), summed by whoever reads them. A copied part's totals are read
    from its copy, where ``copies_where`` (if given) holds (:func:`_settled_halves`).
    ``on_nodes`` (a function of a node column to a condition), when ``parts`` keep to
    some nodes: said of the rows too, so that the database keeps them to those nodes
    before it joins them to the parts, not after."""
    raw = JOB_ENERGY.c
    recent, after = after_totals(parts, JOB_ENERGY)
    kept = _on_nodes(on_nodes)
    return union_all(
        select(*carry, raw.component, raw.source, raw.dynamic_j, raw.idle_j)
        .select_from(recent).where(after, kept(raw.node)),
        *(select(*carry, t.c.component, t.c.source, t.c.dynamic_j, t.c.idle_j)
          .select_from(joined).where(*conditions, kept(t.c.node))
          for joined, t, conditions in _settled_halves(parts, JOB_ENERGY_TOTALS,
                                                       copies_where)))


def part_unit_rows(parts: Any, carry: list[Any], wanted: Any, on_nodes: Any = None
                   ) -> CompoundSelect:
    """The unit rows of ``parts`` whose unit ``wanted`` keeps (a function of a unit
    column to a condition): raw after each part's boundary and totals, as
    (``carry``..., unit, count); ``on_nodes`` as :func:`part_energy_rows`'."""
    raw = JOB_UNITS.c
    recent, after = after_totals(parts, JOB_UNITS)
    kept = _on_nodes(on_nodes)
    return union_all(
        select(*carry, raw.unit, raw.count).select_from(recent)
        .where(after, wanted(raw.unit), kept(raw.node)),
        *(select(*carry, t.c.unit, t.c.count).select_from(joined)
          .where(*conditions, wanted(t.c.unit), kept(t.c.node))
          for joined, t, conditions in _settled_halves(parts, JOB_UNIT_TOTALS)))


def _on_nodes(on_nodes: Any) -> Any:
    """``on_nodes``, or a condition that keeps every row."""
    return on_nodes if on_nodes is not None else (lambda _node: true())


def recent_rows(table: Any, keys: list[Any], sums: list[Any],
                job_ids: Select[Any] | Sequence[str] | None, node: str | None,
                name: str = "parts") -> Select[Any]:
    """The raw rows of ``table`` that each (job, node) part has after its node's totals
    boundary: ``sums`` per job, node and ``keys`` (:func:`job_parts`,
    :func:`after_totals`)."""
    cte = job_parts(job_ids, node).cte(name).prefix_with("MATERIALIZED")
    rows = table.c
    joined, after = after_totals(cte, table)
    return (select(rows.job_id, rows.node, *keys, *sums).select_from(joined).where(after)
            .group_by(rows.job_id, rows.node, *keys))


def totals_rows(table: Any, columns: list[Any], job_ids: Select[Any] | Sequence[str] | None,
                node: str | None) -> Select[Any]:
    """``columns`` of the totals ``table`` for the wanted jobs (and node); without a job
    filter, every job but the unattributed remainder (``jobs`` never holds it)."""
    query = select(table.c.job_id, table.c.node, *columns)
    query = query.where(table.c.job_id != UNATTRIBUTED if job_ids is None
                        else _job_in(table.c.job_id, job_ids))
    if node is not None:
        query = query.where(table.c.node == node)
    return query
