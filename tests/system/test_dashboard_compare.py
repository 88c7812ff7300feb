"""The Compare page says what ``joulestat compare`` says about the same jobs.

Expected figures and sentences come from the command itself (``joulestat compare
--json`` run through its entry point) or from its loader (``load_job_figures`` + ``compare()``),
never from the dashboard's code: the page builds its figures from the dashboard's own
reads (``JobTotals``; both price through :class:`joulestat.carbon.pricing.Pricer`, whose
figures ``tests/unit/carbon/test_pricing.py`` checks), so a field that meant something else
there would show here.

The store is ``test_compare_cli``'s (filled through StoreWriter): inference on g5, inf2
and an unpriced laptop, a loader-fed trainer on c6i + p4d and a training run that counts
nothing; plus the dashboard's sample store, which has a job still running (counted up to its
node's settled totals, by instance type).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import select
from streamlit.testing.v1 import AppTest

from joulestat.dashboard import state
from joulestat.demo import sample_store as sample
from joulestat.reports.compare.figures import figures_for, pick_jobs
from joulestat.reports.compare.table import compare
from joulestat.reports.compare.words import headline
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.schema import NODES
from tests.helpers.agent_process import read_cli
from tests.helpers.compare_store import fill_compare_store, settle
from tests.helpers.dashboard_app import shown

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
T0 = 1_700_000_040.0
# The tests of the module's one compare store run on one worker, which fills it once
# (pytest-xdist --dist loadgroup).
CLI_STORE = pytest.mark.xdist_group("test_dashboard_compare")


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``test_compare_cli``'s store, every job ended (so the command's "now" is moot)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp') / 'compare.db'}"
    fill_compare_store(url)
    yield url


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sample store with one job left running, every node's totals boundary moved
    past its last row (as a maintain pass would a few minutes later)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('cmp-sample') / 'sample.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    end_s = time.time() - 60
    sample.fill(engine, end_s=end_s, hours=1.0, jobs=10)
    with engine.connect() as connection:
        nodes = list(connection.execute(select(NODES.c.node)).scalars())
    for name in nodes:
        settle(engine, name, math.ceil(end_s / 60) * 60)
    engine.dispose()
    return url


def cli_json(url: str, *args: str) -> dict[str, Any]:
    result = read_cli("compare", "--db", url, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def page(url: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("JOULESTAT_DB", url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def sentences(at: AppTest) -> dict[str, str]:
    """``**label** vs baseline: text`` lines -> {label: text}."""
    found = {}
    for line in (m.value for m in at.markdown):
        if line.startswith("**") and "** vs " in line:
            label, rest = line[2:].split("** vs ", 1)
            found[shown(label)] = shown(rest.split(": ", 1)[1])
    return found


def frame(at: AppTest, first_column: str, holding: str) -> pd.DataFrame:
    [table] = [d.value for d in at.dataframe if holding in d.value.columns]
    return table.set_index(first_column)


def column(table: pd.DataFrame, prefix: str) -> tuple[str, float]:
    """The column whose header starts with ``prefix``; its numbers are in base units (the
    page shows them through joulestat.core.units, as the command prints them)."""
    [name] = [c for c in table.columns if c.startswith(prefix)]
    return name, 1.0


def assert_value(shown: Any, expected: float | None, scale: float = 1.0) -> None:
    if expected is None:
        assert shown is None or pd.isna(shown)
    else:
        assert shown == pytest.approx(expected * scale, rel=1e-9)


@CLI_STORE
def test_by_instance_type_the_page_and_the_command_agree(cli_store, monkeypatch):
    at = page(cli_store, monkeypatch)
    assert at.selectbox(key="cmp_base").value == "local"  # the slowest is the default
    at.selectbox(key="cmp_base").set_value("g5.xlarge").run()
    at.number_input(key="cmp_sla").set_value(100_000).run()
    assert not at.exception
    out = cli_json(cli_store, "--kind", "inference", "--by", "instance_type", "--unit",
                   "inference", "--baseline", "g5.xlarge", "--sla", "100000")
    assert sentences(at) == {h["row"]: h["text"] for h in out["headlines"]}
    assert sentences(at)["inf2.xlarge"].startswith("×6.3 throughput, −92 % energy per "
                                                   "inference")

    table = frame(at, "group", "instance-hours")
    assert list(table.index) == [row["group"] for row in out["rows"]]
    co2e, scale = column(table, "CO2e per inference (")
    embodied, _same = column(table, "embodied CO2e per inference")
    for row in out["rows"]:
        shown = table.loc[row["group"]]
        assert shown["jobs"] == row["runs"] and shown["inferences"] == row["units"]
        assert_value(shown["throughput (inferences/instance-h)"], row["units_per_hour"])
        assert_value(shown["energy per inference"], row["energy_per_unit_j"])
        assert_value(shown[co2e], row["co2e_per_unit_g"], scale)
        assert_value(shown[embodied], row["embodied_per_unit_g"], scale)
        assert_value(shown["cost per million inferences"], row["cost_per_million_usd"])
        assert_value(shown["power per instance"], row["power_per_instance_w"])

    plan = frame(at, "group", "instances")
    for row in out["rows"]:
        assert plan.at[row["group"], "instances"] == row["instances_needed"]
        assert_value(plan.at[row["group"], "fleet power"], row["fleet_power_w"])
        assert_value(plan.at[row["group"], "fleet cost per hour"],
                     row["fleet_cost_per_hour_usd"])
    assert set(out["notes"]) and set(out["notes"]) <= {c.value for c in at.caption}


@CLI_STORE
def test_a_multi_node_setup_and_a_run_counting_nothing_read_as_in_the_command(
        cli_store, monkeypatch):
    at = page(cli_store, monkeypatch)
    at.selectbox(key="cmp_kind").set_value("training").run()
    out = cli_json(cli_store, "--kind", "training", "--by", "instance_type", "--unit",
                   "sample")
    per_unit = [r for r in out["rows"] if r["basis"] == "unit"]
    per_run = [r for r in out["rows"] if r["basis"] == "run"]
    assert [r["group"] for r in per_unit] == ["c6i.4xlarge+p4d.24xlarge"]
    assert list(frame(at, "group", "instance-hours").index) == [r["group"] for r in per_unit]
    assert_value(frame(at, "group", "instance-hours").iloc[0]["throughput (samples/instance-h)"],
                 per_unit[0]["units_per_hour"])
    runs = frame(at, "group", "energy per run")
    assert list(runs.index) == [r["group"] for r in per_run] == ["p4d.24xlarge"]
    assert_value(runs.iloc[0]["energy per run"], per_run[0]["energy_per_run_j"])
    assert_value(runs.iloc[0]["cost per run"], per_run[0]["cost_per_run_usd"])


@CLI_STORE
def test_picked_jobs_get_the_commands_sentences(cli_store, monkeypatch):
    at = page(cli_store, monkeypatch)
    at.radio(key="cmp_mode").set_value("picked jobs").run()
    at.multiselect(key="cmp_jobs").set_value(["j-g5", "j-inf2", "j-laptop"]).run()
    assert at.selectbox(key="cmp_base").value == "j-laptop"  # the slowest
    at.selectbox(key="cmp_base").set_value("j-g5").run()
    out = cli_json(cli_store, "--jobs", "j-g5", "j-inf2", "j-laptop", "--baseline", "j-g5")
    expected = {h["row"]: h["text"] for h in out["headlines"]}  # distinct names: as is
    assert sentences(at) == expected
    assert expected["bert-laptop"].endswith(
        "cost per million inferences unknown for bert-laptop")
    table = frame(at, "group", "instance-hours")
    assert list(table.index) == ["bert-g5", "bert-inf2", "bert-laptop"]


def test_a_running_job_counts_to_its_last_flush_by_instance_type(sample_url, monkeypatch):
    """By instance type the page counts a job running on one node to its last flush, as
    its own page and the CLI loader do (docs/compare.md): every job's figures at the
    page's "now" (rounded to the comparison's period)."""
    now = math.floor(time.time() / state.COMPARE_PERIOD_S) * state.COMPARE_PERIOD_S
    monkeypatch.setattr(state, "now_s", lambda period_s=state.TTL_S: now)
    at = page(sample_url, monkeypatch)
    base = at.selectbox(key="cmp_base").value
    engine = make_engine(sample_url)
    refs = pick_jobs(engine, "inference").refs
    figures = figures_for(engine, refs, None, now_s=now)
    table = compare(figures, by="instance_type", unit="request", baseline=base)
    engine.dispose()
    assert any(ref.ended_s is None for ref in refs)  # the sample holds a running one
    captions = " ".join(c.value for c in at.caption)
    assert "settled totals" not in captions
    assert sentences(at) == {r.group: headline(r, table.baseline_row)
                             for r in table.rows if not r.is_baseline}
    shown = frame(at, "group", "instance-hours")
    for row in table.rows:
        assert_value(shown.at[row.group, "throughput (requests/instance-h)"],
                     row.units_per_hour)
        assert_value(shown.at[row.group, "cost per million requests"],
                     row.cost_per_million_usd)
