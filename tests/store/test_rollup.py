"""Minute rollups, retention and settled totals, on SQLite and on PostgreSQL: which
minute a tick belongs to (and its sources when they change inside it), late rows, rows
refused behind the settled boundary, pruning that keeps totals."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from sqlalchemy import text

from joulestat.core.tick import Tick, TickEntry
from joulestat.store.maintenance import SETTLE_MS
from joulestat.store.nodes import (
    latest_power_w,
    latest_tick_end_s,
    latest_tick_ends_s,
    minute_energy_rows,
    node_energy_j,
    nodes_latest_power_w,
)
from joulestat.store.writer import StoreWriter
from tests.helpers.store_rows import (
    DEVICES,
    MINUTES_ACROSS_ENDS,
    NODE,
    RETENTION_S,
    T0,
    minute_rows,
    raw_count,
    tick,
    write_across_minute_ends,
    writer_for,
)


def test_rollup_assigns_each_tick_to_the_minute_its_end_falls_in(engine):
    writer = writer_for(engine)
    write_across_minute_ends(writer)
    assert minute_rows(engine, "node-a") == MINUTES_ACROSS_ENDS
    assert writer.maintain(T0 + 150) is not None  # idempotent
    assert minute_rows(engine, "node-a") == MINUTES_ACROSS_ENDS


def test_rollup_recomputes_the_latest_minute_and_is_idempotent(engine):
    writer = writer_for(engine)
    writer.add(tick(T0 + 30))
    writer.maintain(T0 + 60)  # minute 0 rolled while its last tick is still in flight
    writer.add(tick(T0 + 60))
    writer.maintain(T0 + 61)
    writer.maintain(T0 + 61)
    rows = minute_energy_rows(engine, "node-a", T0, T0 + 60)
    assert [(r.energy_j, r.covered_s) for r in rows] == [(200.0, 2.0), (20.0, 2.0)]


def test_retention_deletes_only_rolled_up_raw_rows_and_totals_do_not_change(engine):
    writer = writer_for(engine)
    for i in range(1, 1801):  # 30 minutes of 1 s ticks
        writer.add(tick(T0 + i, cpu_j=float(i % 7), gpu_j=50.0 + i % 11))
    writer.flush()
    windows = [(T0, T0 + 1800), (T0 + 120, T0 + 600), (T0 + 540, T0 + 1260)]
    before = [node_energy_j(engine, "node-a", *w) for w in windows]
    now = T0 + 1800 + 30
    result = writer.maintain(now)
    boundary_ms = round((now - RETENTION_S) // 60 * 60 * 1000)
    assert result.raw_pruned_until_ms == boundary_ms
    with engine.connect() as connection:
        oldest_raw = connection.execute(text("SELECT min(t_end_ms) FROM tick_energy")).scalar()
        minutes = connection.execute(text(
            "SELECT count(DISTINCT minute_start_s) FROM minute_energy "
            "WHERE (minute_start_s + 60) * 1000 <= :b"), {"b": boundary_ms}).scalar()
    assert oldest_raw == boundary_ms + 1000
    assert minutes == (boundary_ms / 1000 - T0) / 60  # every pruned minute is rolled up
    assert result.pruned_rows == 2 * (boundary_ms / 1000 - T0)
    after = [node_energy_j(engine, "node-a", *w) for w in windows]
    for b, a in zip(before, after, strict=True):
        assert a.keys() == b.keys()
        for key in b:
            assert a[key] == pytest.approx(b[key], rel=1e-12)
    again = writer.maintain(now)
    assert (again.pruned_rows, again.raw_pruned_until_ms) == (0, boundary_ms)
    assert node_energy_j(engine, "node-a", *windows[0]) == pytest.approx(after[0])


def test_late_rows_for_a_rolled_minute_are_counted_before_pruning(engine):
    writer = writer_for(engine)
    for i in range(1, 301):
        writer.add(tick(T0 + i))
    result = writer.maintain(T0 + 300)  # minutes 0..4 rolled up, nothing old enough to prune
    assert result.totals_until_ms == round((T0 + 300) * 1000) - SETTLE_MS
    # A tick of minute 4 that was still on its way: after the settled boundary, so taken.
    writer.add(Tick(T0 + 250.5, T0 + 250.75, (TickEntry("cpu", "0", "rapl", 1000.0),)))
    assert writer.flush()
    writer.maintain(T0 + 300 + RETENTION_S)  # now minutes 0..4 lose their raw rows
    assert raw_count(engine) == 0
    assert node_energy_j(engine, "node-a", T0, T0 + 300)[("cpu", "0")] == 3000.0 + 1000.0


def test_rows_ending_before_the_settled_boundary_are_refused_whole(engine, caplog):
    writer = writer_for(engine)
    for i in range(1, 301):
        writer.add(tick(T0 + i))
    writer.maintain(T0 + 300)
    before = node_energy_j(engine, "node-a", T0, T0 + 300)
    # A clock stepped back: this tick ends before the boundary the totals cover.
    writer.add(Tick(T0 + 10.5, T0 + 10.75, (TickEntry("cpu", "0", "rapl", 1000.0),)))
    with caplog.at_level(logging.ERROR, logger="joulestat.store.writer"):
        assert writer.flush()
    assert "dropped 1 rows ending at or before the node's settled boundary" in caplog.text
    assert writer.dropped_rows == 1
    writer.maintain(T0 + 300 + RETENTION_S)
    assert node_energy_j(engine, "node-a", T0, T0 + 300) == before


def test_latest_power_w_uses_the_newest_tick_then_rollups(engine):
    assert latest_power_w(engine, "node-a") == {}
    writer = writer_for(engine)
    writer.add(tick(T0 + 1))
    writer.add(tick(T0 + 3, cpu_j=30.0, gpu_j=300.0, length_s=2.0))
    writer.flush()
    assert latest_power_w(engine, "node-a") == {("cpu", "0"): 15.0, ("accelerator", "0"): 150.0}
    writer.maintain(T0 + 60 + RETENTION_S)  # raw rows pruned: minute average remains
    assert raw_count(engine) == 0
    assert latest_power_w(engine, "node-a") == {("cpu", "0"): 40.0 / 3,
                                                ("accelerator", "0"): 400 / 3}


def test_every_nodes_latest_power_and_tick_end_are_read_at_once_as_each_alone(engine):
    """The Overview reads every node's power now and last tick in one statement each:
    the same figures as one node at a time, for a node with raw ticks, one with only
    minute rollups left, one with no data, and one not asked for."""
    live = writer_for(engine)
    live.add(tick(T0 + 1))
    live.add(tick(T0 + 3, cpu_j=30.0, gpu_j=300.0, length_s=2.0))
    live.flush()
    rolled = StoreWriter(engine, replace(NODE, node="node-b"), DEVICES,
                         raw_retention_s=RETENTION_S)
    rolled.add(tick(T0 + 1, cpu_j=6.0))
    rolled.add(tick(T0 + 2, cpu_j=9.0))
    rolled.flush()
    rolled.maintain(T0 + 60 + RETENTION_S)
    StoreWriter(engine, replace(NODE, node="node-c"), DEVICES, RETENTION_S).flush()  # no data
    names = ["node-a", "node-b", "node-c"]
    each_power = {n: latest_power_w(engine, n) for n in names}
    assert each_power["node-a"] == {("cpu", "0"): 15.0, ("accelerator", "0"): 150.0}
    assert each_power["node-b"] == {("cpu", "0"): 7.5, ("accelerator", "0"): 100.0}
    assert nodes_latest_power_w(engine) == {n: p for n, p in each_power.items() if p}
    assert nodes_latest_power_w(engine, ["node-b"]) == {"node-b": each_power["node-b"]}
    each_end = {n: latest_tick_end_s(engine, n) for n in names}
    assert each_end == {"node-a": T0 + 3, "node-b": T0 + 60, "node-c": None}
    assert latest_tick_ends_s(engine) == {"node-a": T0 + 3, "node-b": T0 + 60}
    assert latest_tick_ends_s(engine, ["node-a", "node-x"]) == {"node-a": T0 + 3}


def test_retention_keeps_totals_and_counts_late_rows_after_the_boundary(engine):
    writer = writer_for(engine)
    for i in range(1, 1201):  # 20 minutes
        writer.add(tick(T0 + i, cpu_j=float(i % 5), gpu_j=40.0 + i % 3))
    writer.maintain(T0 + 600)  # rolls minutes 0..9 up, prunes nothing yet
    # Late for rolled minute 8, still after the settled boundary (T0 + 480): counted.
    writer.add(Tick(T0 + 500.5, T0 + 500.75, (TickEntry("cpu", "0", "rapl", 1000.0),)))
    assert writer.flush()
    windows = [(T0, T0 + 1200), (T0 + 60, T0 + 540), (T0 + 480, T0 + 900)]
    before = [node_energy_j(engine, NODE.node, *w) for w in windows]
    result = writer.maintain(T0 + 1200 + 30)
    assert result.raw_pruned_until_ms == round((T0 + 600) * 1000)
    assert result.pruned_rows == 2 * 600 + 1
    after = [node_energy_j(engine, NODE.node, *w) for w in windows]
    for b, a in zip(before, after, strict=True):
        assert a == pytest.approx(b, rel=1e-12)
    assert after[0][("cpu", "0")] == pytest.approx(sum(i % 5 for i in range(1, 1201)) + 1000)
    assert latest_power_w(engine, NODE.node) == {("cpu", "0"): 0.0, ("accelerator", "0"): 40.0}

