"""A sample store, written through the agent's own store API, to try the dashboard on.

``python -m joulestat.demo.sample_store sqlite:////tmp/sample.db`` fills a store with a few hours
of five simulated nodes (an A10G, an Inferentia2 and a CPU-only inference box, and a
p4d trainer fed by a c5 loader as one multi-node job), so the pages can be seen and
tested without hardware. The tests, the browser test, the benchmark and the
screenshots in ``docs/screenshots`` all use it.

Nothing here bypasses the agent's path: every tick goes through
:func:`joulestat.attribution.shares.attribute` and :class:`~joulestat.store.writer.StoreWriter`
(``add``, ``add_shares``, ``add_units``, ``save_job``, ``maintain``), so the sample
exercises raw rows, minute rollups and pruning exactly as an agent would. The power
and speed figures are illustrative round numbers, not measurements.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from sqlalchemy.engine import Engine

from joulestat.attribution.agent_labels import policy_labels
from joulestat.attribution.shares import DeviceUse, IdlePolicy, TickUsage, attribute
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo
from joulestat.core.tick import Component, Tick, TickEntry
from joulestat.store.writer import StoreWriter

CPU, DRAM, ACCELERATOR = Component.CPU, Component.DRAM, Component.ACCELERATOR
# The idle policy the sample is attributed under, recorded on every job as an agent
# records its own (the agent label idle_policy).
POLICY = IdlePolicy.SHARE


@dataclass(frozen=True, slots=True)
class Part:
    """A component of a simulated instance: ``devices`` alike, each idle..max watts."""

    component: Component
    devices: int
    source: str
    idle_w: float
    max_w: float


@dataclass(frozen=True, slots=True)
class Profile:
    """An instance type as the sample simulates it."""

    instance_type: str
    region: str
    cpu_model: str
    vcpus: int
    parts: tuple[Part, ...]
    requests_per_s: float = 0.0  # inference at saturation
    half_concurrency: float = 1.0  # concurrency at half that rate


PROFILES = {
    "g5.xlarge": Profile("g5.xlarge", "us-east-1", "AMD EPYC 7R32", 4, (
        Part(CPU, 1, "rapl", 22, 85), Part(DRAM, 1, "rapl", 3, 9),
        Part(ACCELERATOR, 1, "nvml_energy", 58, 300)), requests_per_s=190, half_concurrency=6),
    "inf2.xlarge": Profile("inf2.xlarge", "us-east-1", "AMD EPYC 7R13", 4, (
        Part(CPU, 1, "model:ccf-vcpu", 3, 14), Part(DRAM, 1, "model:dram-gib", 6, 6),
        Part(ACCELERATOR, 1, "neuron", 32, 120)), requests_per_s=150, half_concurrency=8),
    "c6i.2xlarge": Profile("c6i.2xlarge", "eu-west-1", "Intel Xeon Platinum 8375C", 8, (
        Part(CPU, 1, "model:tdp-curve", 18, 105), Part(DRAM, 1, "model:dram-gib", 6, 6)),
        requests_per_s=24, half_concurrency=3),
    "p4d.24xlarge": Profile("p4d.24xlarge", "us-west-2", "Intel Xeon Platinum 8275CL", 96, (
        Part(CPU, 2, "rapl", 55, 240), Part(DRAM, 2, "rapl", 10, 30),
        Part(ACCELERATOR, 8, "nvml_energy", 52, 400))),
    "c5.4xlarge": Profile("c5.4xlarge", "us-west-2", "Intel Xeon Platinum 8124M", 16, (
        Part(CPU, 1, "rapl", 28, 150), Part(DRAM, 1, "rapl", 5, 14))),
}
NODES = {"gpu-a10g-1": "g5.xlarge", "inf2-1": "inf2.xlarge", "cpu-c6i-1": "c6i.2xlarge",
         "trainer-p4d-1": "p4d.24xlarge", "loader-c5-1": "c5.4xlarge"}
CONCURRENCY = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True, slots=True)
class Work:
    """What one job does on one node: load per component (0..1) and units per second."""

    load: dict[str, float]
    unit: str | None = None
    rate_per_s: float = 0.0


@dataclass
class Planned:
    job: JobRecord
    start_s: float
    end_s: float | None  # None: still running at the end of the sample
    work: dict[str, Work] = field(default_factory=dict)  # node -> what it does there


def _inference(profile: Profile, concurrency: int) -> Work:
    busy = concurrency / (concurrency + profile.half_concurrency)
    accel = 0.08 + 0.9 * busy
    cpu = 0.1 + (0.85 if profile.instance_type.startswith("c6i") else 0.35) * busy
    return Work({CPU: cpu, DRAM: 0.3 + 0.5 * busy, ACCELERATOR: accel},
                "request", profile.requests_per_s * busy)


def _lanes() -> list[tuple[tuple[str, ...], list[tuple[str, dict]]]]:
    """Which nodes work together, and the cycle of jobs each lane runs."""
    g5, inf2, c6i = (PROFILES[NODES[n]] for n in ("gpu-a10g-1", "inf2-1", "cpu-c6i-1"))

    def serving(node: str, profile: Profile) -> list[tuple[str, dict]]:
        return [("inference", {"name": f"bert-serve-c{c}", "labels": {
            "concurrency": str(c), "model": "bert-base"},
            "work": {node: _inference(profile, c)}}) for c in CONCURRENCY]

    return [
        (("gpu-a10g-1",), serving("gpu-a10g-1", g5) + [
            ("training", {"name": "resnet50-finetune", "labels": {"model": "resnet50"},
                          "work": {"gpu-a10g-1": Work({CPU: 0.4, DRAM: 0.6, ACCELERATOR: 0.93},
                                                      "sample", 910)}}),
            ("training", {"name": "resnet50-jpeg-decode", "labels": {"model": "resnet50"},
                          "work": {"gpu-a10g-1": Work({CPU: 0.98, DRAM: 0.7, ACCELERATOR: 0.1},
                                                      "sample", 150)}})]),
        (("inf2-1",), serving("inf2-1", inf2)),
        (("cpu-c6i-1",), serving("cpu-c6i-1", c6i)),
        (("trainer-p4d-1", "loader-c5-1"), [
            ("training", {"name": "llama-7b-finetune", "labels": {"model": "llama-7b"},
                          "work": {
                              "trainer-p4d-1": Work({CPU: 0.4, DRAM: 0.5, ACCELERATOR: 0.9},
                                                    "sample", 2400),
                              "loader-c5-1": Work({CPU: 0.85, DRAM: 0.6})}})]),
    ]


def plan(start_s: float, end_s: float, jobs: int, leave_running: bool = True) -> list[Planned]:
    """``jobs`` jobs over ``(start_s, end_s]``, each lane busy 85 % of its share of time."""
    lanes = _lanes()
    weights = [len(cycle) for _nodes, cycle in lanes]
    counts = [max(1, round(jobs * w / sum(weights))) for w in weights]
    counts[0] += jobs - sum(counts)
    result: list[Planned] = []
    for (nodes, cycle), count in zip(lanes, counts, strict=True):
        slot_s = (end_s - start_s) / max(count, 1)
        for i in range(count):
            kind, spec = cycle[i % len(cycle)]
            t0 = start_s + i * slot_s + 0.05 * slot_s
            last = leave_running and i == count - 1 and nodes == lanes[0][0]
            t1 = None if last else t0 + 0.85 * slot_s
            job_id = f"{spec['name']}-{nodes[0].split('-')[0]}-{i:05d}"
            job = JobRecord(id=job_id, name=spec["name"], kind=kind,
                            labels=dict(spec["labels"]), pids=frozenset({1000 + i % 30000}),
                            started_s=round(t0, 3), origin="api",
                            ended_s=None if t1 is None else round(t1, 3),
                            agent_labels=policy_labels(POLICY))
            result.append(Planned(job, round(t0, 3), None if t1 is None else round(t1, 3),
                                  dict(spec["work"])))
    return sorted(result, key=lambda p: (p.start_s, p.job.id))


def _devices(profile: Profile) -> list[DeviceInfo]:
    return [DeviceInfo(p.component, str(i), p.source, index=i)
            for p in profile.parts for i in range(p.devices)]


def _node_jobs(planned: list[Planned], node: str) -> Iterator[Planned]:
    return (p for p in planned if node in p.work)


def simulate_node(engine: Engine, node: str, planned: list[Planned], start_s: float,
                  end_s: float, tick_s: float, raw_retention_s: float, seed: int,
                  maintain_every_s: float = 600.0) -> int:
    """Write one node's ticks, shares, units and jobs; returns the number of ticks.

    ``maintain()`` runs every ``maintain_every_s`` of simulated time, as the agent's
    once-a-minute call would have by then: rollups and pruning happen on the way.
    """
    profile = PROFILES[NODES[node]]
    info = NodeInfo(node, profile.instance_type, profile.region, profile.cpu_model, "sample")
    writer = StoreWriter(engine, info, _devices(profile), raw_retention_s=raw_retention_s,
                         max_batch_rows=5000, max_buffered_rows=400_000)
    rng = random.Random(f"{seed}:{node}")
    idle_w = {(p.component, str(i)): p.idle_w for p in profile.parts for i in range(p.devices)}
    jobs = list(_node_jobs(planned, node))
    started: set[str] = set()
    ended: set[str] = set()
    ticks = 0
    t = start_s
    next_maintain = start_s + maintain_every_s
    while t + tick_s <= end_s + 1e-9:
        t0, t1 = t, round(t + tick_s, 3)
        t = t1
        active = [p for p in jobs if p.start_s < t1 and (p.end_s is None or p.end_s > t0)]
        for p in active:
            if p.job.id not in started:
                started.add(p.job.id)
                writer.save_job(replace(p.job, ended_s=None))
        load: dict[str, float] = {}
        for p in active:
            for component, value in p.work[node].load.items():
                load[component] = min(1.0, load.get(component, 0.0) + value)
        entries = []
        for part in profile.parts:
            level = load.get(part.component, 0.02)
            for i in range(part.devices):
                watts = part.idle_w + (part.max_w - part.idle_w) * level
                watts *= 1 + rng.uniform(-0.04, 0.04)
                entries.append(TickEntry(part.component, str(i), part.source,
                                         max(watts, 0.0) * tick_s))
        tick = Tick(t0, t1, tuple(entries))
        busy_cpu_s = max(load.get(CPU, 0.02), 0.02) * profile.vcpus * tick_s
        usage = TickUsage(
            node_busy_cpu_s=busy_cpu_s,
            job_cpu_s={p.job.id: 0.9 * busy_cpu_s / len(active) for p in active},
            devices={(part.component, str(i)): DeviceUse(
                {p.job.id: 100 * p.work[node].load.get(part.component, 0.0) for p in active},
                tuple(p.job.id for p in active))
                for part in profile.parts if part.component == ACCELERATOR
                for i in range(part.devices)},
            running_jobs=tuple(p.job.id for p in active),
        )
        writer.add(tick)
        writer.add_shares(tick, attribute(tick, usage, idle_w, POLICY))
        for p in active:
            work = p.work[node]
            if work.unit and work.rate_per_s > 0:
                count = work.rate_per_s * tick_s * (1 + rng.uniform(-0.03, 0.03))
                writer.add_units(p.job.id, t1, {work.unit: math.floor(count)})
            if p.end_s is not None and p.end_s <= t1 and p.job.id not in ended:
                ended.add(p.job.id)
                writer.save_job(replace(p.job, ended_s=p.end_s))
        ticks += 1
        if ticks % 2000 == 0:
            writer.flush()
        if t1 >= next_maintain:
            writer.maintain(t1)
            next_maintain = t1 + maintain_every_s
    writer.maintain(end_s)
    writer.close()
    return ticks


def fill(engine: Engine, *, end_s: float | None = None, hours: float = 3.0, jobs: int = 22,
         tick_s: float = 5.0, raw_retention_s: float = 3600.0, seed: int = 7,
         leave_running: bool = True, maintain_every_s: float = 600.0) -> list[Planned]:
    """Fill a migrated store with ``hours`` of all sample nodes ending at ``end_s``
    (default: now, so current power looks current). Returns the plan it wrote."""
    end = math.floor((time.time() if end_s is None else end_s) / tick_s) * tick_s
    start = end - hours * 3600
    planned = plan(start, end, jobs, leave_running)
    for node in NODES:
        simulate_node(engine, node, planned, start, end, tick_s, raw_retention_s, seed,
                      maintain_every_s)
    return planned


def main(argv: list[str] | None = None) -> int:
    from joulestat.store.engine import make_engine
    from joulestat.store.migrate import upgrade

    parser = argparse.ArgumentParser(prog="python -m joulestat.demo.sample_store",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", help="SQLAlchemy URL of the store to fill (migrated first)")
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--jobs", type=int, default=22)
    parser.add_argument("--tick", type=float, default=5.0, help="seconds per tick")
    args = parser.parse_args(argv)
    engine = make_engine(args.db)
    upgrade(engine)
    planned = fill(engine, hours=args.hours, jobs=args.jobs, tick_s=args.tick)
    print(f"wrote {len(planned)} jobs on {len(NODES)} nodes to {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
