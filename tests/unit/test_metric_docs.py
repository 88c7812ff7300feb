from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

from agent.identity import NodeInfo
from agent.jobs.registry import JobRegistry
from agent.sinks.health import AgentHealth
from agent.sinks.metric_catalog import METRICS, render_markdown
from agent.sinks.prometheus import JobMetrics, NodeMetrics, make_registry
from agent.tick import Tick, TickEntry

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_docs_metrics_md_is_generated_from_the_catalog() -> None:
    assert DOC.read_text() == render_markdown(), (
        "docs/metrics.md is stale: run `make docs` (python -m agent.sinks.metric_catalog)"
    )


def test_scrape_exposes_exactly_the_catalog() -> None:
    metrics = NodeMetrics(NodeInfo("n1", "g5.xlarge", "us-east-1", "Xeon", "0.1.0"), {"rapl": 2})
    metrics.observe(Tick(0.0, 2.0, (TickEntry("cpu", "package-0", "rapl", 50.0),)))
    metrics.observe_tick_work(0.001)
    jobs = JobRegistry()
    job = jobs.register("bert", "training")
    jobs.count(job.id, "sample", 32)
    job.dynamic_j["cpu"] = 12.0
    writer = SimpleNamespace(buffered_rows=7, spool=SimpleNamespace(bytes=4096),
                             written_rows=100, spooled_rows=20, folded_rows=3, dropped_rows=1,
                             failing=True, flushes=4, flush_seconds_sum=0.2)
    health = AgentHealth(writer, lambda: {"busy": 5, "max_jobs": 2})
    text = generate_latest(make_registry(metrics, JobMetrics(jobs, 300, 500), health)).decode()
    exposed = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE") and line.split()[2].startswith("joulestat_")
    }
    assert exposed == {spec.name for spec in METRICS}
    series = '{component="cpu",device="package-0",source="rapl"}'
    assert f"joulestat_node_power_watts{series} 25.0" in text
    assert f"joulestat_node_energy_joules_total{series} 50.0" in text
    assert 'joulestat_agent_sensor_errors_total{sensor="rapl"} 2.0' in text
    assert 'instance_type="g5.xlarge"' in text
    series = f'{{job_id="{job.id}",job_name="bert",unit="sample"}}'
    assert f"joulestat_job_work_units_total{series} 32.0" in text
    assert "joulestat_agent_store_spooled_bytes 4096.0" in text
    assert 'joulestat_agent_store_rows_total{outcome="folded"} 3.0' in text
    assert "joulestat_agent_store_up 0.0" in text
    assert "joulestat_agent_store_flush_seconds_count 4.0" in text
    assert 'joulestat_agent_api_rejections_total{reason="max_jobs"} 2.0' in text


def test_job_series_are_bounded() -> None:
    clock = [1000.0]
    jobs = JobRegistry(clock=lambda: clock[0])
    ended = jobs.register("old", "inference")
    jobs.end(ended.id)
    running = [jobs.register(f"r{i}", "inference") for i in range(3)]
    exported = JobMetrics(jobs, retention_s=300, max_jobs=10, clock=lambda: clock[0])
    assert {j.id for j in exported.exported_jobs()} == {ended.id} | {j.id for j in running}
    clock[0] += 301  # past --job-retention: the ended job drops
    assert ended.id not in {j.id for j in exported.exported_jobs()}
    capped = JobMetrics(jobs, retention_s=300, max_jobs=2, clock=lambda: clock[0])
    assert len(capped.exported_jobs()) == 2
