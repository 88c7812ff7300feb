"""What one OTLP export costs: its size on the wire, the copy it takes on the tick thread,
and its encoding on the exporter's own thread, for nodes with 0 to 500 jobs. One table.

    .venv/bin/python benchmarks/otlp_export.py [--repeat 200]

The node: a CPU package, its DRAM and one GPU. Each job has energy on two components
and reports one work unit, as a training job does. The copy is what ``on_tick`` does
when an export is due (the node metrics' figures, the accounting's snapshot of every job
under the registry's lock, the job window); the encoding builds the
``ExportMetricsServiceRequest`` (agent/outputs/otlp.py). Nothing is sent: a transport's
time is the network's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.outputs.otlp import (
    ExportState,
    OtlpExporter,
    OtlpProtocol,
    OtlpSettings,
    encode,
    resource_attributes,
)
from joulestat.outputs.prometheus import NodeMetrics
from joulestat.pipeline.sink import TickRecord

NODE = NodeInfo("bench-node", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")


class _Null:
    def send(self, request: object) -> int:
        return 0

    def close(self) -> None:
        pass


def measure(jobs: int, repeat: int) -> tuple[int, float, float]:
    """(bytes, copy µs, encode ms) of an export of a node with ``jobs`` jobs."""
    metrics = NodeMetrics(NODE)
    tick = Tick(1e9, 1e9 + 1, (TickEntry("cpu", "package-0", "rapl", 61.3),
                               TickEntry("dram", "package-0", "rapl", 7.9),
                               TickEntry("accelerator", "gpu0", "nvml_energy", 251.0)))
    metrics.on_tick(TickRecord(tick))
    registry = JobRegistry(max_live_jobs=max(jobs, 1))
    for n in range(jobs):
        job = registry.register(f"job-{n}", "training")
        job.dynamic_j.update({"cpu": 100.0 + n, "accelerator": 900.0 + n})
        registry.count(job.id, "sample", 32 * n + 1)
    accounting = JobAccounting(registry, Path("/nonexistent/proc"), IdleBaselines())
    settings = OtlpSettings("http://127.0.0.1:4318", OtlpProtocol.HTTP_PROTOBUF, (), 10.0,
                            300.0, 500)
    exporter = OtlpExporter(settings, NODE, metrics.values, accounting.snapshot,
                            transport=_Null())
    exporter._last_t1_s = tick.t1_s
    exporter._thread = object()  # type: ignore[assignment]  # copy only: start no thread
    started = time.perf_counter()
    for _ in range(repeat):
        exporter._copy()
    copy_s = (time.perf_counter() - started) / repeat
    state = exporter._pending
    assert isinstance(state, ExportState)
    resource = resource_attributes(NODE)
    started = time.perf_counter()
    for _ in range(repeat):
        request = encode(state, resource, 1e9, "0.1.0")
    encode_s = (time.perf_counter() - started) / repeat
    return len(request.SerializeToString()), copy_s * 1e6, encode_s * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print("| jobs | bytes | copy on the tick thread | encode |")
    print("|---|---|---|---|")
    for jobs in (0, 1, 10, 50, 500):
        size, copy_us, encode_ms = measure(jobs, args.repeat)
        print(f"| {jobs} | {size:,} | {copy_us:.0f} µs | {encode_ms:.2f} ms |")


if __name__ == "__main__":
    main()
