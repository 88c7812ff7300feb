"""Issue 46: a stopped agent does not look alive. The real agent records how often it
flushes with its node's lease, and the Overview calls its node silent at once when it
stops, and within three flushes (30 s at the default 10 s) when its ticks stop."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select

from joulestat.store.engine import make_engine
from joulestat.store.schema import NODES, TICK_ENERGY
from tests.helpers.agent_process import agent_on_fake_rapl, wait_for
from tests.helpers.dashboard_app import run_page


def _node_row(url: str):
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            row = connection.execute(select(
                NODES.c.writer_flush_interval_s, NODES.c.lease_until_s,
                select(TICK_ENERGY.c.node).where(TICK_ENERGY.c.node == "n1").limit(1)
                .scalar_subquery().label("ticked"))
                .where(NODES.c.node == "n1")).first()
    finally:
        engine.dispose()
    return row


def test_a_stopped_agent_is_said_so_at_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with agent_on_fake_rapl(tmp_path, "--flush-interval", "1", at_head=True) as agent:
        url = agent.db_url
        row = wait_for(lambda: (r := _node_row(url)) is not None and r.ticked and r,
                       timeout_s=60)
        assert row.writer_flush_interval_s == pytest.approx(1.0)
        assert row.lease_until_s is not None
        agent.proc.terminate()  # stopped as systemd or Kubernetes stop it: SIGTERM
        assert agent.proc.wait(timeout=60) == 0, agent.log()
    row = _node_row(url)
    assert row.lease_until_s is None  # a stopped agent gives its lease up
    at = run_page(url, "pages/overview.py", monkeypatch)
    nodes = at.dataframe[0].value.set_index("node")
    assert nodes.at["n1", "reporting"].startswith("no: stopped, last tick "), (
        nodes.at["n1", "reporting"])
    assert pd.isna(nodes.at["n1", "power now"])
