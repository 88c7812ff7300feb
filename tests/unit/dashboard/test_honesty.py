"""Issue 11: the dashboard says exactly what was measured (AppTest, server side).

One test per numbered item of the issue, on :mod:`tests.helpers.honest_store` (a laptop job of
constant power, same-name inference runs told apart by a label, estimated VM jobs, a
job imported from another store's report, a CodeCarbon run). Expected figures come
from ``joulestat report``'s model and :mod:`joulestat.core.units`, never from the page's code.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from joulestat.core import units
from joulestat.reports.model import build_report
from joulestat.store.engine import make_engine
from tests.helpers.dashboard_app import run_page
from tests.helpers.honest_store import STEADY_W, fill, new_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("honest")
    engine = new_store(tmp / "store.db")
    fill(engine, tmp)
    engine.dispose()
    yield f"sqlite:///{tmp / 'store.db'}"


def report(url: str, job_id: str) -> dict:
    engine = make_engine(url)
    try:
        return build_report(engine, job_id)
    finally:
        engine.dispose()


def metric(at: AppTest, label: str) -> str:
    [found] = [m.value for m in at.metric if m.label == label]
    return found


def charts(at: AppTest) -> list[tuple[dict, pd.DataFrame]]:
    """Each chart's Vega-Lite spec and its data."""
    found = []
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        data = [convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets]
        found.append((spec, data[0] if data else pd.DataFrame()))
    return found


def texts(at: AppTest) -> str:
    return "\n".join([*(m.value for m in at.markdown), *(c.value for c in at.caption),
                      *(i.value for i in at.info), *(w.value for w in at.warning)])


# 1. Estimates are never shown as measured ------------------------------------------------

def test_imported_estimates_and_codecarbon_are_not_measured(store, monkeypatch):
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="vm-ramp")
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    assert ":orange-badge[cpu: estimated (import:joulestat/model:ccf-vcpu)]" in badges, badges
    assert not any("measured" in b for b in badges), badges
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="codecarbon:cc-run-1")
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    assert ":red-badge[cpu: not stated (import:codecarbon)]" in badges, badges
    assert ":orange-badge[dram: estimated (import:codecarbon/model:codecarbon-ram)]" in badges


def test_overview_counts_only_counter_readings_as_measured(store, monkeypatch):
    at = run_page(store, "pages/overview.py", monkeypatch)
    at.selectbox(key="overview_period").set_value("All time").run()
    by_source = next(data for spec, data in charts(at) if "source" in data.columns)
    classes = dict(zip(by_source["source"], by_source["class"], strict=True))
    assert classes["import:joulestat/model:ccf-vcpu"] == "estimated"
    assert classes["import:codecarbon"] == "unstated"
    assert classes["import:codecarbon/model:codecarbon-ram"] == "estimated"
    assert classes["rapl"] == "measured" and classes["model:ccf-vcpu"] == "estimated"
    measured = by_source.loc[by_source["class"] == "measured", "energy_j"].sum()
    share = units.share(measured / by_source["energy_j"].sum())
    assert any(f"**{share}** measured" in c.value for c in at.caption), texts(at)


# 2. CO2e: operational always shown, embodied apart ---------------------------------------

def test_co2e_is_shown_when_embodied_is_unknown(store, monkeypatch):
    expected = report(store, "steady")
    assert expected["embodied_co2e_g"] is None and expected["co2e_g"] > 0
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="steady")
    assert metric(at, "CO2e (operational)") == units.mass(expected["co2e_g"])
    assert metric(at, "Embodied CO2e") == units.UNKNOWN
    at = run_page(store, "pages/jobs.py", monkeypatch)
    table = at.dataframe[0].value.set_index("_job_id")
    assert table.at["steady", "CO2e (operational)"] == units.mass(expected["co2e_g"])
    assert table.at["steady", "embodied CO2e"] == units.UNKNOWN
    at = run_page(store, "pages/overview.py", monkeypatch)
    assert metric(at, "CO2e (operational)") not in (units.UNKNOWN, "0 g")


# 3. No spike at the end: a job of constant power is a flat line to its end ---------------

@pytest.mark.parametrize("job_id", ["steady", "codecarbon:cc-run-1"])
def test_job_detail_charts_end_at_the_jobs_end(store, monkeypatch, job_id):
    """Issue 24: a chart ran 2 s past a job's end (5 s on an imported CodeCarbon run):
    its last bucket's end, not the job's. Every point lies within the job's time."""
    held_s = report(store, job_id)["job"]["ended_s"] - report(store, job_id)["job"]["started_s"]
    at = run_page(store, "pages/job_detail.py", monkeypatch, job=job_id)
    timed = [data for spec, data in charts(at) if "time" in data.columns and len(data)]
    assert timed, "no chart over time"
    for data in timed:
        times = pd.to_datetime(data["time"])
        span_s = (times.max() - times.min()).total_seconds()
        assert span_s <= held_s + 1e-3, (job_id, span_s, held_s)


def test_constant_power_is_flat_to_the_end_in_the_dashboard_and_report(store, monkeypatch):
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="steady")
    power = next(data for spec, data in charts(at) if "power_w" in data.columns)
    assert len(power) >= 2  # a point per flush window of the job's shares (0009)
    assert power["power_w"].tolist() == pytest.approx([STEADY_W] * len(power), rel=1e-6)
    rate = next(data for spec, data in charts(at) if "rate" in data.columns)
    assert rate["rate"].tolist() == pytest.approx([50.0] * len(rate), rel=1e-6)
    series = report(store, "steady")["power_series"]
    assert [p["power_w"] for p in series] == pytest.approx([STEADY_W] * len(series), rel=1e-6)
    assert series[-1]["t_end_s"] == pytest.approx(report(store, "steady")["job"]["ended_s"],
                                                  abs=1e-3)


# 4. Imported jobs keep their time profile -------------------------------------------------

def test_an_imported_job_keeps_its_power_profile(store, monkeypatch):
    job = report(store, "vm-ramp")["job"]
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="vm-ramp")
    power = next(data for spec, data in charts(at) if "power_w" in data.columns)
    cpu = power[power["component"] == "cpu"].sort_values("time")
    assert len(cpu) >= 20  # a profile, not one aggregate point
    assert cpu["power_w"].iloc[-1] > cpu["power_w"].iloc[0] + 50  # the ramp survived
    rate = next(data for spec, data in charts(at) if "rate" in data.columns)
    assert len(rate) > 20  # the unit series too: 30 samples a second, to both ends
    assert rate["rate"].tolist() == pytest.approx([30.0] * len(rate), rel=1e-6)
    assert any("Imported from a file" in c.value for c in at.caption)
    assert job["started_s"] < job["ended_s"]


# 5. CodeCarbon's own CO2e beside joulestat's ---------------------------------------------

def test_codecarbon_co2e_is_shown_beside_joulestats(store, monkeypatch):
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="codecarbon:cc-run-1")
    assert metric(at, "CO2e (CodeCarbon's own)") == "17.4 mg"  # 1.74e-05 kg in its CSV
    joulestat = report(store, "codecarbon:cc-run-1")["co2e_g"]
    assert metric(at, "CO2e (operational)") == units.mass(joulestat)
    [info] = [i.value for i in at.info if "CodeCarbon" in i.value]
    assert "CodeCarbon 3.3.2's own CO2e is 17.4 mg" in info
    assert f"joulestat recomputed {units.mass(joulestat)}" in info
    assert at.selectbox(key="detail_pick").value == "codecarbon:cc-run-1"
    assert "codecarbon:mlp-train" in at.subheader[0].value  # not the bare project name


# 6. Numbers people can read ---------------------------------------------------------------

def test_per_unit_energy_reads_in_si_units(store, monkeypatch):
    at = run_page(store, "pages/job_detail.py", monkeypatch, job="steady")
    expected = report(store, "steady")["per_unit"]["sample"]["energy_j"]
    assert metric(at, "Energy per sample") == units.energy(expected) == "300 mJ"
    at = run_page(store, "pages/compare.py", monkeypatch)
    at.number_input(key="cmp_sla").set_value(1_000_000).run()
    fleet = at.dataframe[-1]
    shown = convert_arrow_bytes_to_pandas_df(fleet.proto.arrow_data.styler.display_values)
    assert all(text.endswith((" W", " kW")) for text in shown["fleet power"]), shown
    assert all(text.startswith("$") for text in shown["fleet cost per hour"])


# 8. Compare and Load curve ----------------------------------------------------------------

def test_the_baseline_follows_the_default_when_the_kind_changes(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch)
    assert at.selectbox(key="cmp_base").value == "c6i.2xlarge"  # slowest inference
    at.selectbox(key="cmp_kind").set_value("training").run()
    table = at.dataframe[0].value
    slowest = table.loc[table["throughput (samples/instance-h)"].idxmin(), "group"]
    assert slowest != "c6i.2xlarge"  # the inference baseline would have stayed
    assert at.selectbox(key="cmp_base").value == slowest


def test_same_name_runs_are_told_apart_by_their_labels(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch)
    at.radio(key="cmp_mode").set_value("picked jobs").run()
    at.multiselect(key="cmp_jobs").set_value(["serve-0", "serve-1", "serve-2"]).run()
    groups = list(at.dataframe[0].value["group"])
    assert sorted(groups) == ["mlp-serve concurrency=1", "mlp-serve concurrency=16",
                              "mlp-serve concurrency=4"], groups
    options = at.multiselect(key="cmp_jobs").options
    assert any(o.startswith("mlp-serve · ") and o.endswith(" · g5.xlarge") for o in options)


def test_compare_by_a_label_and_a_shareable_url(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch)
    at.radio(key="cmp_mode").set_value("by label").run()
    at.selectbox(key="cmp_label").set_value("concurrency").run()
    groups = set(at.dataframe[0].value["group"])
    # mlp-serve ran on a g5, bert-cpu on a c6i: a row is one value on one setup
    assert groups == {"concurrency=1 · g5.xlarge", "concurrency=4 · g5.xlarge",
                      "concurrency=16 · g5.xlarge", "concurrency=1 · c6i.2xlarge",
                      "concurrency=4 · c6i.2xlarge"}
    params = dict(at.query_params)
    assert params["by"] == "label:concurrency" and params["kind"] == "inference"
    shared = run_page(store, "pages/compare.py", monkeypatch, kind="inference",
                      unit="request", by="label:concurrency",
                      baseline="concurrency=4 · g5.xlarge", sla="50000")
    assert shared.radio(key="cmp_mode").value == "by label"
    assert shared.selectbox(key="cmp_base").value == "concurrency=4 · g5.xlarge"
    assert shared.number_input(key="cmp_sla").value == 50000
    assert set(shared.dataframe[0].value["group"]) == groups


def test_load_curve_takes_the_label_and_leaves_out_a_smoke_test(store, monkeypatch):
    at = run_page(store, "pages/load_curve.py", monkeypatch)
    assert at.selectbox(key="load_label").value == "concurrency"
    table = at.dataframe[0].value
    g5_at_1 = table[(table["setup"] == "g5.xlarge") & (table["concurrency"] == 1)]
    assert g5_at_1["jobs"].iloc[0] == 2  # the run and its 5-second smoke test
    at.multiselect(key="load_left_out").set_value(["serve-3"]).run()
    table = at.dataframe[0].value
    g5_at_1 = table[(table["setup"] == "g5.xlarge") & (table["concurrency"] == 1)]
    assert g5_at_1["jobs"].iloc[0] == 1
    assert g5_at_1["energy per request"].iloc[0] == pytest.approx(12480.0 / 4800.0)


# 9. Overview: imported nodes are not live; legends fit -----------------------------------

def test_imported_nodes_are_marked_imported_never_reporting(store, monkeypatch):
    at = run_page(store, "pages/overview.py", monkeypatch)
    nodes = at.dataframe[0].value.set_index("node")
    for node in ("vm-remote-1", "codecarbon:cc-run-1"):
        assert nodes.at[node, "reporting"].startswith("imported"), nodes.at[node, "reporting"]
        assert pd.isna(nodes.at[node, "power now"])
    assert metric(at, "Nodes") == "3"  # the agents' nodes
    for power_now in (data for _spec, data in charts(at) if "power_w" in data.columns):
        assert not any(n.startswith(("vm-remote-1", "codecarbon:")) for n in power_now["node"])
    assert "Imported nodes have no power now: " in texts(at)
    for spec, _data in charts(at):
        legend = spec["encoding"]["color"].get("legend") or {}
        assert legend.get("labelLimit") == 0 and legend.get("orient") == "right", legend


# 10. Jobs page: the name first, the id last and short ------------------------------------

def test_jobs_table_puts_the_name_first_and_a_short_id_last(store, monkeypatch):
    at = run_page(store, "pages/jobs.py", monkeypatch)
    order = list(at.dataframe[0].proto.column_order)
    assert order[0] == "name" and order[-1] == "id", order
    table = at.dataframe[0].value.set_index("_job_id")
    assert table.at["codecarbon:cc-run-1", "id"] == "codecarb"
    options = at.selectbox(key="jobs_pick").options
    assert any(o.startswith("steady · ") and o.endswith(" · local") for o in options), options


def test_compare_rows_say_whether_their_energy_was_measured(store, monkeypatch):
    at = run_page(store, "pages/compare.py", monkeypatch)
    table = at.dataframe[0].value.set_index("group")
    assert table.at["g5.xlarge", "energy is"] == "measured"
    assert table.at["c6i.2xlarge", "energy is"] == "estimated (model: ccf-vcpu, dram-gib)"
