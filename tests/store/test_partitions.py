"""What only PostgreSQL has: daily partitions of the raw tables (agent/store/maintenance.py;
the baseline migration makes the tables so: tests/store/test_migrations.py). Writers make
partitions ahead and drop settled ones, a node still counting rows in a partition keeps
it, and figures never change.

Figures are read with plain SQL that follows the reading rule of agent/store/schema.py
(raw rows after each node's boundary, rollups and totals up to it), so the store's read
modules are not what is tested here."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import defaultdict
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import maintenance as partitions
from joulestat.store.engine import make_engine
from joulestat.store.maintenance import (
    DAY_MS,
    OVERDUE_MS,
    PARTITION_SCHEMA,
    ensure_partitions,
    list_partitions,
    partition_name,
    visible_nodes,
)
from joulestat.store.writer import StoreWriter
from tests.helpers.store_jobs import DEVICES, make_job, shares_for
from tests.helpers.stores import Stores

D0 = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp())  # a UTC midnight, in seconds
DAY_S = DAY_MS // 1000
HOUR_S = 3600
STEP_S = 300  # 5-minute ticks keep days of data small
_names = itertools.count()


def node(name: str) -> NodeInfo:
    return NodeInfo(name, "c5.xlarge", "eu-west-1", "Xeon", "0.1.0")


@pytest.fixture()
def engine(pg_stores: Stores) -> Engine:
    """A PostgreSQL store at the head revision."""
    return pg_stores.new().engine


class Expected:
    """What was fed: joules per node and per job (dynamic + idle)."""

    def __init__(self) -> None:
        self.node: defaultdict[str, float] = defaultdict(float)
        self.job: defaultdict[str, float] = defaultdict(float)


def feed(writer: StoreWriter, after_s: int, until_s: int, expected: Expected,
         jobs: tuple[str, ...] = ("a", "b")) -> None:
    """5-minute ticks ending in (after_s, until_s], with their job shares, flushed."""
    for t in range(after_s + STEP_S, until_s + 1, STEP_S):
        i = t // STEP_S
        tick = Tick(t - STEP_S, t, (TickEntry("cpu", "0", "rapl", 3000.0 + i % 7),
                                    TickEntry("accelerator", "0", "nvml_energy", 45000.0 + i % 11)))
        shares = shares_for(tick, jobs, i)
        writer.add(tick)
        writer.add_shares(tick, shares)
        expected.node[writer.node.node] += sum(e.energy_j for e in tick.entries)
        for share in shares:
            if share.job is not None:
                expected.job[share.job] += share.dynamic_j + share.idle_j
    assert writer.flush()


def writer_for(engine: Engine, name: str, retention_s: float) -> StoreWriter:
    writer = StoreWriter(engine, node(name), DEVICES, raw_retention_s=retention_s)
    for job in ("a", "b"):
        writer.save_job(make_job(job, D0))
    return writer


def sums(engine: Engine, sql: str) -> dict[str, float]:
    with engine.connect() as connection:
        return {str(k): float(j) for k, j in connection.execute(text(
            f"SELECT k, sum(j) FROM ({sql}) AS parts WHERE k <> '' GROUP BY k"))}


def node_j(engine: Engine) -> dict[str, float]:
    """Per node: raw ticks after its boundary plus minute rollups up to it."""
    return sums(engine, "SELECT t.node AS k, t.energy_j AS j FROM tick_energy t JOIN nodes n"
                " ON n.node = t.node WHERE n.raw_pruned_until_ms IS NULL"
                " OR t.t_end_ms > n.raw_pruned_until_ms UNION ALL"
                " SELECT m.node, m.energy_j FROM minute_energy m JOIN nodes n ON n.node = m.node"
                " WHERE m.minute_start_s * 1000 + 60000 <= n.raw_pruned_until_ms")


def job_j(engine: Engine) -> dict[str, float]:
    """Per job: the job totals plus the raw shares after each node's totals boundary."""
    return sums(engine, "SELECT job_id AS k, dynamic_j + idle_j AS j FROM job_energy_totals"
                " UNION ALL SELECT s.job_id, s.dynamic_j + s.idle_j FROM job_energy s"
                " JOIN nodes n ON n.node = s.node"
                " WHERE s.t_end_ms > COALESCE(n.totals_until_ms, -1)")


def job_j_from_rollups(engine: Engine) -> dict[str, float]:
    """Per job the other way: raw shares plus job minutes, each side of the job tables'
    boundary (the totals boundary)."""
    return sums(engine, "SELECT s.job_id AS k, s.dynamic_j + s.idle_j AS j FROM job_energy s"
                " JOIN nodes n ON n.node = s.node WHERE n.totals_until_ms IS NULL"
                " OR s.t_end_ms > n.totals_until_ms UNION ALL"
                " SELECT m.job_id, m.dynamic_j + m.idle_j FROM job_minute_energy m"
                " JOIN nodes n ON n.node = m.node"
                " WHERE m.minute_start_s * 1000 + 60000 <= n.totals_until_ms")


def assert_figures(engine: Engine, expected: Expected) -> None:
    assert node_j(engine) == pytest.approx(dict(expected.node), rel=1e-12)
    assert job_j(engine) == pytest.approx(dict(expected.job), rel=1e-12)
    assert job_j_from_rollups(engine) == pytest.approx(dict(expected.job), rel=1e-12)


def day_partitions(engine: Engine, table: str = "tick_energy") -> set[str]:
    """The partition names of ``table`` for the simulated days (the migration also makes
    the real today's, which these tests leave alone)."""
    with engine.connect() as connection:
        names = {p.name for p in list_partitions(connection, table) if p.upper_ms is not None}
    return {n for n in names if n.startswith(f"{table}_p2025")}


def name_of(day: int, table: str = "tick_energy") -> str:
    return partition_name(table, D0 // DAY_S + day)


def scalar(engine: Engine, sql: str, **params: object) -> object:
    with engine.connect() as connection:
        return connection.execute(text(sql), params).scalar()


# -- writers over days -----------------------------------------------------------------------


def test_a_writer_makes_partitions_ahead_and_drops_settled_days(engine):
    expected = Expected()
    writer = writer_for(engine, "solo", retention_s=DAY_S)
    assert writer.maintain(D0) is not None  # the simulated clock's first day: partitions
    assert day_partitions(engine) == {name_of(d) for d in range(4)}
    assert day_partitions(engine, "job_energy") == {name_of(d, "job_energy") for d in range(4)}
    for hour in range(0, 5 * 24, 2):
        now = D0 + hour * HOUR_S
        feed(writer, now, now + 2 * HOUR_S, expected)
        result = writer.maintain(now + 2 * HOUR_S + 30)
        assert result is not None
        assert_figures(engine, expected)  # before and after every drop alike
        if hour == 44:  # the boundary (now less a day) is still in day 0
            assert day_partitions(engine) == {name_of(d) for d in range(0, 5)}
        if hour == 46:  # now D0 + 2 days: the boundary reached day 0's end
            assert result.raw_pruned_until_ms == (D0 + DAY_S) * 1000
            assert day_partitions(engine) == {name_of(d) for d in range(1, 6)}
    # Now D0 + 5 days: the boundary is 4 days in, so days 0..3 are gone, and the
    # partitions reach 3 days ahead of the clock.
    assert day_partitions(engine) == {name_of(d) for d in range(4, 9)}
    assert day_partitions(engine, "job_energy") == {name_of(d, "job_energy")
                                                    for d in range(4, 9)}
    assert result.raw_pruned_until_ms == (D0 + 4 * DAY_S) * 1000
    assert result.pruned_rows == 0  # nothing deleted row by row: the days were dropped
    # The rows left are those of the days kept (the first of them is behind the boundary).
    assert scalar(engine, "SELECT min(t_end_ms) FROM tick_energy") == (D0 + 4 * DAY_S) * 1000


def test_a_node_still_counting_rows_keeps_the_partition(engine):
    """Two nodes with different retentions, and a third whose boundary is NULL: a day
    goes only when no node has a row there after its own boundary."""
    expected = Expected()
    short = writer_for(engine, "short", retention_s=DAY_S)
    long = writer_for(engine, "long", retention_s=2 * DAY_S)
    fresh = writer_for(engine, "fresh", retention_s=7 * DAY_S)
    for writer in (short, long):
        assert writer.maintain(D0) is not None
    for hour in range(0, 3 * 24 + 4, 2):
        now = D0 + hour * HOUR_S
        for writer in (short, long):
            feed(writer, now, now + 2 * HOUR_S, expected)
        if hour == 48:  # a late node whose first rows (a spool) end in day 1
            feed(fresh, D0 + DAY_S + 12 * HOUR_S, D0 + DAY_S + 13 * HOUR_S, expected)
        if hour >= 48:
            feed(fresh, now, now + 2 * HOUR_S, expected)
            assert fresh.maintain(now + 2 * HOUR_S + 30) is not None
        for writer in (short, long):
            assert writer.maintain(now + 2 * HOUR_S + 30) is not None
        assert_figures(engine, expected)
        if hour in (50, 66):  # short's boundary is past day 0, long's still in it
            assert name_of(0) in day_partitions(engine)
            with engine.connect() as connection:
                [day0] = [p for p in list_partitions(connection, "tick_energy")
                          if p.name == name_of(0)]
                assert visible_nodes(connection, day0) == ["long"]
            # long's rows there all stay; short's go row by row once overdue.
            assert scalar(engine, f"SELECT count(*) FROM {PARTITION_SCHEMA}.{name_of(0)} "
                          "WHERE node = 'long'") == (DAY_S // STEP_S - 1) * 2
            short_bound_ms = (now + 2 * HOUR_S - DAY_S) * 1000
            short_left = scalar(engine, f"SELECT count(*) FROM {PARTITION_SCHEMA}."
                                f"{name_of(0)} WHERE node = 'short'")
            overdue = max(0, (short_bound_ms - OVERDUE_MS) // 1000 - D0) // STEP_S
            assert short_left == (DAY_S // STEP_S - 1 - overdue) * 2
            assert (hour, overdue) in ((50, 0), (66, 14 * HOUR_S // STEP_S))
    # long's boundary (D0 + 1 day + 4 h) has passed day 0: gone. Day 1 is held by long
    # (boundary inside it) and by fresh (NULL boundary, a row in it).
    assert name_of(0) not in day_partitions(engine)
    assert name_of(0, "job_energy") not in day_partitions(engine, "job_energy")
    with engine.connect() as connection:
        [day1] = [p for p in list_partitions(connection, "tick_energy")
                  if p.name == name_of(1)]
        assert visible_nodes(connection, day1) == ["fresh", "long"]
    assert scalar(engine, "SELECT raw_pruned_until_ms FROM nodes WHERE node = 'fresh'") is None
    assert_figures(engine, expected)


# -- the safety nets -------------------------------------------------------------------------


def test_rows_outside_every_day_partition_go_to_default_and_are_pruned_there(engine, caplog):
    expected = Expected()
    writer = writer_for(engine, "stray-clock", retention_s=DAY_S)
    with caplog.at_level(logging.WARNING, logger="joulestat.store.maintenance"):
        feed(writer, D0, D0 + 6 * HOUR_S, expected)  # no partition for 2025 yet
        assert scalar(engine, f"SELECT count(*) FROM {PARTITION_SCHEMA}.tick_energy_default"
                      ) == 6 * HOUR_S // STEP_S * 2
        assert writer.maintain(D0 + 6 * HOUR_S + 30) is not None  # the writer goes on
    assert f"cannot create partition {PARTITION_SCHEMA}.{name_of(0)}" in caplog.text
    assert "rows of node stray-clock are in" in caplog.text
    assert name_of(0) not in day_partitions(engine) and name_of(1) in day_partitions(engine)
    assert_figures(engine, expected)
    # The next days have partitions; the DEFAULT rows are deleted once behind the boundary.
    for hour in range(6, 2 * 24, 2):
        now = D0 + hour * HOUR_S
        feed(writer, now, now + 2 * HOUR_S, expected)
        assert writer.maintain(now + 2 * HOUR_S + 30) is not None
        assert_figures(engine, expected)
    assert scalar(engine, f"SELECT count(*) FROM {PARTITION_SCHEMA}.tick_energy_default") == 0
    assert scalar(engine, f"SELECT count(*) FROM {PARTITION_SCHEMA}.job_energy_default") == 0


def test_concurrent_creators_wait_for_each_other(engine):
    other = make_engine(engine.url)
    now = D0 + 10 * DAY_S
    with engine.connect() as first:
        transaction = first.begin()
        created = ensure_partitions(first, now, days_ahead=1).created
        assert created == [name_of(d, t) for t in ("tick_energy", "job_energy")
                           for d in (10, 11)]
        results: list[list[str]] = []

        def second() -> None:
            with other.begin() as connection:
                results.append(ensure_partitions(connection, now, days_ahead=2).created)

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the second creator did not wait for the first"
        transaction.commit()
    thread.join(30)
    assert results == [[name_of(12), name_of(12, "job_energy")]]  # only what was missing
    other.dispose()


def test_a_partition_that_cannot_be_made_now_is_tried_again(engine, monkeypatch, caplog):
    """Creating a partition locks its table; a writer that waits too long for that logs
    it, goes on, and tries at its next pass."""
    monkeypatch.setattr(partitions, "LOCK_TIMEOUT_MS", 300)
    monkeypatch.setattr(partitions, "RETRY_S", 0.0)
    writer = writer_for(engine, "patient", retention_s=DAY_S)
    now = D0 + 20 * DAY_S
    with engine.connect() as holder:
        transaction = holder.begin()  # a new partition must scan DEFAULT: held up here
        holder.exec_driver_sql(
            f"LOCK TABLE {PARTITION_SCHEMA}.tick_energy_default IN SHARE MODE")
        with caplog.at_level(logging.WARNING, logger="joulestat.store.maintenance"):
            assert writer.maintain(now) is not None
        transaction.rollback()
    assert f"cannot create partition {PARTITION_SCHEMA}.{name_of(20)} now" in caplog.text
    assert name_of(20) not in day_partitions(engine)
    assert writer.maintain(now + 60) is not None
    assert {name_of(d) for d in range(20, 24)} <= day_partitions(engine)
    assert {name_of(d, "job_energy") for d in range(20, 24)} <= day_partitions(
        engine, "job_energy")
