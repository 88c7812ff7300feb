"""The dashboard's reads, on SQLite and on PostgreSQL: its read-only engine, job totals
and pages of them, series, node reads, costs, downloads, the load curve.

Stores are written with the agent's own StoreWriter (or the sample store's filler);
expected values come from the shared queries (``list_jobs``, ``node_energy_j``,
``job_energy_series``) or from numbers fed in, so each check can fail on its own. The
dashboard's rules on given figures are in tests/unit/dashboard/test_rules.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from joulestat.attribution.shares import DeviceUse, TickUsage, attribute
from joulestat.carbon.footprint import energy_points, footprint
from joulestat.carbon.pricing import placements
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.dashboard import analysis, costing, downloads
from joulestat.demo import sample_store as sample
from joulestat.reports.series import work_so_far
from joulestat.store.engine import make_engine, open_readonly_engine
from joulestat.store.job_pools import units_by_kind
from joulestat.store.jobs import (
    JobFilter,
    count_matching,
    job_choices,
    job_detail,
    job_totals,
    label_key_counts,
    list_jobs,
)
from joulestat.store.nodes import list_nodes, node_covered_s, node_energy_j
from joulestat.store.provenance import energy_by_source, job_energy_by_source
from joulestat.store.series import (
    choose_bucket_s,
    job_energy_series,
    job_min_bucket_s,
    job_power_series,
    job_unit_rows,
    node_power_range,
    node_power_series,
)
from joulestat.store.writer import StoreWriter
from tests.helpers.stores import BACKENDS, Store, module_store_url

T0 = 1_700_000_040.0  # a minute boundary
NODE = NodeInfo("box", "g5.12xlarge", "us-east-1", "EPYC", "test")
DEVICES = [DeviceInfo("cpu", "0", "rapl"), DeviceInfo("accelerator", "0", "nvml_energy"),
           DeviceInfo("accelerator", "1", "nvml_energy")]


@pytest.fixture(scope="module", params=BACKENDS)
def sample_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The sample store (:mod:`joulestat.demo.sample_store`), ended a minute ago, on
    each backend; filled once per module and only read."""
    url = module_store_url(request, tmp_path_factory.mktemp("dq"), "dashboard_sample")
    engine = make_engine(url)
    sample.fill(engine, end_s=time.time() - 60)
    engine.dispose()
    return url


@pytest.fixture()
def ro(sample_url: str) -> Iterator:
    engine = open_readonly_engine(sample_url)
    yield engine
    engine.dispose()


def steady_store(url: str, seconds: int = 300) -> str:
    """One job alone on a node of the store at ``url`` (at head): cpu 40 W, two GPUs at
    100 W and 50 W, 10 requests/s."""
    engine = make_engine(url)
    writer = StoreWriter(engine, NODE, DEVICES, raw_retention_s=3600)
    job = JobRecord(id="steady", name="steady", kind="inference", labels={},
                    pids=frozenset({1}), started_s=T0, origin="api")
    writer.save_job(job)
    for i in range(seconds):
        tick = Tick(T0 + i, T0 + i + 1, (TickEntry("cpu", "0", "rapl", 40.0),
                                         TickEntry("accelerator", "0", "nvml_energy", 100.0),
                                         TickEntry("accelerator", "1", "nvml_energy", 50.0)))
        usage = TickUsage(node_busy_cpu_s=1.0, job_cpu_s={"steady": 1.0},
                          devices={("accelerator", d): DeviceUse({"steady": 90}, ("steady",))
                                   for d in ("0", "1")}, running_jobs=("steady",))
        writer.add(tick)
        writer.add_shares(tick, attribute(tick, usage, {}))
        writer.add_units("steady", tick.t1_s, {"request": 10})
    writer.save_job(replace(job, ended_s=T0 + seconds))
    writer.maintain(T0 + seconds + 60)
    writer.close()
    engine.dispose()
    return url


def test_job_totals_match_list_jobs_for_every_filter(sample_url, ro):
    expected = {j.id: j for j in list_jobs(ro)}
    found = {j.id: j for j in job_totals(ro)}
    assert set(found) == set(expected)
    for job_id, job in expected.items():
        got = found[job_id]
        assert (got.nodes, got.units, got.status, got.labels, got.started_s, got.ended_s) == (
            job.nodes, job.units, job.status, job.labels, job.started_s, job.ended_s)
        assert got.total_j == pytest.approx(job.total_j, rel=1e-12)
        detail = job_detail(ro, job_id)
        assert [(p.node, p.instance_type, p.region, p.started_s, p.ended_s, p.units)
                for p in got.per_node] == [
            (p.node, p.instance_type, p.region, p.started_s, p.ended_s, p.units)
            for p in detail.per_node]
        for mine, theirs in zip(got.per_node, detail.per_node, strict=True):
            assert mine.total_j == pytest.approx(theirs.total_j, rel=1e-12)
    training = job_totals(ro, JobFilter(kind="training"))
    assert {j.id for j in training} == {i for i, j in expected.items() if j.kind == "training"}
    loader = job_totals(ro, JobFilter(instance_type="c5.4xlarge"))
    assert [j.name for j in loader] == ["llama-7b-finetune"]
    assert len(loader[0].per_node) == 2  # the filter picks jobs, not parts of them
    labelled = job_totals(ro, JobFilter(label_key="concurrency"))
    assert {j.id for j in labelled} == {i for i, j in expected.items()
                                        if "concurrency" in j.labels}
    assert job_totals(ro, JobFilter(label_key="concurrenc")) == []
    assert job_totals(ro, JobFilter(label_key="mod_l")) == []  # '_' is no wildcard
    running = job_totals(ro, JobFilter(status="running"))
    assert [j.id for j in running] == [i for i, j in expected.items() if j.status == "running"]
    first = min(expected.values(), key=lambda j: j.started_s)
    early = job_totals(ro, JobFilter(since_s=first.started_s - 10,
                                            until_s=first.started_s + 1))
    assert first.id in {j.id for j in early}
    assert all(j.started_s <= first.started_s + 1 for j in early)


def test_newest_keeps_the_newest_matching_jobs_with_their_whole_totals(sample_url, ro):
    """A page of a fleet's jobs reads the newest few that match (``JobFilter.newest``),
    each with the same totals as when all are read, and counts the rest."""
    everything = job_totals(ro)
    by_start = sorted(everything, key=lambda j: (-j.started_s, j.id))
    for where in (JobFilter(), JobFilter(kind="inference"), JobFilter(status="ended")):
        matching = job_totals(ro, where)
        assert count_matching(ro, replace(where, newest=2)) == len(matching) >= 3
        newest = job_totals(ro, replace(where, newest=2))
        wanted = [j for j in by_start if j.id in {m.id for m in matching}][:2]
        in_order = sorted(wanted, key=lambda j: (j.started_s, j.id))  # listed by start
        assert [j.id for j in newest] == [j.id for j in in_order]
        assert newest == in_order  # totals, units, parts: all the same
    assert len(job_totals(ro, JobFilter(newest=len(everything) + 5))) == len(everything)
    with pytest.raises(ValueError, match="newest"):
        JobFilter(newest=0)


def test_label_keys_are_counted_in_the_store_as_over_every_job(sample_url, ro):
    for kind in (None, "inference", "training"):
        expected: dict[str, int] = {}
        for job in job_totals(ro, JobFilter(kind=kind)):
            for key in job.labels:
                expected[key] = expected.get(key, 0) + 1
        assert label_key_counts(ro, kind) == expected
    assert label_key_counts(ro, None)  # the sample's jobs carry labels


def test_series_add_up_to_the_job_total_across_rollups_and_raw_rows(sample_url, ro):
    multi = next(j for j in job_totals(ro) if len(j.nodes) == 2)
    minimum = job_min_bucket_s(ro, multi.id)
    assert minimum == 60  # part of the job is only in minute rollups (retention 1 h)
    bucket = choose_bucket_s(multi.ended_s - multi.started_s, 300, minimum)
    assert bucket % 60 == 0
    points = job_power_series(ro, multi.id, bucket)
    assert sum(p.dynamic_j + p.idle_j for p in points) == pytest.approx(multi.total_j)
    reference = sum(d + i for _t, _c, d, i in job_energy_series(ro, multi.id))
    assert reference == pytest.approx(multi.total_j)
    # the page's work so far: its last point is the job's whole count and energy
    work = work_so_far(job_energy_series(ro, multi.id), job_unit_rows(ro, multi.id),
                       "sample", multi.started_s, multi.ended_s, bucket)
    assert work[-1].units == pytest.approx(multi.units["sample"])
    assert work[-1].energy_j == pytest.approx(multi.total_j)
    assert work[-1].t_s == multi.ended_s and len(work) > 2
    by_source = job_energy_by_source(ro, multi.id)
    assert sum(r.energy_j for r in by_source) == pytest.approx(multi.total_j)
    assert {(r.node, r.component, r.source) for r in by_source} >= {
        ("trainer-p4d-1", "accelerator", "nvml_energy"), ("loader-c5-1", "cpu", "rapl")}


def test_node_reads_match_the_shared_node_queries(sample_url, ro):
    rows = energy_by_source(ro, 0, 1e11)
    covered = node_covered_s(ro, 0, 1e11)
    for node in list_nodes(ro):
        expected = sum(node_energy_j(ro, node.node, 0, 1e11).values())
        assert sum(r.energy_j for r in rows if r.node == node.node) == pytest.approx(expected)
        assert covered[node.node] == pytest.approx(3 * 3600, abs=10)
    sources = {(r.node, r.component): r.source for r in rows}
    assert sources[("cpu-c6i-1", "cpu")] == "model:tdp-curve"
    assert sources[("inf2-1", "accelerator")] == "neuron"
    ranges = node_power_range(ro, "gpu-a10g-1")
    assert ranges["accelerator"][0] < 80 < 250 < ranges["accelerator"][1] <= 300 * 1.05


def test_power_is_energy_over_covered_time_summed_over_devices(store: Store):
    url = steady_store(store.url, seconds=300)
    engine = open_readonly_engine(url)
    for bucket in (1, 10, 60):
        points = job_power_series(engine, "steady", bucket)
        gpu = [p for p in points if p.component == "accelerator"]
        assert {round(p.power_w, 9) for p in gpu} == {150.0}
        assert {round(p.power_w, 9) for p in points if p.component == "cpu"} == {40.0}
    # 600 requests a minute at 190 W: so far, 10 a second and 19 J each, minute by minute
    work = work_so_far(job_energy_series(engine, "steady"), job_unit_rows(engine, "steady"),
                       "request", T0, T0 + 300, 60)
    assert [round(p.rate, 9) for p in work] == [10.0] * 5
    assert [round(p.energy_per_unit_j, 9) for p in work] == [19.0] * 5
    node = node_power_series(engine, "box", T0, T0 + 300, 30)
    assert {round(p.power_w, 9) for p in node if p.component == "accelerator"} == {150.0}
    # Its shares older than the job totals' boundary are minute rollups (migration 0009).
    assert job_min_bucket_s(engine, "steady") == pytest.approx(60.0)
    assert units_by_kind(engine) == {"inference": ["request"]}
    assert [c.id for c in job_choices(engine)] == ["steady"]
    engine.dispose()


def test_costs_scaled_from_rates_equal_footprint_on_the_whole_job(sample_url, ro):
    now = time.time()
    for job in job_totals(ro):
        detail = job_detail(ro, job.id)
        points = [p for part in detail.per_node
                  for p in energy_points(part.node, job_energy_series(ro, job.id, part.node))]
        reference = footprint(points, placements(detail.per_node, now), now_s=now)
        cost = costing.job_cost(job, now)
        assert cost.operational_g == pytest.approx(reference.operational_co2e_g, rel=1e-9)
        assert cost.total_g == pytest.approx(reference.total_co2e_g, rel=1e-9)
        assert cost.cost_usd == pytest.approx(reference.cost_usd, rel=1e-9)
        assert cost.embodied_g == pytest.approx(reference.embodied_co2e_g, rel=1e-9)


def test_downloads_are_joulestats_reports_in_every_format(sample_url, ro):
    multi = next(j for j in job_totals(ro) if len(j.nodes) == 2)
    report = json.loads(downloads.render(ro, multi.id, "json"))
    assert report["job"]["id"] == multi.id
    assert report["energy_j"]["total"] == pytest.approx(multi.total_j)
    assert {n["instance_type"] for n in report["nodes"]} == {"p4d.24xlarge", "c5.4xlarge"}
    csv_text = downloads.render(ro, multi.id, "csv")
    assert csv_text.splitlines()[0].startswith("job_id,") and multi.id in csv_text
    assert multi.id in downloads.render(ro, multi.id, "html")
    assert downloads.deferred(ro, multi.id, "pdf")()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="unknown report format"):
        downloads.render(ro, multi.id, "docx")


def test_load_curve_skips_non_numeric_concurrency(sample_url, ro):
    jobs = job_totals(ro, JobFilter(kind="inference"))
    bad = jobs[0]
    relabelled = [type(bad)(**{**{f: getattr(bad, f) for f in bad.__dataclass_fields__},
                               "labels": {"concurrency": "lots"}}), *jobs[1:]]
    points, skipped = analysis.load_curve(relabelled, "request", time.time())
    assert skipped == 1
    assert sum(p.jobs for p in points) == len(jobs) - 1


def test_a_rolled_minute_covers_only_the_part_the_job_ran(engine: Engine):
    """A job that starts 30 s into a minute: its rolled minute is 30 s of power, not a
    whole minute's worth of time at half the power (nor a spike, as clipping did)."""
    writer = StoreWriter(engine, NODE, DEVICES[:1], raw_retention_s=120)
    job = JobRecord(id="late", name="late", kind="training", labels={}, pids=frozenset({1}),
                    started_s=T0 + 30, origin="api")
    writer.save_job(job)
    for i in range(30, 150):
        tick = Tick(T0 + i, T0 + i + 1, (TickEntry("cpu", "0", "rapl", 40.0),))
        usage = TickUsage(node_busy_cpu_s=1.0, job_cpu_s={"late": 1.0},
                          running_jobs=("late",))
        writer.add(tick)
        writer.add_shares(tick, attribute(tick, usage, {}))
    writer.save_job(replace(job, ended_s=T0 + 150))
    assert writer.flush()
    writer.maintain(T0 + 900)  # everything older than two minutes rolled up
    points = job_power_series(engine, "late", 60)
    assert points and all(p.power_w == pytest.approx(40.0) for p in points), points
    assert sum(p.dynamic_j + p.idle_j for p in points) == pytest.approx(120 * 40.0)



def test_the_readonly_engine_refuses_every_write(sample_url, ro):
    with ro.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM jobs")).scalar_one() > 0
        with pytest.raises(DBAPIError, match="readonly|read-only"):
            connection.execute(text("DELETE FROM jobs"))
    # The agent's own writer cannot get a row in through this engine either.
    writer = StoreWriter(ro, NODE, DEVICES, raw_retention_s=3600)
    writer.add(Tick(T0, T0 + 1, (TickEntry("cpu", "0", "rapl", 1.0),)))
    assert writer.flush() is False
    with ro.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM nodes WHERE node = 'box'")
                                  ).scalar_one() == 0

