"""Stores filled through the real store API for the report tests.

:func:`fill_store` writes, through :class:`~joulestat.store.writer.StoreWriter` and
:func:`joulestat.attribution.shares.attribute` exactly as the agent does, three jobs:

* ``dist-1``: a multi-node training job, a ``c5.4xlarge`` loader in ``eu-west-1``
  (estimated CPU, ``model:tdp-curve``) and a ``p4d.24xlarge`` trainer in ``us-east-1``
  (RAPL and NVML), each counting its own units, ended;
* ``solo``: an inference job alone on a node of unknown type in an unknown region
  (``mars-central-7``: world average), still running;
* ``secretive``: a short job on the trainer whose labels hold a token and a password.

Expected figures in the tests come from the shares written here, never from the store.
Reports are built at :data:`NOW`, after every job's last tick.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from sqlalchemy.engine import Engine

from joulestat.attribution.shares import DeviceUse, TickUsage, attribute
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter

T0 = 1_700_000_040.0  # a minute boundary
NOW = T0 + 200
LOADER = NodeInfo("loader-1", "c5.4xlarge", "eu-west-1", "Xeon", "0.1.0")
TRAINER = NodeInfo("trainer-1", "p4d.24xlarge", "us-east-1", "EPYC", "0.1.0")
ODD = NodeInfo("odd-1", "homebuilt", "mars-central-7", "Ryzen", "0.1.0")
IDLE_W = {("cpu", "0"): 4.0, ("dram", "0"): 1.0, ("accelerator", "0"): 60.0}
SECRET_LABELS = {"team": "nlp", "api_token": "tok-123", "db_password": "hunter2"}

# (job, component) -> [dynamic_j, idle_j], and (job, unit) -> count, per node
Totals = dict[tuple[str, str, str], list[float]]


def node_devices(node: NodeInfo) -> list[DeviceInfo]:
    devices = [DeviceInfo("cpu", "0", "rapl", index=0), DeviceInfo("dram", "0", "rapl")]
    if node is TRAINER:
        devices.append(DeviceInfo("accelerator", "0", "nvml_energy", model="A100", uuid="G-1",
                                  index=0))
    return devices


def write_ticks(writer: StoreWriter, node: NodeInfo, start_s: float, count: int,
                jobs: tuple[str, ...], totals: Totals, units: dict[str, float] | None = None,
                cpu_source: str = "rapl") -> None:
    """``count`` 1 s ticks on ``node`` shared by ``jobs``; adds their shares to totals."""
    gpu = node is TRAINER
    for i in range(count):
        t1 = start_s + i + 1
        entries = [TickEntry("cpu", "0", cpu_source, 20.0 + i % 7),
                   TickEntry("dram", "0", "rapl", 3.0 + i % 2)]
        if gpu:
            entries.append(TickEntry("accelerator", "0", "nvml_energy", 150.0 + 10 * (i % 5)))
        tick = Tick(t1 - 1.0, t1, tuple(entries))
        job_cpu = {job: 0.3 + 0.1 * ((i + n) % 3) for n, job in enumerate(jobs)}
        devices = {("accelerator", "0"): DeviceUse({jobs[0]: 80.0}, jobs)} if gpu else {}
        usage = TickUsage(node_busy_cpu_s=2.0, job_cpu_s=job_cpu, devices=devices,
                          running_jobs=jobs)
        shares = attribute(tick, usage, IDLE_W, "share")
        writer.add(tick)
        writer.add_shares(tick, shares)
        for share in shares:
            if share.job is not None:
                total = totals[(share.job, node.node, share.component)]
                total[0] += share.dynamic_j
                total[1] += share.idle_j
        for job in jobs:
            if units:
                writer.add_units(job, t1, units)


def make_job(job_id: str, name: str, kind: str, started_s: float,
             ended_s: float | None = None, labels: dict[str, str] | None = None,
             agent_labels: dict[str, str] | None = None) -> JobRecord:
    return JobRecord(id=job_id, name=name, kind=kind, labels=dict(labels or {}),
                     pids=frozenset({100}), started_s=started_s, origin="api",
                     ended_s=ended_s, agent_labels=dict(agent_labels or {}))


def fill_store(engine: Engine) -> Totals:
    """Write the three jobs of the module doc; returns their shares' totals."""
    totals: Totals = defaultdict(lambda: [0.0, 0.0])
    loader = StoreWriter(engine, LOADER, node_devices(LOADER), raw_retention_s=3600)
    trainer = StoreWriter(engine, TRAINER, node_devices(TRAINER), raw_retention_s=3600)
    odd = StoreWriter(engine, ODD, node_devices(ODD), raw_retention_s=3600)
    # What the agents recorded apart (agent labels): dist-1 ran under `joulestat run`.
    loader.save_job(make_job("dist-1", "bert-large", "training", T0, labels={"team": "nlp"},
                             agent_labels={"cpu_source": "process tree",
                                           "idle_policy": "share"}))
    trainer.save_job(make_job("dist-1", "bert-large", "training", T0, labels={"run": "42"},
                              agent_labels={"idle_policy": "share"}))
    odd.save_job(make_job("solo", "resnet-serve", "inference", T0 + 10,
                          agent_labels={"idle_policy": "exclude"}))
    trainer.save_job(make_job("secretive", "probe", "other", T0 + 100,
                              labels=SECRET_LABELS))
    write_ticks(loader, LOADER, T0, 90, ("dist-1",), totals, {"sample": 64.0},
                cpu_source="model:tdp-curve")
    write_ticks(trainer, TRAINER, T0, 100, ("dist-1",), totals, {"token": 4096.0})
    write_ticks(trainer, TRAINER, T0 + 100, 20, ("secretive",), totals)
    write_ticks(odd, ODD, T0 + 10, 50, ("solo",), totals, {"inference": 10.0})
    for writer in (loader, trainer, odd):
        assert writer.flush()
    # the ends are saved later, as the agent does, without the labels: these stay
    loader.save_job(make_job("dist-1", "bert-large", "training", T0, T0 + 90))
    trainer.save_job(make_job("dist-1", "bert-large", "training", T0, T0 + 100))
    trainer.save_job(make_job("secretive", "probe", "other", T0 + 100, T0 + 120))
    assert loader.flush() and trainer.flush()
    return totals


def job_energy(totals: Totals, job: str, node: str | None = None,
               component: str | None = None) -> float:
    return sum(d + i for (j, n, c), (d, i) in totals.items()
               if j == job and node in (None, n) and component in (None, c))


def new_store(path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    return engine


def filled_store(tmp_path: Path) -> tuple[Engine, Totals]:
    """A new SQLite store under ``tmp_path`` with :func:`fill_store`'s jobs."""
    engine = new_store(tmp_path / "measured.db")
    return engine, fill_store(engine)
