"""The dashboard on a real PostgreSQL as a role that may only SELECT.

Proves the deployment promise of ``joulestat dashboard``: a read-only database role is
enough for every page, and the dashboard's engine refuses to write even when its role
could.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from streamlit.testing.v1 import AppTest

from joulestat.dashboard import fmt
from joulestat.demo import sample_store as sample
from joulestat.store import migrate
from joulestat.store.engine import make_engine, open_readonly_engine
from joulestat.store.jobs import job_totals, list_jobs
from tests.helpers.dashboard_app import APP, PAGES, TITLES
from tests.helpers.pg import PostgresServer

pytestmark = pytest.mark.postgres

READER = "dash_reader"


@pytest.fixture(scope="module")
def reader_store(pg: PostgresServer) -> tuple[str, str]:
    """(owner URL, reader URL) of a filled store; the reader has CONNECT and SELECT only."""
    owner_url = pg.create_database("dashboard_ro")
    database = owner_url.rsplit("/", 1)[1]
    engine = make_engine(owner_url)
    migrate.upgrade(engine)
    sample.fill(engine, end_s=time.time() - 60, hours=2.0, jobs=22, tick_s=10.0)
    engine.dispose()
    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres",
                         dbname=database, autocommit=True) as connection:
        # A role is the server's, not the database's: made once per server.
        connection.execute(f"DO $$ BEGIN CREATE ROLE {READER} LOGIN; "
                           "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        connection.execute(f"REVOKE ALL ON DATABASE {database} FROM PUBLIC")
        connection.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        connection.execute(f"GRANT CONNECT ON DATABASE {database} TO {READER}")
        connection.execute(f"GRANT USAGE ON SCHEMA public TO {READER}")
        connection.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER}")
    return owner_url, f"postgresql+psycopg://{READER}@127.0.0.1:{pg.port}/{database}"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_works_for_a_select_only_role(reader_store, page, monkeypatch):
    owner_url, reader_url = reader_store
    monkeypatch.setenv("JOULESTAT_DB", reader_url)
    at = AppTest.from_file(APP, default_timeout=90)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == [TITLES[page]]
    assert not at.info and not at.error  # data shown, not the empty-store guidance
    if page == "pages/overview.py":
        assert {m.label: m.value for m in at.metric}["Nodes"] == "5"
    if page == "pages/jobs.py":
        engine = make_engine(owner_url)
        expected = {j.id: j.total_j for j in list_jobs(engine)}
        engine.dispose()
        shown = at.dataframe[0].value.set_index("_job_id")["_energy_j"]
        assert set(shown.index) == set(expected)
        for job_id, total_j in expected.items():
            assert shown[job_id] == pytest.approx(total_j)
    if page == "pages/compare.py":
        assert any(m.value.startswith("**g5.xlarge** vs c6i.2xlarge") for m in at.markdown)


def test_the_reader_role_really_cannot_write(reader_store):
    _owner_url, reader_url = reader_store
    engine = make_engine(reader_url)
    with engine.connect() as connection, pytest.raises(DBAPIError, match="permission denied"):
        connection.execute(text("DELETE FROM jobs"))
    engine.dispose()


def test_the_dashboard_engine_is_read_only_even_for_the_owner(reader_store):
    owner_url, _reader_url = reader_store
    engine = open_readonly_engine(owner_url)
    with engine.connect() as connection:
        assert connection.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
        # Readers never JIT-compile (engine.py says why), unless the URL's options ask.
        assert connection.execute(text("SHOW jit")).scalar() == "off"
        with pytest.raises(DBAPIError, match="read-only transaction"):
            connection.execute(text("DELETE FROM jobs"))
    asked = open_readonly_engine(f"{owner_url}{'&' if '?' in owner_url else '?'}"
                                 "options=-c%20jit%3Don")
    with asked.connect() as connection:
        assert connection.execute(text("SHOW jit")).scalar() == "on"
        assert connection.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
    asked.dispose()
    found = job_totals(engine)
    assert len(found) == 22
    assert fmt.energy(sum(j.total_j for j in found)).endswith("J")
    engine.dispose()
