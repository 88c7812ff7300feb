"""Issue 11's review: what a reader sees says how each row's energy was obtained.

The reviewer found estimated rows beside measured ones with nothing on screen saying so:
the "energy is" column was the Compare table's 13th, past the screen's edge at 1,400 px;
the Load curve drew a modelled c6i line like the measured g5 one; and the Overview
called nodes whose newest tick was two hours old "reporting", with a "power now" from
that tick. On :mod:`tests.helpers.honest_store` (measured g5 and laptop, estimated c6i,
imported VM and CodeCarbon runs) and on a store with one live and one silent node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.compare_store import TICK_S, job, node, run_job
from tests.helpers.dashboard_app import give_up_lease, hold_lease, run_page
from tests.helpers.dashboard_app import shown as rendered
from tests.helpers.honest_store import fill, new_store

ESTIMATED_VM = "estimated (model: ccf-vcpu, dram-gib)"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("provenance")
    engine = new_store(tmp / "store.db")
    fill(engine, tmp)
    engine.dispose()
    yield f"sqlite:///{tmp / 'store.db'}"


def charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    found = []
    for chart in at.get("vega_lite_chart"):
        data = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
        found.append((json.loads(chart.proto.spec), data[0] if data else pd.DataFrame()))
    return found


def captions(at: AppTest) -> str:
    return "\n".join(c.value for c in at.caption)


def test_compare_says_how_energy_was_obtained_right_after_the_name(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch)
    table = at.dataframe[0].value
    assert list(table.columns[:7]) == [
        "group", "energy is", "energy per request", "dynamic energy per request",
        "CO2e per request (operational)", "cost per million requests",
        "throughput (requests/instance-h)"]
    assert not [c for c in table.columns if "vs baseline" in c]  # the sentences say them
    shown = table.set_index("group")["energy is"]
    assert shown["c6i.2xlarge"] == ESTIMATED_VM and shown["g5.xlarge"] == "measured"
    assert "compare them with measured rows with care" in captions(at)
    # As they render: their Markdown source escapes $ (no maths, fmt.md).
    sentences = [rendered(m.value) for m in at.markdown if " vs " in m.value]
    assert sentences and all("USD" not in s and " vs $" in s for s in sentences), sentences
    at.number_input(key="cmp_sla").set_value(10_000).run()
    fleet = at.dataframe[-1].value
    assert list(fleet.columns[:3]) == ["group", "energy is", "instances"]


def test_compare_by_label_rows_are_one_setup_and_say_how_measured(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch, kind="inference",
                  unit="request", by="label:concurrency")
    table = at.dataframe[0].value.set_index("group")
    assert table.at["concurrency=1 · c6i.2xlarge", "energy is"] == ESTIMATED_VM
    assert table.at["concurrency=1 · g5.xlarge", "energy is"] == "measured"
    assert "instance types" not in table.columns  # each row's name says its setup
    assert "a row is one value of `concurrency` on one setup" in captions(at)


def test_overview_and_jobs_put_provenance_second(store, monkeypatch):
    at = run_page(store, "pages/overview.py", monkeypatch)
    nodes = at.dataframe[0].value
    assert list(nodes.columns[:6]) == ["node", "energy is", "reporting", "energy (24 h)",
                                       "CO2e (operational)", "cost"]
    assert "last seen" not in nodes.columns  # "reporting" says it
    nodes = nodes.set_index("node")
    assert nodes.at["vm-1", "energy is"] == ESTIMATED_VM
    assert nodes.at["gpu-1", "energy is"] == "measured"
    assert nodes.at["codecarbon:cc-run-1", "energy is"] == (
        "estimated (model: codecarbon-ram), not stated (import:codecarbon)")
    jobs = run_page(store, "pages/jobs.py", monkeypatch)
    assert list(jobs.dataframe[0].proto.column_order[:3]) == ["name", "energy is", "energy"]
    listed = jobs.dataframe[0].value.set_index("_job_id")["energy is"]
    assert listed["cpu-0"] == ESTIMATED_VM and listed["serve-0"] == "measured"


def test_load_curve_dashes_and_names_an_estimated_line(store, monkeypatch):
    at = run_page(store, "pages/load_curve.py", monkeypatch)
    [(spec, data), _rate] = [(s, d) for s, d in charts(at) if "energy_per_unit" in d.columns
                             or "rate_per_s" in d.columns]
    assert set(data["setup"]) == {"g5.xlarge", "c6i.2xlarge (estimated)"}
    dash = spec["encoding"]["strokeDash"]
    dashes = dict(zip(dash["scale"]["domain"], dash["scale"]["range"], strict=True))
    assert dashes["c6i.2xlarge (estimated)"] != dashes["g5.xlarge"] == [1, 0]
    assert (f"Dashed lines are not read from a hardware counter (c6i.2xlarge: {ESTIMATED_VM})"
            in captions(at))
    table = at.dataframe[0].value
    assert list(table.columns[:2]) == ["setup", "energy is"]
    assert set(table.set_index("setup")["energy is"]) == {"measured", ESTIMATED_VM}


@pytest.fixture()
def live_and_silent(tmp_path: Path) -> str:
    """Four nodes' newest ticks and writers' leases: live-1 ticked 20 s ago and its
    writer flushes every 10 min (so it reports, however slow this test runs); quiet-1
    ticked 40 s ago with a writer at the default 10 s (three flushes are 30 s: silent);
    silent-1 two hours ago, though its agent's heartbeat (``last_seen_s``) is fresh;
    stopped-1 20 s ago, but its agent gave up the lease (stopped)."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    now = time.time()
    for name, ago_s in (("live-1", 20), ("quiet-1", 40), ("silent-1", 7200), ("stopped-1", 20)):
        run_job(engine, node(name, "g5.xlarge"),
                job(f"j-{name}", "serve", "inference", now - TICK_S - ago_s, TICK_S), 1,
                90_000.0)
    hold_lease(engine, "live-1", 600.0)
    hold_lease(engine, "quiet-1", 10.0)
    hold_lease(engine, "stopped-1", 10.0)
    give_up_lease(engine, "stopped-1")
    engine.dispose()
    return url


def test_a_node_without_a_recent_tick_is_silent_and_has_no_power_now(live_and_silent,
                                                                      monkeypatch):
    """Issue 46: a node is silent once its newest tick is three of its writer's flushes
    old (at most 30 s at the default), and at once when its agent stopped."""
    at = run_page(live_and_silent, "pages/overview.py", monkeypatch)
    nodes = at.dataframe[0].value.set_index("node")
    assert nodes.at["live-1", "reporting"] == "yes"
    assert nodes.at["live-1", "power now"] > 0
    assert nodes.at["quiet-1", "reporting"].startswith("no: last tick ")
    assert nodes.at["silent-1", "reporting"] in (  # 2 h, to the minute it ended in
        "no: last tick 1 h 59 min ago", "no: last tick 2 h ago")
    assert nodes.at["stopped-1", "reporting"].startswith("no: stopped, last tick ")
    for name in ("quiet-1", "silent-1", "stopped-1"):
        assert pd.isna(nodes.at[name, "power now"]), name
    [power] = [d for _s, d in charts(at) if "power_w" in d.columns]
    assert set(power["node"]) == {"live-1 (g5.xlarge)"}
    assert ("Silent nodes (no tick in their last 3 flushes, or their agent stopped) have no "
            "power now: quiet-1, silent-1, stopped-1.") in captions(at)
