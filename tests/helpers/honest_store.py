"""A store that holds what a new user's first week holds, for the tests of issue 11.

Written through the agent's own path (:func:`joulestat.attribution.shares.attribute` and
:class:`~joulestat.store.writer.StoreWriter`) and ``joulestat import``, with ticks off the
second grid as real ticks are:

* ``steady``: a training job alone on a laptop (instance type ``local``, France: embodied
  and cost unknown, operational CO2e known) drawing a constant 15 W of CPU and counting
  50 samples a tick for 61.4 s;
* ``mlp-serve``: inference runs of one name on a g5.xlarge (RAPL, NVML), told apart by
  their ``concurrency`` label (1, 4, 16), plus a 5-second smoke test at concurrency 1;
  ``bert-cpu`` runs on a c6i.2xlarge whose CPU and DRAM are estimated (``model:*``);
* ``mlp-train`` on both instance types, the g5 the slower per sample (so the default
  Compare baseline differs between kinds);
* ``vm-ramp``: a job measured on another store's VM (``model:ccf-vcpu``), its power
  rising step by step, exported as a JSON report and imported here;
* a CodeCarbon run (CSV rows in CodeCarbon's own columns) imported here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.engine import Engine

from joulestat.attribution.shares import DeviceUse, TickUsage, attribute
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.reports.importer import import_file
from joulestat.reports.json_report import render_json
from joulestat.reports.model import build_report
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter

LAPTOP = NodeInfo("laptop-1", "local", "FRA", "Intel Core i7", "0.1.0")
GPU = NodeInfo("gpu-1", "g5.xlarge", "us-east-1", "AMD EPYC 7R32", "0.1.0")
VM = NodeInfo("vm-1", "c6i.2xlarge", "eu-west-1", "Intel Xeon Platinum 8375C", "0.1.0")
REMOTE_VM = NodeInfo("vm-remote-1", "c6i.xlarge", "eu-west-1", "Intel Xeon", "0.1.0")
SOURCES = {
    "laptop-1": {"cpu": "rapl"},
    "gpu-1": {"cpu": "rapl", "dram": "rapl", "accelerator": "nvml_energy"},
    "vm-1": {"cpu": "model:ccf-vcpu", "dram": "model:dram-gib"},
    "vm-remote-1": {"cpu": "model:ccf-vcpu", "dram": "model:dram-gib"},
}
STEADY_W = 15.0
STEADY_S = 61.4
OFFSET_S = 0.37  # ticks end at x.37 s, never on the bucket grid
CODECARBON_HEADER = (
    "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,"
    "cpu_power,gpu_power,ram_power,cpu_energy,gpu_energy,ram_energy,energy_consumed,"
    "water_consumed,country_name,country_iso_code,region,cloud_provider,cloud_region,os,"
    "python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,gpu_model,longitude,"
    "latitude,ram_total_size,tracking_mode,cpu_utilization_percent,"
    "gpu_utilization_percent,ram_utilization_percent,ram_used_gb,on_cloud,pue,wue\n")


def codecarbon_row(run_id: str, end: str, project: str = "mlp-train") -> str:
    """A row as CodeCarbon 3.3.2 writes it: 60 s, 2.2e-4 kWh CPU, 3.3e-4 kWh RAM."""
    return (f"{end},{project},{run_id},exp-1,60.0,1.74e-05,2.9e-07,13.2,0.0,20.0,0.00022,"
            "0.0,0.00033,0.00055,0.0,France,FRA,,,,Linux,3.11.7,3.3.2,8,Intel Core i7,0,,"
            ",,23.5,machine,40.0,0,2.4,0.6,N,1.0,0.0\n")


@dataclass(frozen=True, slots=True)
class Run:
    """One job to write: on ``node``, ``watts`` per component, ``seconds`` long."""

    job_id: str
    name: str
    kind: str
    node: NodeInfo
    start_s: float
    seconds: float
    watts: dict[str, float]
    labels: dict[str, str]
    unit: str | None = None
    per_tick: float = 0.0  # units counted per tick
    ramp_w: float = 0.0  # watts added to cpu every 10 s


def _devices(node: NodeInfo) -> list[DeviceInfo]:
    return [DeviceInfo(c, "0", s) for c, s in SOURCES[node.node].items()]


def write_run(engine: Engine, run: Run) -> None:
    """``run`` alone on its node, one tick a second ending at ``start + OFFSET_S + k``,
    the last one partial, at the end of the job."""
    writer = StoreWriter(engine, run.node, _devices(run.node), raw_retention_s=30 * 86400)
    job = JobRecord(id=run.job_id, name=run.name, kind=run.kind, labels=dict(run.labels),
                    pids=frozenset({1}), started_s=run.start_s, origin="api")
    writer.save_job(job)
    end_s = run.start_s + run.seconds
    t0 = run.start_s
    while t0 < end_s - 1e-9:
        t1 = min(math.floor(t0 - OFFSET_S) + 1 + OFFSET_S, end_s)
        if t1 - t0 < 1e-3:
            t1 = min(t1 + 1.0, end_s)
        cpu_w = run.watts.get("cpu", 0.0) + run.ramp_w * ((t0 - run.start_s) // 10)
        entries = tuple(TickEntry(c, "0", SOURCES[run.node.node][c],
                                  (cpu_w if c == "cpu" else w) * (t1 - t0))
                        for c, w in run.watts.items())
        tick = Tick(t0, t1, entries)
        usage = TickUsage(node_busy_cpu_s=1.0, job_cpu_s={run.job_id: 1.0},
                          devices={("accelerator", "0"): DeviceUse({run.job_id: 90.0},
                                                                   (run.job_id,))},
                          running_jobs=(run.job_id,))
        writer.add(tick)
        writer.add_shares(tick, attribute(tick, usage, {}))
        if run.unit:
            writer.add_units(run.job_id, t1, {run.unit: run.per_tick * (t1 - t0)})
        t0 = t1
    writer.save_job(replace(job, ended_s=end_s))
    assert writer.flush()
    writer.close()


def new_store(path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    return engine


def runs(start_s: float) -> list[Run]:
    """The measured jobs of the module doc, one after another from ``start_s``."""
    found = [Run("steady", "steady", "training", LAPTOP, start_s, STEADY_S,
                 {"cpu": STEADY_W}, {"model": "mlp"}, "sample", 50.0)]
    at = start_s + 100
    for i, (level, seconds, rate) in enumerate(((1, 120, 40.0), (4, 120, 120.0),
                                                 (16, 120, 200.0), (1, 5, 40.0))):
        found.append(Run(f"serve-{i}", "mlp-serve", "inference", GPU, at, seconds,
                         {"cpu": 30.0, "dram": 4.0, "accelerator": 60.0 + 10 * level},
                         {"concurrency": str(level)}, "request", rate))
        at += seconds + 30
    for i, level in enumerate((1, 4)):
        found.append(Run(f"cpu-{i}", "bert-cpu", "inference", VM, at, 90, {"cpu": 60.0,
                         "dram": 6.0}, {"concurrency": str(level)}, "request", 10.0 * level))
        at += 120
    found.append(Run("train-g5", "mlp-train", "training", GPU, at, 90,
                     {"cpu": 40.0, "dram": 5.0, "accelerator": 200.0}, {}, "sample", 100.0))
    found.append(Run("train-c6i", "mlp-train", "training", VM, at + 120, 90,
                     {"cpu": 90.0, "dram": 6.0}, {}, "sample", 400.0))
    return found


def fill(engine: Engine, tmp: Path, start_s: float | None = None) -> dict[str, Path]:
    """Write every job of the module doc into ``engine``; the files it imported."""
    start = (time.time() - 3 * 3600) if start_s is None else start_s
    start = math.floor(start) + 0.81  # jobs start off the grid too
    for run in runs(start):
        write_run(engine, run)
    remote = new_store(tmp / "remote.db")
    write_run(remote, Run("vm-ramp", "vm-ramp", "training", REMOTE_VM, start + 2000, 300,
                          {"cpu": 20.0, "dram": 3.0}, {"team": "vision"}, "sample", 30.0,
                          ramp_w=4.0))
    exported = tmp / "vm-ramp.json"
    exported.write_text(render_json(build_report(remote, "vm-ramp",
                                                 now_s=start + 2400)))
    remote.dispose()
    import_file(engine, exported)
    emissions = tmp / "emissions.csv"
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start + 3000))
    emissions.write_text(CODECARBON_HEADER + codecarbon_row("cc-run-1", end))
    import_file(engine, emissions)
    return {"report": exported, "codecarbon": emissions}
