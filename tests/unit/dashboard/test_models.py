"""The Load curve and Compare pages group a multi-model server's jobs by model, and the
Load curve shows the latency a load test labelled each level with (AppTest over a store
written through the real writer: three load levels of one server of models a and b)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from joulestat.store.jobs import list_jobs
from tests.helpers.dashboard_app import run_page
from tests.helpers.store_jobs import T0, feed, make_job, writer_for

TICKS = 60
LEVELS = {1: ("2.5", "9.75"), 2: ("3.1", "14.2"), 4: ("5.6", "31")}  # p50_ms, p99_ms
# Per 1 s tick: a busy 0.6 s for 3 inferences, b 0.2 s for 2: a costs twice b per inference.
UNITS = {"inference": 5.0, "inference@a": 3.0, "inference@b": 2.0,
         "busy_s@a": 0.6, "busy_s@b": 0.2}


@pytest.fixture()
def store(engine, db_url):
    writer = writer_for(engine)
    for n, (level, (p50, p99)) in enumerate(LEVELS.items()):
        job_id, start = f"c{level}", T0 + n * 2 * TICKS
        writer.save_job(replace(make_job(job_id, start, {
            "concurrency": str(level), "p50_ms": p50, "p99_ms": p99}, ended_s=start + TICKS),
            kind="inference"))
        feed(writer, start, TICKS, (job_id,), gpu=False, units=UNITS)
    assert writer.flush()
    return db_url, {int(j.labels["concurrency"]): j for j in list_jobs(engine)}


def test_load_curve_shows_p50_and_p99_beside_energy_per_inference(store, monkeypatch):
    url, jobs = store
    at = run_page(url, "pages/load_curve.py", monkeypatch)
    table = at.dataframe[0].value
    assert list(table["concurrency"]) == [1.0, 2.0, 4.0]
    for _, row in table.iterrows():
        job = jobs[int(row["concurrency"])]
        p50, p99 = LEVELS[int(row["concurrency"])]
        assert (row["p50_ms"], row["p99_ms"]) == (float(p50), float(p99))
        assert row["energy per inference"] == pytest.approx(
            job.total_j / job.units["inference"])


def test_load_curve_grouped_by_model_gives_each_models_energy_per_inference(
        store, monkeypatch):
    url, jobs = store
    at = run_page(url, "pages/load_curve.py", monkeypatch)
    at.radio(key="load_by").set_value("model").run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert sorted(zip(table["model"], table["concurrency"], strict=True)) == [
        (m, float(c)) for m in ("a", "b") for c in LEVELS]
    for _, row in table.iterrows():
        job = jobs[int(row["concurrency"])]
        busy, count = (0.6, 3.0) if row["model"] == "a" else (0.2, 2.0)
        assert row["energy per inference"] == pytest.approx(
            busy * job.total_j / (count * TICKS), rel=1e-9)
        assert row["p99_ms"] == float(LEVELS[int(row["concurrency"])][1])
    assert len(at.get("vega_lite_chart")) == 2
    assert any("20 %" in c.value and "idle" in c.value for c in at.caption)


def test_compare_by_model_pools_each_models_jobs_and_shares_their_idle_time(
        store, monkeypatch):
    """Each model carries its share of its jobs' whole energy (a busy 0.6 s a tick, b 0.2
    s: 3/4 and 1/4, the 0.2 s nobody was busy included), counted over the hours its jobs
    were held; nothing unassigned is a row."""
    url, jobs = store
    at = run_page(url, "pages/compare.py", monkeypatch, by="model", kind="inference",
                  unit="inference")
    assert at.radio(key="cmp_mode").value == "by model"
    per_unit = at.dataframe[0].value
    total_j = sum(job.total_j for job in jobs.values())
    dynamic_j = sum(sum(job.dynamic_j.values()) for job in jobs.values())
    rows = dict(zip(per_unit["group"], per_unit["energy per inference"], strict=True))
    assert rows == pytest.approx({"model=a": 0.75 * total_j / (3 * TICKS * 3),
                                  "model=b": 0.25 * total_j / (2 * TICKS * 3)}, rel=1e-9)
    throughput = dict(zip(per_unit["group"], per_unit["throughput (inferences/instance-h)"],
                          strict=True))
    assert throughput == pytest.approx({"model=a": 3 * 3600.0, "model=b": 2 * 3600.0})
    dynamic = dict(zip(per_unit["group"], per_unit["dynamic energy per inference"],
                       strict=True))
    assert 0 < dynamic_j < total_j
    assert dynamic == pytest.approx({"model=a": 0.75 * dynamic_j / (3 * TICKS * 3),
                                     "model=b": 0.25 * dynamic_j / (2 * TICKS * 3)}, rel=1e-9)
    shown = {g for d in at.dataframe if "group" in d.value.columns for g in d.value["group"]}
    assert shown == {"model=a", "model=b"}  # no idle row, no "model unset"
    assert at.query_params["by"] == "model"  # the link keeps the grouping
