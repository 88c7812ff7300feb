"""The store's engines and schema without a database: URLs and the default path, what
makes an engine unusable (said now, naming the URL, password hidden), the migration
head, and the one metadata the writer, the readers and Alembic share."""

from __future__ import annotations

import sqlite3
import stat

import pytest
from sqlalchemy import Table, text

from joulestat.store import migrate
from joulestat.store.engine import (
    StoreError,
    StoreMissingError,
    data_dir,
    default_db_url,
    make_engine,
    open_readonly_engine,
)
from joulestat.store.schema import CORE_TABLES, METADATA


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


def test_head_revision_constant_equals_alembic_head():
    assert migrate.HEAD_REVISION == migrate.script_head_revision()


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



def test_every_table_is_on_the_one_metadata() -> None:
    assert all(isinstance(t, Table) for t in METADATA.tables.values())
    assert sorted(METADATA.tables) == sorted([
        "nodes", "node_devices", "tick_energy", "minute_energy", "jobs", "job_nodes",
        "job_energy", "job_minute_energy", "job_units", "job_minute_units",
        "job_energy_totals", "job_unit_totals",
        "job_pool_days", "job_pool_sums", "job_pool_sources",
        "job_open_parts", "job_open_energy", "job_open_units", "job_open_sums",
        "job_open_kinds", "job_open_sources",
        "node_checkpoints"])


def test_readonly_engine_needs_an_existing_file_and_keeps_odd_paths(tmp_path):
    with pytest.raises(StoreMissingError):
        open_readonly_engine(f"sqlite:///{tmp_path / 'absent.db'}")
    assert not (tmp_path / "absent.db").exists()
    odd = tmp_path / "a dir #1" / "store.db"
    odd.parent.mkdir()
    sqlite3.connect(odd).execute("CREATE TABLE t (x)").connection.commit()
    engine = open_readonly_engine(f"sqlite:///{odd}")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
    engine.dispose()
    with pytest.raises(StoreError, match="unsupported"):
        open_readonly_engine("mysql://x@y/z")

