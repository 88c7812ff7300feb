"""One statement over a PostgreSQL fleet's nodes, run as two: over the nodes named below
the middle one and from it, at once, on two connections that share one snapshot.

A fleet's comparison (:mod:`joulestat.store.job_pools`) is one statement that kept one
server process busy: 1.3 s on one of the server's two cores over a fleet's week
(benchmarks/fleet.py). Its rows are each of one node (a single-node part, a summed day
and their energy rows), so a statement over each half of the nodes gives rows that add
up to the whole's, of one moment. Here: the halves, the snapshot they share, the plan
settings such a statement needs, and its rows fetched as the driver's tuples.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select, true
from sqlalchemy.engine import Connection, Engine

from joulestat.store.schema import NODES


@dataclass(frozen=True, slots=True)
class NodeRange:
    """The nodes named from ``first`` (included) up to ``end`` (left out), None where
    unbounded: the share of a fleet one of :func:`read_by_node`'s statements reads."""

    first: str | None = None
    end: str | None = None

    def holds(self, node: Any) -> Any:
        """Whether ``node`` (a column) is one of these nodes, in SQL."""
        return and_(true(), *([] if self.first is None else [node >= self.first]),
                    *([] if self.end is None else [node < self.end]))


ALL_NODES = NodeRange()


def read_by_node(engine: Engine, fleet: bool, statement: Callable[[NodeRange], Any]
                  ) -> list[Any]:
    """The rows of ``statement`` over every node. On PostgreSQL, a fleet's read
    (``fleet``: the day sums stand in) is two statements, over the nodes named below and
    from the middle one, run at once on two connections that share one snapshot
    (``pg_export_snapshot``, as ``pg_dump --jobs`` does): each statement keeps one
    server process busy, and a fleet's comparison waited 1.3 s on one of a server's
    two cores (benchmarks/fleet.py). A single-node part, a summed day and their
    energy rows are each on one node, so the halves' rows add up to the whole's, of one
    moment. Else one statement."""
    if not fleet or engine.dialect.name != "postgresql":
        with engine.connect() as connection:
            _plan_for_fleet(connection, fleet)
            return list(connection.execute(statement(ALL_NODES)).all())
    with engine.connect() as lower, engine.connect() as upper:
        for connection in (lower, upper):
            connection.execution_options(isolation_level="REPEATABLE READ")
        snapshot = str(lower.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one())
        if not _SNAPSHOT_ID.fullmatch(snapshot):
            raise ValueError(f"unexpected snapshot id from PostgreSQL: {snapshot!r}")
        upper.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
        for connection in (lower, upper):
            _plan_for_fleet(connection, fleet)
        middle = _middle_node(lower)
        if middle is None:
            return list(lower.execute(statement(ALL_NODES)).all())
        with ThreadPoolExecutor(1, thread_name_prefix="joulestat-pools") as pool:
            later = pool.submit(_tuples, upper, statement(NodeRange(first=middle)))
            return _tuples(lower, statement(NodeRange(end=middle))) + later.result()


def _tuples(connection: Connection, statement: Any) -> list[Any]:
    """The rows of ``statement`` (one of a fleet's halves, on PostgreSQL) as the
    driver's own tuples, in binary. SQLAlchemy's ``Row`` around each of a half's 47,500
    rows took 0.04 s of the 0.07 s its fetch took, in the client after the server is
    done, and :func:`_added_up` reads rows by position either way. The statement is
    compiled for the connection's dialect and run on its DB-API cursor, in the
    connection's transaction (SQLAlchemy's "Working with the DBAPI cursor directly";
    ``binary`` is psycopg 3's ``Cursor.execute`` argument,
    https://www.psycopg.org/psycopg3/docs/api/cursors.html#psycopg.Cursor.execute)."""
    compiled = statement.compile(dialect=connection.dialect,
                                 compile_kwargs={"render_postcompile": True})
    cursor = connection.connection.cursor()
    try:
        cursor.execute(str(compiled), compiled.params, binary=True)
        return list(cursor.fetchall())
    finally:
        cursor.close()


_SNAPSHOT_ID = re.compile(r"[0-9A-Fa-f-]+")


def _middle_node(connection: Connection) -> str | None:
    """The node name that splits the store's nodes in two halves (None: under two)."""
    count = connection.execute(select(func.count()).select_from(NODES)).scalar_one()
    if count < 2:
        return None
    return str(connection.execute(select(NODES.c.node).order_by(NODES.c.node)
                                  .offset(count // 2).limit(1)).scalar_one())


def _plan_for_fleet(connection: Connection, summed: bool) -> None:
    """Settings for this transaction only, on PostgreSQL, for a statement over a
    fleet's parts (:func:`job_pools`, :func:`units_counted`). Its plan costs enough for
    PostgreSQL to compile it (JIT), 0.15 s of 1.3 that the run does not win back.
    PostgreSQL keeps no statistics of a common table expression and expects a few
    hundred rows of 10^5 (a fleet's running jobs): it sorted them for merges and groups,
    and spilled its hashes to disk at the default 4 MB; hashed in memory, the week's
    fleet (benchmarks/fleet.py) reads in 1.6 s instead of 2.8. Expecting one row of each
    step, it also looped over the 50,000 copied parts to seek their copies one by one
    (2.4 s against 1.95 hashed); a statement that reads no summed day (``summed``
    False) reads a few jobs, where those seeks are right."""
    if connection.dialect.name != "postgresql":
        return
    settings = ["jit = off", "work_mem = '64MB'", "enable_sort = off"]
    if summed:
        # The halves of a fleet's read (read_by_node) keep the server's cores busy
        # already: workers of their own only compete with the other half (the week's
        # fleet, job_pools: 1.05 to 1.09 s against 1.00 to 1.05 without, best of 9).
        settings += ["enable_nestloop = off", "max_parallel_workers_per_gather = 0"]
    for setting in settings:
        connection.exec_driver_sql(f"SET LOCAL {setting}")
