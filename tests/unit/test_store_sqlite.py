"""The SQL store on SQLite: engines, migrations, the agent's light import path and the
``db`` command (the writer is in test_store_writer.py, rollups and retention in
test_store_rollup.py)."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from joulestat.store import migrate
from joulestat.store.engine import StoreError, data_dir, default_db_url, make_engine
from joulestat.store.schema import CORE_TABLES, METADATA

# -- engine -------------------------------------------------------------------------------


def test_default_db_url_uses_xdg_data_home_and_creates_nothing(tmp_path, monkeypatch):
    """Readers take the default URL too: naming it must leave no directory behind; the
    writers create it (data_dir, 0700)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'xdg' / 'joulestat' / 'joulestat.db'}"
    assert not (tmp_path / "xdg").exists()
    assert data_dir() == tmp_path / "xdg" / "joulestat"
    assert stat.S_IMODE((tmp_path / "xdg" / "joulestat").stat().st_mode) == 0o700

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "share" / "joulestat"
    assert default_db_url() == f"sqlite:///{expected / 'joulestat.db'}"
    assert not expected.exists()


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
        diff = compare_metadata(MigrationContext.configure(connection, opts={
            "include_object": migrate.on_this_dialect(connection.dialect.name)}), METADATA)
        assert diff == []
        table_sql = connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'tick_energy'").scalar()
        minute_sql = connection.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'job_minute_energy'").scalar()
    assert "WITHOUT ROWID" in table_sql
    # Job minutes keep their key on SQLite, where the table is its key (migration 0011).
    assert "PRIMARY KEY (job_id, node, minute_start_s, component, device)" in minute_sql
    assert "WITHOUT ROWID" in minute_sql


def test_core_tables_used_by_the_writer_match_the_models():
    assert sorted(core.name for core in CORE_TABLES) == sorted(METADATA.tables)
    for core in CORE_TABLES:
        model = METADATA.tables[core.name]
        assert [c.name for c in core.columns] == [c.name for c in model.columns], core.name
        for column in core.columns:
            assert type(column.type) is type(model.columns[column.name].type), column.name


def test_missing_migrations_dir_is_a_clear_error(tmp_path, monkeypatch):
    """An install that lost its migrations says so, naming the package and the fix."""
    import importlib.machinery
    import importlib.util

    real = importlib.util.find_spec
    lost = importlib.machinery.ModuleSpec("joulestat.migrations", None, is_package=True)
    lost.submodule_search_locations = [str(tmp_path / "gone")]
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: lost if name == "joulestat.migrations" else real(name, *a))
    with pytest.raises(StoreError, match="migrations not found .*gone.*reinstall"):
        migrate.migrations_dir()


def test_agent_path_imports_neither_alembic_nor_the_orm(tmp_path):
    """The agent's path (engine, is_at_head, writer with jobs, restart reads) stays light."""
    db = tmp_path / "light.db"
    migrate.upgrade(f"sqlite:///{db}")
    script = f"""
import sys
from joulestat.host.identity import NodeInfo
from joulestat.store.engine import make_engine
from joulestat.store.migrate import is_at_head
from joulestat.store.writer import StoreWriter
from joulestat.core.tick import Tick, TickEntry
from joulestat.attribution.shares import Share
from joulestat.attribution.registry import Job
from joulestat.store.durability import load_checkpoint, load_running_jobs
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


# -- command line -------------------------------------------------------------------------


def db_command() -> list[str]:
    """``joulestat db`` when the full CLI imports, else the db command on its own."""
    others = ("joulestat.cli.agent", "joulestat.cli.estimate")
    if all(importlib.util.find_spec(name) for name in others):
        return [sys.executable, "-m", "joulestat.cli.main", "db"]
    return [sys.executable, "-m", "joulestat.cli.db"]


def test_db_upgrade_and_current_commands_on_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([*db_command(), "upgrade", "--db", url], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{url}: schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout
    assert migrate.is_at_head(make_engine(url))

    done = subprocess.run([*db_command(), "current", "--db", url], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{url}: schema at revision {migrate.HEAD_REVISION} (head)" in done.stdout

    # Read-only: the default store that is not there stays not there.
    done = subprocess.run([*db_command(), "current"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert "xdg/joulestat/joulestat.db" in done.stderr and "no store there" in done.stderr
    assert not (tmp_path / "xdg").exists()

    for bad in ("nonsense", "mysql://h/db"):
        done = subprocess.run([*db_command(), "upgrade", "--db", bad], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and "--db" in done.stderr, done.stderr
