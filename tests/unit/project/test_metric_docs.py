"""docs/metrics.md and the scrape both come from the metric catalog: the doc is
generated from it, and a scrape exposes exactly its families. How the sinks behind the
scrape behave is tested in tests/unit/outputs/test_prometheus_sink.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.losses import EnergyLosses, LossReason
from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.outputs.health import AgentHealth
from joulestat.outputs.metric_catalog import METRICS, render_markdown
from joulestat.outputs.prometheus import JobMetrics, NodeMetrics, make_registry
from joulestat.pipeline.sink import TickRecord

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"



def _losses() -> EnergyLosses:
    losses = EnergyLosses()
    losses.add(LossReason.SPOOL_DROPPED, 18_684.0, 373.7)
    return losses


def test_docs_metrics_md_is_generated_from_the_catalog() -> None:
    assert DOC.read_text() == render_markdown(), (
        "docs/metrics.md is stale: run `make docs` (python -m joulestat.outputs.metric_catalog)"
    )


def test_scrape_exposes_exactly_the_catalog() -> None:
    record = TickRecord(Tick(0.0, 2.0, (TickEntry("cpu", "package-0", "rapl", 50.0),)))
    metrics = NodeMetrics(NodeInfo("n1", "g5.xlarge", "us-east-1", "Xeon", "0.1.0"), {"rapl": 2})
    metrics.on_tick(record)
    metrics.observe_tick_work(0.001)
    jobs = JobRegistry()
    job = jobs.register("bert", "training")
    jobs.count(job.id, "sample", 32)
    job.dynamic_j["cpu"] = 12.0
    accounting = JobAccounting(jobs, Path("/nonexistent/proc"), IdleBaselines())
    exported = JobMetrics(accounting.snapshot, 300, 500)
    writer = SimpleNamespace(buffered_rows=7, spool=SimpleNamespace(bytes=4096),
                             written_rows=100, spooled_rows=20, folded_rows=3, dropped_rows=1,
                             failing=True, flushes=4, flush_seconds_sum=0.2,
                             spool_write_failures=2, losses=_losses())
    health = AgentHealth(writer, lambda: {"busy": 5, "max_jobs": 2})
    text = generate_latest(make_registry(metrics, exported, health)).decode()
    exposed = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE") and line.split()[2].startswith("joulestat_")
    }
    assert exposed == {spec.name for spec in METRICS}
