"""Migrations keep every figure, on SQLite and on PostgreSQL: a store written by the code
of an older revision is upgraded (and downgraded, and upgraded again) and reads the same.
The older writers are reproduced in tests/helpers/store_jobs.py."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import text

from joulestat.store import maintenance, migrate
from joulestat.store.jobs import job_detail
from joulestat.store.maintenance import SETTLE_MS
from joulestat.store.nodes import node_devices, node_energy_j
from joulestat.store.series import job_energy_series
from joulestat.store.writer import StoreWriter
from tests.helpers.rename_store import (
    JOBS,
    MERGED,
    OLD_DEVICES,
    TABLES,
    assert_same_figures,
    checkpoint,
    components,
    feed_as_before,
    figures,
    stored_checkpoint,
)
from tests.helpers.store_jobs import (
    DEVICES,
    RETENTION_S,
    T0,
    TRAINER,
    Totals,
    _assert_same_figures,
    _by_component,
    _figures,
    _maintain_as_before_0009,
    assert_conserved,
    compact_units_as_before_0014,
    count,
    downgrade,
    feed,
    job_total,
    make_job,
    make_tick,
    part_figures,
    save_jobs_before_0007,
    shares_for,
    totals_before_0010,
    writer_for,
    written_before_0014,
)
from tests.helpers.stores import Store


@written_before_0014
def test_upgrades_keep_figures(empty_store: Store) -> None:
    """``engine`` points at an empty database. Down to 0002 and up again (the totals
    backfilled from the rollups), then down to 0001 (ticks only) and up again."""
    engine = empty_store.engine
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals = feed(writer, T0, 600, ("a", "b"), units={"tokens": 3.0})
    # Prunes minutes 0..4; the totals cover all ten (up to 2 minutes before "now").
    result = writer.maintain(T0 + 600 + RETENTION_S - 270)
    assert result.raw_pruned_until_ms == round((T0 + 300) * 1000)
    assert result.totals_until_ms == round((T0 + 900) * 1000) - SETTLE_MS
    figures = _figures(engine)
    assert sum(figures["a"][0].values()) + sum(figures["a"][1].values()) == pytest.approx(
        job_total(totals, "a"), rel=1e-12)
    assert figures["a"][2] == {"tokens": 1800.0}
    ticks_before = node_energy_j(engine, TRAINER.node, T0, T0 + 600)

    downgrade(engine, "0002")
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    with engine.connect() as connection:
        # Backfilled to the prune boundary, which 0009's downgrade moved up to the
        # totals boundary (code before 0009 reads job rows by the prune boundary).
        assert connection.execute(text("SELECT totals_until_ms FROM nodes")).scalar() == round(
            (T0 + 900) * 1000) - SETTLE_MS
    _assert_same_figures(_figures(engine), figures)
    writer = writer_for(engine)  # an agent restarted on the upgraded store
    feed(writer, T0 + 960, 120, ("a", "b"), units={"tokens": 3.0}, totals=totals)
    assert writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    after = _figures(engine)
    assert sum(after["b"][0].values()) + sum(after["b"][1].values()) == pytest.approx(
        job_total(totals, "b"), rel=1e-12)
    assert after["b"][2] == {"tokens": 2160.0}

    downgrade(engine, "0001")
    assert count(engine, "tick_energy") > 0
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert migrate.is_at_head(engine)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(ticks_before)
    assert count(engine, "jobs") == 0 and count(engine, "job_energy_totals") == 0


@written_before_0014
def test_migration_0009_keeps_figures_of_a_store_written_before_it(empty_store: Store) -> None:
    """``engine`` points at an empty database. A store at 0008 as the code before 0009
    left it (one job row per job, device and tick, kept raw for the retention; minute
    rollups up to the prune boundary) is upgraded: every job, node and series total is
    the same, conservation holds, and the raw job rows up to the totals boundary are
    rolled into minutes; down to 0008 and up again, the same."""
    engine = empty_store.engine

    assert migrate.upgrade(engine, "0008") == "0008"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    totals: Totals = defaultdict(lambda: [0.0, 0.0])
    for i in range(600):  # a flush a tick: one row per job, device and tick, as before
        feed(writer, T0 + i, 1, ("a", "b"), units={"tokens": 3.0}, totals=totals)
        assert writer.flush()
    assert count(engine, "job_energy") == 600 * 2 * 3
    pruned_ms, totals_ms = _maintain_as_before_0009(engine, TRAINER.node,
                                                    T0 + 600 + RETENTION_S - 270)
    assert (pruned_ms, totals_ms) == (round((T0 + 300) * 1000), round((T0 + 780) * 1000))
    raw_left = count(engine, "job_energy")
    assert raw_left == 300 * 2 * 3  # minutes 5..9 raw, as the retention kept them
    figures = _figures(engine)
    assert sum(figures["a"][0].values()) + sum(figures["a"][1].values()) == pytest.approx(
        job_total(totals, "a"), rel=1e-12)
    node_before = node_energy_j(engine, TRAINER.node, T0, T0 + 600)
    series_before = {job: sum(d + i for _t, _c, d, i in job_energy_series(engine, job))
                     for job in ("a", "b")}
    detail_before = job_detail(engine, "a")

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    _assert_same_figures(_figures(engine), figures)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(node_before,
                                                                              rel=1e-12)
    for job, joules in series_before.items():
        assert sum(d + i for _t, _c, d, i in job_energy_series(engine, job)) == pytest.approx(
            joules, rel=1e-12)
    detail = job_detail(engine, "a")
    assert detail is not None and detail_before is not None
    assert detail.dynamic_j == pytest.approx(detail_before.dynamic_j, rel=1e-12)
    assert detail.units == pytest.approx(detail_before.units, rel=1e-12)
    assert count(engine, "job_energy") == 0  # all ten minutes were behind the totals
    # A unit row a minute and job, moved out of job_units by migration 0014.
    assert (count(engine, "job_units"), count(engine, "job_minute_units")) == (0, 10 * 2)
    assert_conserved(engine, TRAINER.node, expected_rows=2 * 10)

    # Down (the prune boundary moves up to the totals boundary) and up again.
    downgrade(engine, "0008")
    _assert_same_figures(_figures(engine), figures)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    _assert_same_figures(_figures(engine), figures)
    assert node_energy_j(engine, TRAINER.node, T0, T0 + 600) == pytest.approx(node_before,
                                                                              rel=1e-12)
    # Today's writer goes on where the old one stopped.
    writer = writer_for(engine)
    more = feed(writer, T0 + 960, 120, ("a", "b"), units={"tokens": 3.0})
    assert writer.flush() and writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    after = _figures(engine)
    assert sum(after["b"][0].values()) + sum(after["b"][1].values()) == pytest.approx(
        job_total(totals, "b") + job_total(more, "b"), rel=1e-12)
    assert_conserved(engine, TRAINER.node)


@written_before_0014
def test_migration_0010_splits_job_totals_by_their_sources(empty_store: Store) -> None:
    """``engine`` points at an empty database. A store at 0009 whose CPU source changed
    from RAPL to an estimate after five minutes is upgraded: each job's totals split by
    source as its shares were (the readers' energy by source and sources, what bounds are
    made of), the totals per component the same to the last bit; down to 0009 and up
    again, the same; today's writer then adds into the totals by source."""
    engine = empty_store.engine
    from joulestat.store.provenance import job_sources, jobs_energy_by_source

    estimate = "model:ccf-vcpu"
    assert migrate.upgrade(engine, "0009") == "0009"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0))
    expected: defaultdict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])

    def run(start_s: float, count: int, cpu_source: str) -> None:
        for i in range(count):
            t = make_tick(start_s + i + 1, 20.0 + i % 7, 150.0 + i % 11, cpu_source)
            shares = shares_for(t, ("a", "b"), i)
            writer.add(t)
            writer.add_shares(t, shares)
            for share in shares:
                if share.job is not None:
                    cell = expected[(share.job, share.component, share.source)]
                    cell[0] += share.dynamic_j
                    cell[1] += share.idle_j
        assert writer.flush()

    def by_source() -> dict[tuple[str, str, str], list[float]]:
        return {(row.job_id, row.component, row.source): [row.dynamic_j, row.idle_j]
                for rows in jobs_energy_by_source(engine, ["a", "b"]).values() for row in rows}

    def assert_by_source() -> None:
        found = by_source()
        assert found.keys() == expected.keys()
        for key, (dynamic_j, idle_j) in expected.items():
            assert found[key] == pytest.approx([dynamic_j, idle_j], rel=1e-9), key

    run(T0, 300, "rapl")  # minutes 0..4 measured, 5..9 estimated: whole minutes each
    run(T0 + 300, 300, estimate)
    with totals_before_0010():  # totals over all ten minutes, without a source
        result = writer.maintain(T0 + 600 + 180)
    assert result is not None and result.totals_until_ms >= round((T0 + 600) * 1000)
    assert count(engine, "job_energy") == 0  # every share is in the totals and minutes
    figures = part_figures(engine)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert part_figures(engine) == figures  # exact: the split's parts add up to the total
    assert_by_source()
    assert job_sources(engine, "a") == {"accelerator": ["nvml_energy"],
                                        "cpu": [estimate, "rapl"]}

    downgrade(engine, "0009")
    assert part_figures(engine) == figures
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert_by_source()

    # Today's writer goes on: its shares are summed into the totals by their own source.
    writer = writer_for(engine)
    run(T0 + 840, 120, "rapl")
    assert writer.maintain(T0 + 960 + 180) is not None
    assert count(engine, "job_energy") == 0
    assert_by_source()


@written_before_0014
def test_migration_0011_keeps_job_minutes(empty_store: Store) -> None:
    """``engine`` points at an empty database. A store at 0010 holding two jobs' minutes
    is upgraded: every job minute is kept, each job's series and the node's conservation
    read the same. On PostgreSQL the table then has no unique key but a (job_id, node)
    index; a row written twice (which no writer does) is summed by the readers, and the
    downgrade sums it into one row under the restored key, no joule lost. Up again,
    today's writer rolls its next minutes and deleting a job moves its minutes into the
    remainder, conservation holding."""
    engine = empty_store.engine
    from joulestat.store.job_delete import delete_jobs

    node = TRAINER.node
    assert migrate.upgrade(engine, "0010") == "0010"
    writer = writer_for(engine)
    for job in ("a", "b"):
        writer.save_job(make_job(job, T0, ended_s=T0 + 600))
    feed(writer, T0, 600, ("a", "b"))
    result = writer.maintain(T0 + 600 + 180)
    assert result is not None and result.totals_until_ms >= round((T0 + 600) * 1000)
    series = {job: job_energy_series(engine, job) for job in ("a", "b")}
    minutes = count(engine, "job_minute_energy")
    assert minutes >= 2 * 10 * 2  # two jobs, ten minutes, two devices
    assert_conserved(engine, node)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert count(engine, "job_minute_energy") == minutes
    assert {job: job_energy_series(engine, job) for job in ("a", "b")} == series
    assert_conserved(engine, node)

    def energy_j() -> float:
        with engine.connect() as connection:
            return connection.execute(text(
                "SELECT sum(dynamic_j + idle_j) FROM job_minute_energy")).scalar_one()

    if engine.dialect.name == "postgresql":
        whole_j = energy_j()
        with engine.begin() as connection:
            doubled_j = connection.execute(text(
                "INSERT INTO job_minute_energy SELECT * FROM job_minute_energy "
                "WHERE job_id = 'a' AND component = 'cpu' ORDER BY minute_start_s LIMIT 1 "
                "RETURNING dynamic_j + idle_j")).scalar_one()
        doubled = _by_component(series["a"])
        doubled["cpu"] += doubled_j
        assert _by_component(job_energy_series(engine, "a")) == pytest.approx(doubled, rel=1e-12)
        downgrade(engine, "0010")
        assert count(engine, "job_minute_energy") == minutes
        assert energy_j() == pytest.approx(whole_j + doubled_j, rel=1e-12)
        with engine.begin() as connection:
            key = connection.execute(text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conname = 'pk_job_minute_energy'")).scalar_one()
            connection.execute(text(  # the injected double, taken out again
                "UPDATE job_minute_energy SET dynamic_j = dynamic_j / 2, idle_j = idle_j / 2 "
                "WHERE job_id = 'a' AND component = 'cpu' AND minute_start_s = "
                "(SELECT min(minute_start_s) FROM job_minute_energy WHERE job_id = 'a')"))
        assert key == "PRIMARY KEY (job_id, node, minute_start_s, component, device)"
        for job in ("a", "b"):
            assert _by_component(job_energy_series(engine, job)) == pytest.approx(
                _by_component(series[job]), rel=1e-12)
        assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    else:
        downgrade(engine, "0010")  # nothing to do on SQLite, where the key stays
        assert count(engine, "job_minute_energy") == minutes
        assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert_conserved(engine, node)

    writer = writer_for(engine)
    writer.save_job(make_job("c", T0 + 900))
    feed(writer, T0 + 900, 300, ("c",))
    assert writer.maintain(T0 + 1200 + 180) is not None
    assert count(engine, "job_minute_energy") > minutes
    assert_conserved(engine, node)
    delete_jobs(engine, ["a"])
    with engine.connect() as connection:
        left = connection.execute(text(
            "SELECT count(*) FROM job_minute_energy WHERE job_id = 'a'")).scalar_one()
    assert left == 0
    assert_conserved(engine, node)


def test_migration_0014_moves_unit_minutes_out_of_job_units(empty_store: Store) -> None:
    """``engine`` points at an empty database. A store at 0013 written as before 0014
    (each settled minute's unit rows merged into one ``job_units`` row) with a row an
    import left at a bin's end is upgraded: the merged rows move into
    ``job_minute_units``, the raw rows after the boundary and the imported one stay, and
    every job's units, unit rows and unit series read the same. Down to 0013,
    ``job_units`` is again exactly what it was. Up again, today's passes move the next
    minutes and the units still add up to what was counted."""
    engine = empty_store.engine
    from joulestat.store.series import job_unit_rows, job_unit_series

    def units_of(job: str) -> dict[str, float]:
        detail = job_detail(engine, job)
        assert detail is not None
        return dict(detail.units)

    def figures() -> dict[str, tuple[Any, ...]]:
        return {job: (units_of(job), job_unit_rows(engine, job),
                      job_unit_series(engine, job, 60)) for job in ("a", "b")}

    def job_units() -> list[tuple[Any, ...]]:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(
                "SELECT job_id, node, t_end_ms, unit, count FROM job_units "
                "ORDER BY job_id, node, t_end_ms, unit"))]

    assert migrate.upgrade(engine, "0013") == "0013"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maintenance, "roll_up_units", compact_units_as_before_0014)
        writer = writer_for(engine)
        for job in ("a", "b"):
            writer.save_job(make_job(job, T0))
        feed(writer, T0, 600, ("a", "b"), units={"tokens": 3.0})
        assert writer.flush()
        result = writer.maintain(T0 + 660)
    boundary_ms = round((T0 + 540) * 1000)
    assert result is not None and result.totals_until_ms == boundary_ms
    imported_ms = round((T0 + 90.5) * 1000)  # a bin's end, not a minute's
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO job_units (job_id, node, t_end_ms, unit, count) "
            "VALUES ('a', :node, :t, 'samples', 7.0)"), {"node": TRAINER.node, "t": imported_ms})
    before_rows = job_units()
    merged = [r for r in before_rows if r[2] <= boundary_ms and r[2] % 60_000 == 0]
    assert len(merged) == 2 * 9  # minutes 1..9 of two jobs
    kept = [r for r in before_rows if r not in merged]
    assert len(kept) > 1 and all(r[2] > boundary_ms for r in kept if r[2] != imported_ms)

    assert migrate.upgrade(engine, "0014") == "0014"
    before = figures()
    assert count(engine, "job_minute_units") == len(merged)
    assert job_units() == kept
    for job in ("a", "b"):
        assert before[job][0] == {"tokens": pytest.approx(3.0 * 600, rel=1e-12)}
        assert sum(c for _n, _t, u, c in before[job][1] if u == "tokens") == pytest.approx(
            3.0 * 600, rel=1e-12)
    assert [t for _n, t, _u, _c in before["b"][1]][:9] == [T0 + 60 * m for m in range(1, 10)]
    assert (TRAINER.node, imported_ms / 1000, "samples", 7.0) in before["a"][1]

    downgrade(engine, "0013")
    assert job_units() == before_rows
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert figures() == before

    writer = writer_for(engine)
    feed(writer, T0 + 600, 300, ("a", "b"), units={"tokens": 3.0})
    assert writer.flush() and writer.maintain(T0 + 900 + 180) is not None
    assert count(engine, "job_minute_units") == 2 * 15  # minutes 1..15 of two jobs
    assert job_units() == [("a", TRAINER.node, imported_ms, "samples", 7.0)]
    for job in ("a", "b"):
        assert units_of(job) == {"tokens": pytest.approx(3.0 * 900, rel=1e-12)}


@written_before_0014
def test_migration_0006_renames_every_row_and_keeps_every_figure(empty_store: Store) -> None:
    """``engine`` points at an empty database. Rows at 0005 under ``gpu``; up to head
    they are ``accelerator`` with every figure the same; down to 0005 they are ``gpu``
    again, the same; then rows under both names (today's writer on the downgraded store)
    are merged by the next upgrade, their joules added."""
    engine = empty_store.engine
    assert migrate.upgrade(engine, "0005") == "0005"
    writer = StoreWriter(engine, TRAINER, OLD_DEVICES, raw_retention_s=RETENTION_S)
    save_jobs_before_0007(engine, [make_job(job, T0) for job in JOBS])
    feed_as_before(writer, T0, 600)
    writer.save_checkpoint(checkpoint("gpu"), "boot-1", T0 + 600)
    # Prunes minutes 0..4 (rolled up) and sums all ten into the job totals (today's
    # writer then rolls their job windows into minutes and deletes them: 0009).
    with totals_before_0010():  # the store's totals have no source yet
        assert writer.maintain(T0 + 600 + RETENTION_S - 270) is not None
    assert all(count(engine, table) > 0 for table in TABLES if table != "job_energy")
    assert components(engine) == {"cpu", "gpu"}
    before = figures(engine)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    assert_same_figures(figures(engine, {"accelerator": "gpu"}), before)
    assert stored_checkpoint(engine) == checkpoint("accelerator")

    downgrade(engine, "0005")
    assert components(engine) == {"cpu", "gpu"}
    assert_same_figures(figures(engine), before)
    assert stored_checkpoint(engine) == checkpoint("gpu")

    # Today's writer on the downgraded store: the same job and node under both names.
    writer = StoreWriter(engine, TRAINER, DEVICES, raw_retention_s=RETENTION_S)
    feed(writer, T0 + 960, 120, JOBS)
    with totals_before_0010():
        assert writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    assert components(engine) == {"cpu", "gpu", "accelerator"}
    jobs = part_figures(engine)
    node = node_energy_j(engine, TRAINER.node, T0 - 60, T0 + 10_000)
    assert all(jobs[job][0]["gpu"] > 0 < jobs[job][0]["accelerator"] for job in JOBS)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    merged = part_figures(engine)
    for job in JOBS:
        for kind in (0, 1):  # dynamic, idle
            was, now = jobs[job][kind], merged[job][kind]
            assert now == pytest.approx({"cpu": was["cpu"],
                                         "accelerator": was["gpu"] + was["accelerator"]},
                                        rel=1e-12), (job, kind)
        assert merged[job][2] == jobs[job][2]
    assert node_energy_j(engine, TRAINER.node, T0 - 60, T0 + 10_000) == pytest.approx(
        {("cpu", "0"): node[("cpu", "0")],
         ("accelerator", "0"): node[("gpu", "0")] + node[("accelerator", "0")]}, rel=1e-12)
    # one description of the device: today's writer's, which registered it last
    assert [(d.component, d.device) for d in node_devices(engine, TRAINER.node)] == [
        ("accelerator", "0"), ("cpu", "0")]


@written_before_0014
def test_migration_0006_merges_a_key_held_under_both_names(empty_store: Store) -> None:
    """Every table holding one key under both names at 0005 (never written so by an
    agent, but possible in a downgraded store): the upgrade adds the old row's joules
    (and covered seconds) to the new row's and drops the old one; a key under the old
    name alone is renamed."""
    engine = empty_store.engine
    assert migrate.upgrade(engine, "0005") == "0005"
    StoreWriter(engine, TRAINER, OLD_DEVICES, raw_retention_s=RETENTION_S)  # as "gpu"
    StoreWriter(engine, TRAINER, DEVICES, raw_retention_s=RETENTION_S)  # "accelerator"
    with engine.begin() as connection:
        for table, (row, summed) in MERGED.items():
            alone = {"job_id": "b"} if "job_id" in row else {"device": "1"}
            for component, value, other in (("gpu", 1.0, {}), ("accelerator", 2.0, {}),
                                            ("gpu", 4.0, alone)):
                values = {**row, **other, "node": TRAINER.node, "component": component,
                          **dict.fromkeys(summed, value)}
                connection.execute(text(
                    f"INSERT INTO {table} ({', '.join(values)}) "
                    f"VALUES ({', '.join(':' + k for k in values)})"), values)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    with engine.connect() as connection:
        for table, (row, summed) in MERGED.items():
            key = "job_id" if "job_id" in row else "device"
            found = connection.execute(text(
                f"SELECT {key}, component, {', '.join(summed)} FROM {table} "
                f"ORDER BY {key}")).all()
            assert [tuple(r) for r in found] == [
                (row.get(key, "0"), "accelerator", *[3.0] * len(summed)),
                ("b" if key == "job_id" else "1", "accelerator", *[4.0] * len(summed))], table
    assert [(d.component, d.device, d.model) for d in node_devices(engine, TRAINER.node)] == [
        ("accelerator", "0", "A100"), ("cpu", "0", "")]
