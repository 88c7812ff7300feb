"""The SQL store against a real PostgreSQL server (started by tests/helpers/pg.py)."""

from __future__ import annotations

import importlib.util
import itertools
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.core.tick import Tick, TickEntry
from joulestat.devices.sensor import DeviceInfo
from joulestat.host.identity import NodeInfo
from joulestat.store import migrate
from joulestat.store.engine import dialect_insert, make_engine
from joulestat.store.jobs import job_detail, list_jobs
from joulestat.store.nodes import (
    latest_power_w,
    list_nodes,
    node_devices,
    node_energy_j,
)
from joulestat.store.rows import PendingJobs, write_pending
from joulestat.store.schema import METADATA
from joulestat.store.writer import StoreWriter
from tests.helpers import store_jobs as jobs
from tests.helpers.agent_labels_store import (
    check_agent_labels_kept_apart_and_merged,
    check_migration_moves_cpu_source,
)
from tests.helpers.job_delete_store import check_delete_keeps_node_energy
from tests.helpers.job_refs import check_resolver
from tests.helpers.pg import PostgresServer
from tests.helpers.rename_store import check_both_names_merge, check_rename_keeps_figures
from tests.helpers.store_rows import (
    MINUTES_ACROSS_ENDS,
    T0,
    migrated_engine,
    minute_rows,
    raw_count,
    tick,
    write_across_minute_ends,
)

pytestmark = pytest.mark.postgres

NODE = NodeInfo("node-pg", "p5.48xlarge", "us-east-1", "EPYC", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
           DeviceInfo("accelerator", "0", "nvml_energy", model="H100", uuid="GPU-9", index=0)]
RETENTION_S = 600.0
_names = itertools.count()


@pytest.fixture()
def pg_url(pg: PostgresServer) -> str:
    return pg.create_database(f"joulestat_{next(_names)}")


@pytest.fixture()
def engine(pg_url: str) -> Iterator[Engine]:
    with migrated_engine(pg_url) as engine:
        yield engine


def test_migrations_reach_head_and_match_the_models(pg_url):
    engine = make_engine(pg_url)
    assert migrate.current_revision(engine) is None
    assert migrate.upgrade(pg_url) == migrate.HEAD_REVISION
    assert migrate.is_at_head(engine)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION  # rerun: a no-op

    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection, opts={
            "include_object": migrate.on_this_dialect(connection.dialect.name)}), METADATA) == []
        key = connection.execute(text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'pk_tick_energy'"
        )).scalar_one()
        # Job minutes: no unique key here, a (job_id, node) index instead (migration 0011).
        minute_keys = connection.execute(text(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'job_minute_energy'::regclass "
            "AND contype = 'p'")).scalar_one()
        minute_indexes = connection.execute(text(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'job_minute_energy'")
        ).scalars().all()
    assert key == "PRIMARY KEY (node, t_end_ms, component, device)"
    assert minute_keys == 0
    assert [d.split(" USING ")[1] for d in minute_indexes] == ["btree (job_id, node)"]
    engine.dispose()


def test_writer_is_idempotent(engine):
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=RETENTION_S)
    assert node_devices(engine, NODE.node) == sorted(DEVICES, key=lambda d: d.component)
    writer.add(tick(T0 + 1))
    writer.add(tick(T0 + 1))  # the same tick twice in one batch
    assert writer.flush()
    writer.add(tick(T0 + 1))  # and in a later batch
    writer.add(tick(T0 + 2))
    assert writer.flush()
    assert raw_count(engine) == 4
    assert node_energy_j(engine, NODE.node, T0, T0 + 60) == {("cpu", "0"): 20.0,
                                                             ("accelerator", "0"): 200.0}
    StoreWriter(engine, NODE, DEVICES, raw_retention_s=RETENTION_S)  # a restart
    assert [n.node for n in list_nodes(engine)] == [NODE.node]


def test_rollup_boundaries_and_source_changes(engine):
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=RETENTION_S)
    write_across_minute_ends(writer)
    assert writer.maintain(T0 + 150) is not None  # idempotent
    assert minute_rows(engine, NODE.node) == MINUTES_ACROSS_ENDS


def test_retention_keeps_totals_and_counts_late_rows(engine):
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=RETENTION_S)
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


def test_server_outage_keeps_rows_until_it_returns(pg, engine, caplog):
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=RETENTION_S)
    writer.add(tick(T0 + 1))
    assert writer.flush()
    assert pg.stop().returncode == 0
    try:
        writer.add(tick(T0 + 2))
        writer.add(tick(T0 + 3))
        with caplog.at_level(logging.WARNING, logger="joulestat.store.writer"):
            assert not writer.flush()
            assert writer.maintain(T0 + 700) is None
        assert "keeping 4 rows in memory" in caplog.text
        assert writer.buffered_rows == 4
    finally:
        assert pg.start().returncode == 0, pg.log_tail()
    assert writer.flush() and writer.buffered_rows == 0
    assert node_energy_j(engine, NODE.node, T0, T0 + 60) == {("cpu", "0"): 30.0,
                                                             ("accelerator", "0"): 300.0}


def test_db_upgrade_command_against_postgres(pg):
    url = pg.create_database("joulestat_cli")
    others = ("joulestat.cli.agent", "joulestat.cli.estimate")
    if all(importlib.util.find_spec(name) for name in others):
        command = [sys.executable, "-m", "joulestat.cli.main", "db"]
    else:  # the other commands are not written yet: run db on its own
        command = [sys.executable, "-m", "joulestat.cli.db"]
    done = subprocess.run([*command, "upgrade", "--db", url], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    done = subprocess.run([*command, "current", "--db", url], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and f"{migrate.HEAD_REVISION} (head)" in done.stdout
    engine = make_engine(url)
    assert migrate.is_at_head(engine)
    engine.dispose()


def test_readers_never_create_or_migrate_a_postgres_store(pg):
    """`joulestat jobs` on an empty database (no alembic_version) or on one a migration
    behind stops with a message, and the database stays as it was: on a shared store a
    reader's migration would change it under agents still running the old code.
    `joulestat jobs delete` follows the same rule."""
    url = pg.create_database("joulestat_readers")
    jobs_command = [sys.executable, "-m", "joulestat.cli.main", "jobs", "--db", url]
    delete_command = [*jobs_command[:-2], "delete", "abcd1234", "--yes", "--db", url]
    for command in (jobs_command, delete_command):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stdout
        assert "not a joulestat store" in done.stderr and "joulestat db upgrade" in done.stderr
    engine = make_engine(url)
    assert migrate.current_revision(engine) is None
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        )).scalar() == 0
    assert migrate.upgrade(engine, "0005") == "0005"
    for command in (jobs_command, delete_command):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stdout
        assert "joulestat db upgrade" in done.stderr and "0005" in done.stderr
    assert migrate.current_revision(engine) == "0005"
    engine.dispose()


# -- per-job energy (the scenarios of tests/helpers/store_jobs.py) ------------------------


def test_job_writes_are_idempotent(engine):
    jobs.check_every_write_is_idempotent(engine)


def test_multi_node_job_is_one_job_with_two_kinds_of_node(engine):
    jobs.check_multi_node_job_is_one_job(engine)


def test_job_conservation_holds_through_rollup_and_retention(engine):
    jobs.check_conservation_and_retention(engine)


def test_running_jobs_survive_a_restart(engine):
    jobs.check_running_jobs_survive_a_restart(engine)


def test_checkpoint_round_trip(engine):
    jobs.check_checkpoint_round_trip(engine)


def test_job_delete_keeps_node_energy_on_partitioned_tables(engine):
    check_delete_keeps_node_energy(engine)  # tests/helpers/job_delete_store.py


def test_job_references_resolve_as_on_sqlite(engine):
    check_resolver(engine)  # ids, names, prefixes (exact: PostgreSQL's LIKE has case)


def test_upgrades_keep_figures(pg_url):
    engine = make_engine(pg_url)
    jobs.check_upgrades_keep_figures(engine)
    engine.dispose()


def test_migration_0014_moves_unit_minutes_on_postgres(pg_url):
    engine = make_engine(pg_url)
    jobs.check_0014_moves_unit_minutes(engine)
    engine.dispose()


def test_migration_0011_drops_the_job_minute_key_on_postgres(pg_url):
    engine = make_engine(pg_url)
    jobs.check_0011_keeps_job_minutes(engine)
    engine.dispose()


def test_migration_0010_splits_job_totals_by_source_on_postgres(pg_url):
    engine = make_engine(pg_url)
    jobs.check_0010_keeps_sources(engine)
    engine.dispose()


def test_migration_0009_keeps_figures_on_partitioned_tables(pg_url):
    engine = make_engine(pg_url)
    jobs.check_0009_keeps_figures(engine)
    engine.dispose()


def test_accelerator_rename_keeps_figures_on_partitioned_tables(pg_url):
    """Migration 0006 renames gpu to accelerator through the day-partitioned raw tables
    (0005) and back, every figure the same (tests/helpers/rename_store.py)."""
    engine = make_engine(pg_url)
    try:
        check_rename_keeps_figures(engine)
        with engine.connect() as connection:
            assert connection.execute(text(
                "SELECT relkind FROM pg_class WHERE relname = 'tick_energy'")).scalar() == "p"
    finally:
        engine.dispose()


def test_accelerator_rename_merges_a_key_held_under_both_names(pg_url):
    engine = make_engine(pg_url)
    try:
        check_both_names_merge(engine)
    finally:
        engine.dispose()


def test_agent_labels_are_kept_apart_and_two_policies_merge_to_mixed(pg_url):
    """``jsonb`` in the upsert as ``json_patch`` on SQLite (tests/helpers/agent_labels_store.py)."""
    engine = make_engine(pg_url)
    try:
        check_agent_labels_kept_apart_and_merged(engine)
    finally:
        engine.dispose()


def test_migration_0007_moves_runs_cpu_source_out_of_the_labels_and_back(pg_url):
    engine = make_engine(pg_url)
    try:
        check_migration_moves_cpu_source(engine)
    finally:
        engine.dispose()


def test_two_nodes_ending_a_job_at_once_leave_it_ended(pg_url, engine):
    """The second agent waits on the jobs row, then sees the first one's end."""
    loader = jobs.writer_for(engine, jobs.LOADER)
    other_engine = make_engine(pg_url)
    trainer = jobs.writer_for(other_engine, jobs.TRAINER)
    loader.save_job(jobs.make_job("dist", T0, {"a": "1"}))
    trainer.save_job(jobs.make_job("dist", T0, {"b": "2"}))
    assert loader.flush() and trainer.flush()

    ending = PendingJobs()
    ending.save_job(jobs.make_job("dist", T0, {"c": "3"}, ended_s=T0 + 40), jobs.LOADER)
    with engine.connect() as connection:
        transaction = connection.begin()
        write_pending(connection, dialect_insert(engine), ending, jobs.LOADER.node)
        trainer.save_job(jobs.make_job("dist", T0, ended_s=T0 + 45))
        flushed: list[bool] = []
        thread = threading.Thread(target=lambda: flushed.append(trainer.flush()))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the second agent did not wait for the jobs row lock"
        transaction.commit()
    thread.join(30)
    assert flushed == [True]
    found = job_detail(engine, "dist")
    assert (found.status, found.ended_s) == ("ended", T0 + 45)
    assert found.labels == {"a": "1", "b": "2", "c": "3"}
    assert [j.id for j in list_jobs(engine, running=False)] == ["dist"]
    other_engine.dispose()
