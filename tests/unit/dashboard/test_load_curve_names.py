"""Issue 24: the Load curve pooled two servers' jobs into one line. Two servers of
different names load-tested on one setup: by default the page says it pools them; picking
a job name gives that server's own curve, with its own energy per request."""

from __future__ import annotations

import time

import pytest

from tests.helpers.dashboard_app import run_page
from tests.helpers.honest_store import GPU, Run, new_store, write_run

# Two servers on g5.xlarge at concurrency 1 and 4: a light one and a heavy one.
SERVERS = {"light-serve": (20.0, 100.0), "heavy-serve": (120.0, 25.0)}  # (GPU W, req/s)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("load-names") / "store.db"
    engine = new_store(path)
    at = time.time() - 3600
    for name, (gpu_w, rate) in SERVERS.items():
        for level in (1, 4):
            write_run(engine, Run(f"{name}-{level}", name, "inference", GPU, at, 20,
                                  {"cpu": 10.0, "accelerator": gpu_w * level},
                                  {"concurrency": str(level)}, "request", rate * level))
            at += 30
    engine.dispose()
    return f"sqlite:///{path}"


def test_pooled_names_are_said_and_one_name_gives_one_servers_curve(store, monkeypatch):
    at = run_page(store, "pages/load_curve.py", monkeypatch)
    assert at.selectbox(key="load_name").value == "all job names"
    assert set(at.selectbox(key="load_name").options) == {"all job names", *SERVERS}
    pooled = at.dataframe[0].value
    assert list(pooled["jobs"]) == [2, 2]  # both servers in each point
    assert any("light-serve" in w.value and "heavy-serve" in w.value for w in at.warning)
    for name, (gpu_w, rate) in SERVERS.items():
        at.selectbox(key="load_name").set_value(name).run()
        assert not at.exception and not at.warning
        table = at.dataframe[0].value.set_index("concurrency")
        assert list(table["jobs"]) == [1, 1]
        for level in (1, 4):
            # alone on its node: all of the node's energy is the job's
            expected_j = (10.0 + gpu_w * level) / (rate * level)
            assert table.at[level, "energy per request"] == pytest.approx(expected_j, rel=0.02)
