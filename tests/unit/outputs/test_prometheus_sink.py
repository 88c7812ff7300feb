"""The Prometheus sinks: what a scrape exports after each tick, the bound on job series,
and that a scrape reads the sinks' own per-tick snapshot, never the job registry under
its lock (a tick or a busy job API holding it must not stall a scrape)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.losses import EnergyLosses, LossReason
from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.outputs.health import AgentHealth
from joulestat.outputs.prometheus import JobMetrics, NodeMetrics, make_registry
from joulestat.pipeline.sink import TickRecord

NODE = NodeInfo("n1", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")
TICK = TickRecord(Tick(0.0, 2.0, (TickEntry("cpu", "package-0", "rapl", 50.0),)))



def _losses() -> EnergyLosses:
    losses = EnergyLosses()
    losses.add(LossReason.SPOOL_DROPPED, 18_684.0, 373.7)
    return losses


def job_metrics(registry: JobRegistry, retention_s: float = 300, max_jobs: int = 500,
                clock: Callable[[], float] | None = None) -> JobMetrics:
    """JobMetrics fed by real job accounting's snapshot, as the daemon wires it."""
    accounting = JobAccounting(registry, Path("/nonexistent/proc"), IdleBaselines())
    return JobMetrics(accounting.snapshot, retention_s, max_jobs, clock=clock or time.time)


def scrape(*collectors: object) -> str:
    return generate_latest(make_registry(NodeMetrics(NODE), *collectors)).decode()


def test_node_metrics_export_each_tick_they_see() -> None:
    metrics = NodeMetrics(NODE, {"rapl": 2})
    metrics.on_tick(TICK)
    metrics.observe_tick_work(0.001)
    text = generate_latest(make_registry(metrics)).decode()
    series = '{component="cpu",device="package-0",source="rapl"}'
    assert f"joulestat_node_power_watts{series} 25.0" in text
    assert f"joulestat_node_energy_joules_total{series} 50.0" in text
    assert 'joulestat_agent_sensor_errors_total{sensor="rapl"} 2.0' in text
    assert 'instance_type="g5.xlarge"' in text
    assert "joulestat_agent_ticks_total 1.0" in text
    metrics.on_tick(TICK)
    text = generate_latest(make_registry(metrics)).decode()
    assert f"joulestat_node_energy_joules_total{series} 100.0" in text  # a counter


def test_health_reads_the_writer_counters() -> None:
    writer = SimpleNamespace(buffered_rows=7, spool=SimpleNamespace(bytes=4096),
                             written_rows=100, spooled_rows=20, folded_rows=3, dropped_rows=1,
                             failing=True, flushes=4, flush_seconds_sum=0.2,
                             spool_write_failures=2, losses=_losses())
    text = scrape(AgentHealth(writer, lambda: {"busy": 5, "max_jobs": 2}))
    assert "joulestat_agent_store_spooled_bytes 4096.0" in text
    assert "joulestat_agent_spool_write_failures_total 2.0" in text
    assert 'joulestat_agent_store_rows_total{outcome="folded"} 3.0' in text
    assert "joulestat_agent_store_up 0.0" in text
    assert 'joulestat_agent_lost_energy_joules_total{reason="spool_dropped"} 18684.0' in text
    assert 'joulestat_agent_lost_energy_joules_total{reason="unmeasured_gap"} 0.0' in text
    assert "joulestat_agent_store_flush_seconds_count 4.0" in text
    assert 'joulestat_agent_api_rejections_total{reason="max_jobs"} 2.0' in text


def test_job_metrics_export_a_copy_taken_at_the_scrape() -> None:
    registry = JobRegistry()
    job = registry.register("bert", "training", job_id="j1")
    registry.count(job.id, "sample", 32)
    job.dynamic_j["cpu"] = 12.0
    job.idle_j["cpu"] = 3.0
    job.dynamic_j["accelerator"] = 1.0
    exported = job_metrics(registry)
    text = scrape(exported)
    labels = 'job_id="j1",job_name="bert",kind="training"'
    assert f'joulestat_job_energy_joules_total{{component="cpu",{labels}}} 15.0' in text
    assert f'joulestat_job_energy_joules_total{{component="accelerator",{labels}}} 1.0' in text
    units = '{job_id="j1",job_name="bert",unit="sample"}'
    assert f"joulestat_job_work_units_total{units} 32.0" in text
    # Changed since (units counted through the API, a tick adding shares):
    registry.count(job.id, "sample", 8)
    job.dynamic_j["cpu"] = 99.0
    text = scrape(exported)
    assert f'joulestat_job_energy_joules_total{{component="cpu",{labels}}} 102.0' in text
    assert f"joulestat_job_work_units_total{units} 40.0" in text


def test_a_scrape_completes_while_the_registry_lock_is_held() -> None:
    registry = JobRegistry()
    job = registry.register("bert", "training", job_id="j1")
    job.dynamic_j["cpu"] = 5.0
    exported = job_metrics(registry)
    scrape(exported)  # the copy a scrape serves while the lock stays held
    job.dynamic_j["cpu"] = 7.0
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # another thread: the registry's lock is reentrant
        with registry.lock:
            held.set()
            release.wait(10.0)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5.0)
    texts: list[str] = []
    scraper = threading.Thread(target=lambda: texts.append(scrape(exported)), daemon=True)
    try:
        scraper.start()
        scraper.join(5.0)
        assert not scraper.is_alive(), "the scrape waited for the registry's lock"
    finally:
        release.set()
        holder.join()
        scraper.join(5.0)
    assert 'joulestat_job_energy_joules_total{component="cpu",job_id="j1"' in texts[0]
    assert '"training"} 5.0' in texts[0]  # the previous copy, not the figure under the lock
    assert '"training"} 7.0' in scrape(exported)  # and a fresh one once it is free


def test_job_series_are_bounded() -> None:
    clock = [1000.0]
    jobs = JobRegistry(clock=lambda: clock[0])
    ended = jobs.register("old", "inference")
    jobs.end(ended.id)
    running = [jobs.register(f"r{i}", "inference") for i in range(3)]
    exported = job_metrics(jobs, retention_s=300, max_jobs=10, clock=lambda: clock[0])
    assert {j.id for j in exported.exported_jobs()} == {ended.id} | {j.id for j in running}
    clock[0] += 301  # past --job-retention: the ended job drops, at scrape time
    assert ended.id not in {j.id for j in exported.exported_jobs()}
    assert ended.id not in {j.id for j in exported.exported_jobs()}
    capped = job_metrics(jobs, retention_s=300, max_jobs=2, clock=lambda: clock[0])
    assert len(capped.exported_jobs()) == 2


def test_the_cap_keeps_running_jobs_first_and_warns_once_per_crossing(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = [1000.0]
    jobs = JobRegistry(clock=lambda: clock[0])
    ended = jobs.register("old", "inference")
    jobs.end(ended.id)
    clock[0] += 1
    running = [jobs.register(f"r{i}", "inference") for i in range(2)]
    exported = job_metrics(jobs, max_jobs=2, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="joulestat.outputs.prometheus"):
        for _ in range(3):
            assert {j.id for j in exported.exported_jobs()} == {j.id for j in running}
        assert len(caplog.records) == 1 and "--max-job-series 2" in caplog.text
        jobs.forget([ended.id])  # back under the cap: no warning, and it is re-armed
        exported.exported_jobs()
        jobs.register("r2", "inference")
        exported.exported_jobs()
        exported.exported_jobs()
    assert len(caplog.records) == 2


def test_the_newest_ended_jobs_are_kept_under_the_cap() -> None:
    clock = [1000.0]
    jobs = JobRegistry(clock=lambda: clock[0])
    for name in ("first", "second", "third"):
        jobs.end(jobs.register(name, "other", job_id=name).id)
        clock[0] += 10
    exported = job_metrics(jobs, max_jobs=2, clock=lambda: clock[0])
    assert [j.id for j in exported.exported_jobs()] == ["third", "second"]
