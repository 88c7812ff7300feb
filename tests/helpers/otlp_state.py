"""One node's figures after one tick, and one job's, as the OTLP exporter takes them
(:class:`joulestat.outputs.otlp.ExportState`): shared by the exporter's unit tests
(tests/unit/outputs/test_otlp_export.py) and its transports' system tests
(tests/system/test_otlp_transports.py)."""

from __future__ import annotations

from pathlib import Path

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.outputs.otlp import ExportState
from joulestat.outputs.prometheus import NodeMetrics
from joulestat.pipeline.sink import TickRecord

NODE = NodeInfo("n1", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")
START_S = 1_700_000_000.0


def export_state() -> tuple[ExportState, NodeMetrics, JobAccounting]:
    """A CPU and a GPU over one 2 s tick (DRAM declared, never read), and job ``bert``
    with 32 samples and 12.75 J of CPU: the state, and the metrics and accounting it is
    read from (for a scrape of the same figures)."""
    metrics = NodeMetrics(NODE)
    metrics.declare([("dram", "package-0", "rapl")])
    tick = Tick(START_S + 1, START_S + 3, (TickEntry("cpu", "package-0", "rapl", 120.1),
                                           TickEntry("accelerator", "gpu0", "nvml_energy",
                                                     300.7)))
    metrics.on_tick(TickRecord(tick))
    registry = JobRegistry()
    job = registry.register("bert", "training")
    registry.count(job.id, "sample", 32)
    job.dynamic_j["cpu"] = 12.25
    job.idle_j["cpu"] = 0.5
    job.dynamic_j["accelerator"] = 7.0
    accounting = JobAccounting(registry, Path("/nonexistent/proc"), IdleBaselines())
    snapshot = accounting.snapshot()
    assert snapshot is not None
    energy_j, power_w = metrics.values()
    return (ExportState(tick.t1_s, 1, energy_j, power_w, tuple(snapshot.jobs.values())),
            metrics, accounting)
