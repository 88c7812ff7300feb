"""The SQL store on SQLite: migrations, the agent's writer, rollups, retention, queries."""

from __future__ import annotations

import importlib.util
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

import agent
from agent.identity import NodeInfo
from agent.sensors.base import DeviceInfo
from agent.store import StoreError, default_db_url, make_engine, migrate
from agent.store.tables import METADATA
from agent.store.queries import (
    latest_power_w,
    list_nodes,
    minute_energy_rows,
    node_devices,
    node_energy_j,
)
from agent.store.rollup import SETTLE_MS
from agent.store.writer import CORE_TABLES, StoreWriter
from agent.tick import Tick, TickEntry

REPO = Path(__file__).resolve().parents[2]
NODE = NodeInfo("node-a", "m5.large", "eu-west-1", "Xeon", "0.1.0")
DEVICES = [DeviceInfo("cpu", "0", "rapl", model="Xeon", index=0),
           DeviceInfo("gpu", "0", "nvml_energy", model="H100", uuid="GPU-1", index=0)]
T0 = 1_700_000_040.0  # a minute boundary (1_700_000_040 = 28_333_334 * 60)
RETENTION_S = 600.0


def tick(t1_s: float, cpu_j: float = 10.0, gpu_j: float = 100.0, length_s: float = 1.0,
         gpu_source: str = "nvml_energy") -> Tick:
    return Tick(t1_s - length_s, t1_s, (TickEntry("cpu", "0", "rapl", cpu_j),
                                        TickEntry("gpu", "0", gpu_source, gpu_j)))


def raw_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM tick_energy")).scalar_one()


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture()
def engine(db_url: str) -> Engine:
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def writer_for(engine: Engine, **kwargs) -> StoreWriter:
    kwargs.setdefault("raw_retention_s", RETENTION_S)
    return StoreWriter(engine, NODE, DEVICES, **kwargs)


# -- engine -------------------------------------------------------------------------------


def test_default_db_url_uses_xdg_data_home_and_creates_the_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'xdg' / 'joulestat' / 'joulestat.db'}"
    assert (tmp_path / "xdg" / "joulestat").is_dir()

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "share" / "joulestat"
    assert default_db_url() == f"sqlite:///{expected / 'joulestat.db'}"
    assert expected.is_dir()


def test_sqlite_connections_get_wal_busy_timeout_and_foreign_keys(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}", busy_timeout_s=1.5)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1500
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


@pytest.mark.parametrize(("url", "message"), [
    ("not a url", "is not a database URL"),
    ("mysql://u@h/db", "unsupported database 'mysql'"),
    ("postgresql+nodriver://u@h/db", "no SQLAlchemy driver"),
    ("sqlite:////no/such/dir/x.db", "directory /no/such/dir does not exist"),
])
def test_make_engine_names_the_url_when_unusable(url, message):
    with pytest.raises(StoreError, match=message) as caught:
        make_engine(url)
    assert url.split("://")[0] in str(caught.value)


def test_make_engine_refuses_an_sqlite_library_too_old(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    with pytest.raises(StoreError, match=r"SQLite library is 3\.31\.1; joulestat needs 3\.35"):
        make_engine(f"sqlite:///{tmp_path / 'x.db'}")


def test_make_engine_hides_the_password():
    with pytest.raises(StoreError) as caught:
        make_engine("postgresql+nodriver://user:s3cret@host/db")
    assert "s3cret" not in str(caught.value) and "user:***@host" in str(caught.value)


# -- migrations ---------------------------------------------------------------------------


def test_head_revision_constant_equals_alembic_head():
    assert migrate.HEAD_REVISION == migrate.script_head_revision()


def test_upgrade_reaches_head_and_schema_matches_models(db_url):
    engine = make_engine(db_url)
    assert migrate.current_revision(engine) is None and not migrate.is_at_head(engine)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert migrate.is_at_head(engine)
    assert migrate.upgrade(db_url) == migrate.HEAD_REVISION  # rerun by URL: a no-op

    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), METADATA)
        assert diff == []
        table_sql = connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'tick_energy'").scalar()
    assert "WITHOUT ROWID" in table_sql


def test_core_tables_used_by_the_writer_match_the_models():
    assert sorted(core.name for core in CORE_TABLES) == sorted(METADATA.tables)
    for core in CORE_TABLES:
        model = METADATA.tables[core.name]
        assert [c.name for c in core.columns] == [c.name for c in model.columns], core.name
        for column in core.columns:
            assert type(column.type) is type(model.columns[column.name].type), column.name


def test_missing_migrations_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "__file__", str(tmp_path / "agent" / "__init__.py"))
    with pytest.raises(StoreError, match="migrations not found at .*pip install -e"):
        migrate.migrations_dir()


def test_agent_path_imports_neither_alembic_nor_the_orm(tmp_path):
    """The agent's path (engine, is_at_head, writer with jobs, restart reads) stays light."""
    db = tmp_path / "light.db"
    migrate.upgrade(f"sqlite:///{db}")
    script = f"""
import sys
from agent.identity import NodeInfo
from agent.store import make_engine
from agent.store.migrate import is_at_head
from agent.store.writer import StoreWriter
from agent.tick import Tick, TickEntry
from agent.attribution import Share
from agent.jobs.registry import Job
from agent.store.job_queries import load_checkpoint, load_running_jobs
engine = make_engine("sqlite:///{db}")
assert is_at_head(engine)
writer = StoreWriter(engine, NodeInfo("n", "t", "r", "c", "v"), [], raw_retention_s=600)
writer.save_job(Job(id="j", name="j", kind="training", labels={{}}, pids={{1}}, started_s=1e9))
for i in range(5000):
    tick = Tick(1e9 + i, 1e9 + i + 1, (TickEntry("cpu", "0", "rapl", 1.0),))
    writer.add(tick)
    writer.add_shares(tick, [Share("j", "cpu", "0", "rapl", 0.5, 0.25),
                             Share(None, "cpu", "0", "rapl", 0.25, 0.0)])
    writer.add_units("j", tick.t1_s, {{"tokens": 1.0}})
writer.save_checkpoint({{"c": 1}}, "boot", 1e9)
writer.maybe_flush(0.0)
writer.maintain(1e9 + 5001)
assert load_checkpoint(engine, "n") is not None
assert load_running_jobs(engine, "n")[0].units == {{"tokens": 5000.0}}
heavy = sorted(m for m in sys.modules if m.startswith(("alembic", "sqlalchemy.orm")))
# VmHWM, not ru_maxrss: that one carries the parent's peak across fork + exec.
with open("/proc/self/status") as status:
    peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(peak_kib // 1024, heavy)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=1)
    peak_mib, heavy = int(out[0]), out[1].strip()
    assert heavy == "[]"
    # The whole agent must stay under 50 MiB; Python + SQLAlchemy alone take ~40 of it.
    assert peak_mib < 46, f"store path peak RSS {peak_mib} MiB"


# -- writer -------------------------------------------------------------------------------


def test_writer_registers_node_and_devices(engine):
    writer_for(engine)
    [summary] = list_nodes(engine)
    assert (summary.node, summary.instance_type, summary.region) == ("node-a", "m5.large",
                                                                     "eu-west-1")
    assert node_devices(engine, "node-a") == DEVICES


def test_same_tick_twice_is_counted_once(engine):
    writer = writer_for(engine)
    writer.add(tick(T0 + 1))
    writer.add(tick(T0 + 1))  # twice in one batch
    assert writer.flush()
    writer.add(tick(T0 + 1))  # and again in a later batch
    writer.add(tick(T0 + 2))
    assert writer.flush()
    assert raw_count(engine) == 4
    assert node_energy_j(engine, "node-a", T0, T0 + 60) == {("cpu", "0"): 20.0,
                                                            ("gpu", "0"): 200.0}
    writer.maintain(T0 + 120)
    writer.maintain(T0 + 120)
    assert [r.energy_j for r in minute_energy_rows(engine, "node-a", T0, T0 + 60)] == [20.0,
                                                                                     200.0]


def test_rollup_assigns_each_tick_to_the_minute_its_end_falls_in(engine):
    writer = writer_for(engine)
    writer.add(tick(T0 + 60, length_s=2.0))  # ends exactly on the minute: closes minute 0
    writer.add(tick(T0 + 60.5, cpu_j=1.0, gpu_j=2.0, length_s=0.5))  # first tick of minute 1
    writer.add(tick(T0 + 61, cpu_j=3.0, gpu_j=4.0, length_s=0.5, gpu_source="nvml_power"))
    writer.add(tick(T0 + 125))  # minute 2 is not complete at now = T0 + 150
    assert writer.maintain(T0 + 150) is not None
    rows = minute_energy_rows(engine, "node-a", T0 - 60, T0 + 600)
    as_tuples = [(r.minute_start_s, r.component, r.energy_j, r.covered_s, r.source)
                 for r in rows]
    assert as_tuples == [
        (T0, "cpu", 10.0, 2.0, "rapl"),
        (T0, "gpu", 100.0, 2.0, "nvml_energy"),
        (T0 + 60, "cpu", 4.0, 1.0, "rapl"),
        (T0 + 60, "gpu", 6.0, 1.0, "nvml_energy+nvml_power"),
    ]


def test_rollup_recomputes_the_latest_minute_and_is_idempotent(engine):
    writer = writer_for(engine)
    writer.add(tick(T0 + 30))
    writer.maintain(T0 + 60)  # minute 0 rolled while its last tick is still in flight
    writer.add(tick(T0 + 60))
    writer.maintain(T0 + 61)
    writer.maintain(T0 + 61)
    rows = minute_energy_rows(engine, "node-a", T0, T0 + 60)
    assert [(r.energy_j, r.covered_s) for r in rows] == [(20.0, 2.0), (200.0, 2.0)]


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
    with caplog.at_level(logging.ERROR, logger="agent.store.writer"):
        assert writer.flush()
    assert "dropped 1 rows ending at or before the node's settled boundary" in caplog.text
    assert writer.dropped_rows == 1
    writer.maintain(T0 + 300 + RETENTION_S)
    assert node_energy_j(engine, "node-a", T0, T0 + 300) == before


def test_locked_database_keeps_rows_and_writes_them_later(db_url, engine, caplog):
    locked = make_engine(db_url, busy_timeout_s=0.05)
    writer = writer_for(locked)
    other = sqlite3.connect(db_url.removeprefix("sqlite:///"))
    other.execute("BEGIN EXCLUSIVE")
    for i in range(1, 11):
        writer.add(tick(T0 + i))
    with caplog.at_level(logging.WARNING, logger="agent.store.writer"):
        assert not writer.flush()
        assert writer.maintain(T0 + 600) is None
    assert writer.buffered_rows == 20
    assert "keeping 20 rows in memory" in caplog.text and "locked" in caplog.text
    other.rollback()
    other.close()
    assert writer.flush() and writer.buffered_rows == 0
    assert node_energy_j(engine, "node-a", T0, T0 + 60) == {("cpu", "0"): 100.0,
                                                            ("gpu", "0"): 1000.0}


def test_unavailable_database_keeps_rows_and_writes_them_once_it_exists(tmp_path, caplog):
    directory = tmp_path / "later"
    directory.mkdir()
    url = f"sqlite:///{directory / 'store.db'}"
    engine = make_engine(url)
    directory.rmdir()  # the volume went away after the agent started
    with caplog.at_level(logging.WARNING, logger="agent.store.writer"):
        writer = writer_for(engine)
        writer.add(tick(T0 + 1))
        assert not writer.flush()
    assert "cannot register node 'node-a'" in caplog.text
    assert writer.buffered_rows == 2
    directory.mkdir()
    migrate.upgrade(engine)
    assert writer.flush()
    assert [n.node for n in list_nodes(engine)] == ["node-a"]
    assert raw_count(engine) == 2


def test_full_buffer_drops_oldest_rows_and_says_how_many(engine, caplog):
    writer = writer_for(engine, max_batch_rows=10, max_buffered_rows=100)
    with caplog.at_level(logging.ERROR, logger="agent.store.writer"):
        for i in range(1, 76):  # 150 rows and no flush, as while the store is away
            writer.add(tick(T0 + i))
    # Over the bound (102 rows) it drops down to 90 (10 % headroom), five times here.
    assert writer.dropped_rows == 60 and writer.buffered_rows == 90
    assert "dropped the 12 oldest rows (ticks ending" in caplog.text
    assert "60 dropped in total" in caplog.text
    assert writer.flush()
    assert raw_count(engine) == 90
    energy = node_energy_j(engine, "node-a", T0 + 30, T0 + 75)
    assert energy == {("cpu", "0"): 450.0, ("gpu", "0"): 4500.0}  # the newest survived


def test_full_buffer_folds_job_rows_before_dropping_any_node_row(engine, caplog):
    """Twenty jobs' shares fill the buffer: who used the oldest ticks' energy is folded
    into their unattributed rows, but every tick of node energy is kept."""
    from agent.attribution import Share
    from agent.store.job_queries import unattributed_check

    writer = writer_for(engine, max_batch_rows=50, max_buffered_rows=400)
    jobs = [f"job-{n}" for n in range(20)]
    with caplog.at_level(logging.ERROR, logger="agent.store.writer"):
        for i in range(1, 31):
            t = tick(T0 + i)
            writer.add(t)
            writer.add_shares(t, [Share(j, "cpu", "0", "rapl", 0.4, 0.1) for j in jobs]
                              + [Share(None, "cpu", "0", "rapl", 0.0, 0.0)])
            writer.add_units(jobs[0], t.t1_s, {"sample": 1.0})
    assert writer.dropped_rows == 0 and writer.folded_rows > 0
    assert "folded the job shares of the ticks ending" in caplog.text
    assert "node energy is kept whole" in caplog.text
    assert "job rows arrive faster than the store thread writes them" in caplog.text
    assert writer.flush()
    assert raw_count(engine) == 60  # all 30 ticks, cpu and gpu
    assert node_energy_j(engine, "node-a", T0, T0 + 31) == {("cpu", "0"): 300.0,
                                                            ("gpu", "0"): 3000.0}
    for _t, component, _d, node_j, sum_j in unattributed_check(engine, "node-a"):
        if component == "cpu":
            assert sum_j == pytest.approx(node_j)


def test_maybe_flush_waits_for_the_interval_and_backs_off_on_failure(db_url, engine):
    writer = writer_for(engine, flush_interval_s=5.0)
    writer.add(tick(T0 + 1))
    assert writer.maybe_flush(100.0)  # first call flushes at once
    writer.add(tick(T0 + 2))
    assert not writer.maybe_flush(104.0) and writer.buffered_rows == 2
    assert writer.maybe_flush(105.0) and writer.buffered_rows == 0

    other = sqlite3.connect(db_url.removeprefix("sqlite:///"), timeout=0)
    writer.engine = make_engine(db_url, busy_timeout_s=0.01)
    other.execute("BEGIN EXCLUSIVE")
    writer.add(tick(T0 + 3))
    assert not writer.maybe_flush(110.0)  # fails: next try in 10 s, not 5
    other.rollback()
    assert not writer.maybe_flush(115.0) and writer.buffered_rows == 2
    assert writer.maybe_flush(120.0) and writer.buffered_rows == 0
    other.close()


def test_non_finite_energy_is_skipped_not_written(engine, caplog):
    writer = writer_for(engine)
    with caplog.at_level(logging.WARNING, logger="agent.store.writer"):
        writer.add(tick(T0 + 1, cpu_j=float("nan")))
    assert writer.buffered_rows == 1 and "non-finite" in caplog.text
    assert writer.flush()


def test_latest_power_w_uses_the_newest_tick_then_rollups(engine):
    assert latest_power_w(engine, "node-a") == {}
    writer = writer_for(engine)
    writer.add(tick(T0 + 1))
    writer.add(tick(T0 + 3, cpu_j=30.0, gpu_j=300.0, length_s=2.0))
    writer.flush()
    assert latest_power_w(engine, "node-a") == {("cpu", "0"): 15.0, ("gpu", "0"): 150.0}
    writer.maintain(T0 + 60 + RETENTION_S)  # raw rows pruned: minute average remains
    assert raw_count(engine) == 0
    assert latest_power_w(engine, "node-a") == {("cpu", "0"): 40.0 / 3, ("gpu", "0"): 400 / 3}


# -- command line -------------------------------------------------------------------------


def db_command() -> list[str]:
    """``joulestat db`` when the full CLI imports, else the db command on its own."""
    others = ("agent.commands.agent", "agent.commands.estimate")
    if all(importlib.util.find_spec(name) for name in others):
        return [sys.executable, "-m", "agent.cli", "db"]
    return [sys.executable, "-m", "agent.commands.db"]


def test_db_upgrade_and_current_commands_on_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([*db_command(), "upgrade", "--db", url], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{url}: schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    assert migrate.is_at_head(make_engine(url))

    done = subprocess.run([*db_command(), "current"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "xdg/joulestat/joulestat.db: schema at revision none" in done.stdout

    for bad in ("nonsense", "mysql://h/db"):
        done = subprocess.run([*db_command(), "upgrade", "--db", bad], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and "--db" in done.stderr, done.stderr
