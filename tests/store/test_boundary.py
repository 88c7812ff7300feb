"""The reading rule of :mod:`joulestat.store.schema`: raw rows after the node's prune
boundary, minute rollups up to it, each tick counted once wherever the boundary sits.

The store is written by the agent's own StoreWriter and rolled up (both copies of every
minute kept); the boundary is then moved by hand to every minute, as a prune in
progress would leave it, and the sums must not move."""

from __future__ import annotations

from sqlalchemy import BigInteger, func, literal, select, text, update

from joulestat.store.nodes import node_energy_j
from joulestat.store.read_rule import (
    ends_within,
    minute_end_ms,
    minute_ends_within,
    pruned_last_minute_s,
    raw_and_rolled,
    raw_side,
    rolled_side,
)
from joulestat.store.schema import JOB_MINUTE_ENERGY, MINUTE_ENERGY, NODES, TICK_ENERGY, ms
from tests.helpers.store_rows import T0, tick, writer_for

TICKS, MINUTES = TICK_ENERGY.c, MINUTE_ENERGY.c


def energy_sum(engine, since_s: float, until_s: float) -> float:
    """Node energy in ``(since_s, until_s]`` through :func:`raw_and_rolled` alone."""
    since, until = ms(since_s), ms(until_s)
    raw = select(func.sum(TICKS.energy_j)).where(*ends_within(TICKS.t_end_ms, since, until))
    rolled = select(func.sum(MINUTES.energy_j)).where(
        *minute_ends_within(MINUTES.minute_start_s, since, until))
    with engine.connect() as connection:
        return sum(float(j or 0.0) for (j,) in connection.execute(
            raw_and_rolled(raw, TICK_ENERGY, rolled, MINUTE_ENERGY)))


def set_boundary(engine, boundary_ms: int | None) -> None:
    with engine.begin() as connection:
        connection.execute(update(NODES).values(raw_pruned_until_ms=boundary_ms))


def test_every_tick_counts_once_wherever_the_boundary_is(engine):
    writer = writer_for(engine, raw_retention_s=86_400.0)  # rolled up, nothing pruned
    for i in range(1, 601):  # ten minutes of 1 s ticks, 10 J + 100 J each
        writer.add(tick(T0 + i, cpu_j=10.0, gpu_j=100.0))
    writer.flush()
    writer.maintain(T0 + 600 + 150)
    with engine.connect() as connection:
        rolled = connection.execute(text("SELECT count(*) FROM minute_energy")).scalar_one()
    assert rolled == 20  # every minute is in both tables now

    windows = [(T0, T0 + 600), (T0 + 60, T0 + 300), (T0 + 120, T0 + 540)]
    for boundary_s in (None, *range(int(T0), int(T0) + 601, 60)):
        set_boundary(engine, None if boundary_s is None else ms(boundary_s))
        for since_s, until_s in windows:
            expected = 110.0 * (until_s - since_s)
            assert energy_sum(engine, since_s, until_s) == expected, (boundary_s, since_s)
            assert sum(node_energy_j(engine, "node-a", since_s, until_s).values()) == expected


def test_nothing_pruned_means_no_rollup_counts(engine):
    writer = writer_for(engine, raw_retention_s=86_400.0)
    writer.add(tick(T0 + 30, cpu_j=1.0, gpu_j=2.0))
    writer.flush()
    writer.maintain(T0 + 300)
    set_boundary(engine, None)
    query = rolled_side(select(func.count()).select_from(MINUTE_ENERGY), MINUTE_ENERGY)
    with engine.connect() as connection:
        assert connection.execute(query).scalar_one() == 0
        raw = raw_side(select(func.count()).select_from(TICK_ENERGY), TICK_ENERGY)
        assert connection.execute(raw).scalar_one() == 2


def test_the_last_pruned_minute_and_minute_ends(engine):
    boundary_ms = ms(T0 + 180)
    with engine.connect() as connection:
        last = connection.execute(select(pruned_last_minute_s(
            select(func.max(boundary_ms)).scalar_subquery()))).scalar_one()
        # A BIGINT, as minute_start_s is: PostgreSQL would do an INTEGER's sums in 32 bits.
        start = literal(int(T0), BigInteger)
        end = connection.execute(select(minute_end_ms(func.max(start)))).scalar_one()
    assert last == T0 + 120  # the minute (T0 + 120, T0 + 180] is the last one pruned
    assert end == ms(T0 + 60)
    since, until = minute_ends_within(MINUTES.minute_start_s, ms(T0), ms(T0 + 120))
    assert since.right.value == T0 - 60 and until.right.value == T0 + 60  # integers


def test_a_half_keeps_the_joins_it_already_has():
    rolled = JOB_MINUTE_ENERGY.c
    query = (select(rolled.component, MINUTES.source)
             .select_from(JOB_MINUTE_ENERGY.join(
                 MINUTE_ENERGY, MINUTES.minute_start_s == rolled.minute_start_s)))
    sql = str(rolled_side(query, JOB_MINUTE_ENERGY))
    assert "JOIN minute_energy" in sql
    assert "JOIN nodes ON nodes.node = job_minute_energy.node" in sql
    assert sql.count("FROM") == 1
