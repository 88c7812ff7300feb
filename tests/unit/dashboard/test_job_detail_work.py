"""Issue 46: Job detail's work charts are its headline over time. For a serving job and a
training job of the sample store, the last point of the rate and energy-per-unit series
is the headline's figure (the job's whole energy over its count, and that count over the
time it ran); a training job that counts samples and tokens is read per sample."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.testing.v1 import AppTest

from joulestat.core import units
from joulestat.reports.series import headline_unit
from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from tests.helpers.dashboard_app import run_page, sample_store_url


@pytest.fixture(scope="module")
def sample_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return sample_store_url(tmp_path_factory.mktemp("detail-work"))


def _work_frame(at: AppTest) -> pd.DataFrame:
    """The data of the page's work charts (rate and energy per unit share one frame)."""
    for chart in at.get("vega_lite_chart"):
        for dataset in chart.proto.datasets:
            frame = convert_arrow_bytes_to_pandas_df(dataset.data.data)
            if {"rate", "energy_per_unit_j"} <= set(frame.columns):
                return frame
    raise AssertionError("no work chart on the page")


@pytest.mark.parametrize("name", ["bert-serve-c8", "resnet50-finetune"])
def test_the_last_point_of_each_work_series_is_the_headline(sample_url, name, monkeypatch):
    engine = make_engine(sample_url)
    job = next(j for j in list_jobs(engine) if j.name == name and j.status == "ended")
    engine.dispose()
    unit = headline_unit(job.kind, job.units)
    at = run_page(sample_url, "pages/job_detail.py", monkeypatch, job=job.id)
    [per_unit] = [m for m in at.metric if m.label == f"Energy per {unit}"]
    assert per_unit.value == units.energy(job.total_j / job.units[unit])
    last = _work_frame(at).iloc[-1]
    assert last["unit"] == unit
    assert last["energy_per_unit_j"] == pytest.approx(job.total_j / job.units[unit], rel=0.05)
    ran_s = job.ended_s - job.started_s
    assert last["rate"] == pytest.approx(job.units[unit] / ran_s, rel=0.05)
    titles = [h.value for h in at.subheader]
    assert f"Energy per {unit} so far (" in " ".join(titles)


def test_a_training_run_is_read_per_sample_not_per_token() -> None:
    assert headline_unit("training", {"token": 9e6, "sample": 3e4, "step": 100}) == "sample"
    assert headline_unit("inference", {"output_token": 9e6, "request": 1e3}) == "request"
    assert headline_unit("other", {"batch": 5, "item": 50}) == "item"
    assert headline_unit("training", {"token": 0.0}) is None


def test_a_short_job_is_one_point_named_so(tmp_path, monkeypatch) -> None:
    """A job shorter than the finest bucket its rows allow is drawn as one point, and the
    titles say "the whole job", not "1 min buckets"."""
    from joulestat.store import migrate
    from tests.helpers.compare_store import T0, job, node, run_job

    url = f"sqlite:///{tmp_path / 'short.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("short", "serve", "inference", T0, 12.0),
            ticks=1, gpu_j=120.0, units={"inference": 14_000})
    engine.dispose()
    at = run_page(url, "pages/job_detail.py", monkeypatch, job="short")
    titles = " ".join(h.value for h in at.subheader)
    assert "one point: the whole job" in titles and "buckets" not in titles


def test_per_picks_the_unit_and_defaults_to_the_kinds_usual_one(tmp_path, monkeypatch) -> None:
    """The page's "Per" (docs/dashboard.md): an inference job counting requests and the
    tokens that outnumber them reads per request; picking token reads per token, the
    headline and the work charts alike."""
    from joulestat.store import migrate
    from tests.helpers.compare_store import T0, TICK_S, job, node, run_job

    url = f"sqlite:///{tmp_path / 'two-units.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("two", "serve", "inference", T0, TICK_S),
            ticks=1, gpu_j=900.0, units={"request": 100, "output_token": 9_000})
    [two] = list_jobs(engine)
    engine.dispose()
    at = run_page(url, "pages/job_detail.py", monkeypatch, job="two")
    assert at.selectbox(key="detail_unit").value == "request"
    assert [m.label for m in at.metric if m.label.startswith("Energy per ")] == [
        "Energy per request"]
    at.selectbox(key="detail_unit").set_value("output_token").run()
    [per_token] = [m for m in at.metric if m.label == "Energy per output_token"]
    assert per_token.value == units.energy(two.total_j / 9_000)
    assert _work_frame(at).iloc[-1]["unit"] == "output_token"
