"""The real agent pipeline (sensors -> sampler -> attribution -> Prometheus, store) over
fake accelerators of every vendor: right energy, source and device info; failures tick on.

``build_pipeline`` is what ``joulestat agent`` runs; only its clock is driven by the test,
so power-based sources integrate over known intervals, and its store is migrated
beforehand (a new one the agent creates out of process).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from joulestat.attribution.registry import JobRegistry
from joulestat.cli.agent import AGENT_OPTIONS
from joulestat.outputs.prometheus import make_registry
from joulestat.pipeline.pipeline import Pipeline
from joulestat.runtime.assembly import Assembly, PipelineSettings, build_pipeline
from joulestat.runtime.settings import resolve
from joulestat.store.nodes import node_devices
from tests.fakes.amdsmi import FakeAmdGpu, FakeAmdsmi
from tests.fakes.hlml import FakeHlml, FakeHpu
from tests.fakes.neuron import FakeNeuron, monitor_report, write_monitor
from tests.fakes.nvml import FakeGpu, FakeMigInstance, FakeNvml, FakeUtilSample
from tests.fakes.procfs import FakeProc
from tests.helpers.store_rows import migrated_engine


@dataclass
class Node:
    """One agent over a fake node; ``tick(dt)`` advances its clock and ticks once."""

    pipeline: Pipeline
    proc: FakeProc
    registry: JobRegistry
    built: Assembly
    now_s: float = 1000.0
    results: list[Any] = field(default_factory=list)

    def tick(self, dt_s: float = 1.0) -> None:
        self.now_s += dt_s
        self.proc.busy += round(dt_s * 100)
        self.proc.write()
        self.results.append(self.pipeline.tick()[1])

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = generate_latest(make_registry(self.built.node_metrics)).decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    def energy_j(self, component: str, device: str, source: str) -> float:
        key = ("joulestat_node_energy_joules_total",
               (("component", component), ("device", device), ("source", source)))
        return self.scrape()[key]

    def device_info(self) -> list[dict[str, str]]:
        return [dict(labels) for (name, labels) in self.scrape()
                if name == "joulestat_node_device_info"]

    def job_dynamic_j(self, job_id: str, component: str = "accelerator") -> float:
        return sum(s.dynamic_j for r in self.results if r is not None for s in r.shares
                   if s.job == job_id and s.component == component)


@pytest.fixture
def make_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # No vendor library unless a test installs its fake.
    for module in ("pynvml", "amdsmi", "pyhlml"):
        monkeypatch.setitem(sys.modules, module, None)
    nodes: list[Node] = []

    def make(**overrides: Any) -> Node:
        proc = FakeProc(tmp_path / "proc")
        (proc.root / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU\n\n")
        (proc.root / "meminfo").write_text("MemTotal:       16384000 kB\n")
        sysfs = tmp_path / "sys"
        sysfs.mkdir(exist_ok=True)
        db_url = f"sqlite:///{tmp_path / 'store.db'}"
        # The store at head before the agent opens it: a new one it would create out of
        # process (`joulestat db upgrade` in a child, which the system tests run).
        with migrated_engine(db_url):
            pass
        settings = resolve({"sysfs_root": str(sysfs), "procfs_root": str(proc.root),
                            "db": db_url, "node": "n1",
                            "instance_type": "test.xlarge", "region": "us-east-1",
                            "cloud_metadata": False, "spool_dir": str(tmp_path / "spool"),
                            **overrides}, AGENT_OPTIONS, env={})
        registry = JobRegistry()
        # One fake clock for the sensors' first reads and the ticks: on a machine up for
        # less than the fake clock's start (1000 s) a real one at open made the first
        # tick span the difference and the fill's recent power a fraction of the truth.
        made: list[Node] = []
        built = build_pipeline(PipelineSettings.of(settings), registry, with_metrics=True,
                               monotonic=lambda: made[0].now_s if made else 1000.0,
                               wall=lambda: 1.7e9 + (made[0].now_s if made else 1000.0))
        pipeline = built.pipeline
        node = Node(pipeline, proc, registry, built)
        made.append(node)
        pipeline.start()
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.pipeline.close()


def test_amd_through_the_agent(make_node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeAmdGpu(accumulator=1_000_000, power_w=0.0)]  # no power: counter trusted
    FakeAmdsmi(gpus).install(monkeypatch)
    monkeypatch.setattr("joulestat.devices.amd.PROBE_S", 0.0)
    monkeypatch.setattr("joulestat.devices.amd.time.sleep", lambda s: gpus[0].add_joules(1.0))
    node = make_node()
    start_j = gpus[0].energy_j
    for _ in range(5):
        gpus[0].add_joules(350.0)
        node.tick()
    exported = node.energy_j("accelerator", "amdgpu0", "amdsmi")
    assert exported == pytest.approx(gpus[0].energy_j - start_j, rel=0.01)
    assert {"component": "accelerator", "device": "amdgpu0", "vendor": "AMD",
            "model": "AMD Instinct MI300X", "uuid": "amd-0000",
            "attribution": ""} in node.device_info()
    gpus.pop()  # the device vanishes: the agent ticks on
    node.tick()
    node.tick()
    assert node.energy_j("accelerator", "amdgpu0", "amdsmi") == pytest.approx(exported)
    node.built.writer.flush()
    stored = node_devices(node.built.writer.engine, "n1")
    assert [(d.device, d.model) for d in stored if d.component == "accelerator"] == [
        ("amdgpu0", "AMD Instinct MI300X")]


def test_gaudi_through_the_agent_with_a_counter_reset(make_node: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hpus = [FakeHpu(energy_mj=9_000_000)]
    FakeHlml(hpus).install(monkeypatch)
    node = make_node()
    for _ in range(3):
        hpus[0].energy_mj += 200_000
        node.tick()
    hpus[0].energy_mj = 5_000  # driver reload: a new baseline, nothing negative
    node.tick()
    hpus[0].energy_mj += 100_000
    node.tick()
    assert node.energy_j("accelerator", "gaudi0", "hlml") == pytest.approx(700.0, rel=0.01)
    # The reload's second is filled at the recent 200 W and exported apart, an estimate.
    assert node.energy_j("accelerator", "gaudi0", "fill:hlml") == pytest.approx(200.0)
    faults = {labels: v for (name, labels), v in node.scrape().items()
              if name == "joulestat_agent_sensor_faults_total"}
    assert faults[(("kind", "backwards"), ("sensor", "gaudi"))] == 1
    assert all(s.energy_j >= 0 for r in node.results for s in r.shares)
    info = node.device_info()
    assert any(d["device"] == "gaudi0" and d["vendor"] == "Intel" and d["model"] == "HL-225"
               for d in info)


def test_neuron_through_the_agent(make_node: Any, tmp_path: Path) -> None:
    fake = FakeNeuron(tmp_path / "sys")
    fake.add_device(0, "Inferentia2")
    monitor = tmp_path / "neuron-monitor.jsonl"
    node = make_node(neuron_max_power_w=100.0, neuron_monitor=str(monitor))
    fake.set_power(0, 40.0)
    for _ in range(10):
        node.tick()
    assert node.energy_j("accelerator", "neuron0", "neuron") == pytest.approx(400.0, rel=0.01)
    fake.set_status(0, "NO_DATA")  # no driver power: estimated from core use when known
    node.tick()
    write_monitor(monitor, monitor_report([(4242, "bert", {0: 50.0, 1: 50.0})]))
    for _ in range(4):
        node.tick()
    assert node.energy_j("accelerator", "neuron0", "neuron") == pytest.approx(400.0, rel=0.01)
    assert node.energy_j("accelerator", "neuron0", "model:neuron-util") == pytest.approx(
        200.0, rel=0.01)
    assert {"component": "accelerator", "device": "neuron0", "vendor": "AWS",
            "model": "AWS Inferentia2", "uuid": "neuron0", "attribution": ""
            } in node.device_info()


def test_a_node_without_accelerators_says_what_it_looked_for(
        make_node: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="joulestat.devices.factory"):
        node = make_node()
    node.tick()
    line = next(r.message for r in caplog.records if r.message.startswith("accelerators:"))
    for vendor in ("nvidia", "amd", "gaudi", "neuron"):
        assert vendor in line
    assert not any(labels for (name, labels) in node.scrape()
                   if name == "joulestat_node_energy_joules_total"
                   and ("component", "accelerator") in labels)


def _two_jobs(node: Node) -> None:
    for pid, job in ((101, "a"), (102, "b")):
        node.proc.add(pid, start_s=1000)
        node.registry.register(job, "inference", [pid], job_id=job)
    node.proc.write()


def test_two_processes_at_3_to_1_utilization_share_one_gpu_3_to_1(
        make_node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(energy_mj=0, compute_pids=[101, 102])
    FakeNvml([gpu]).install(monkeypatch)
    node = make_node()
    _two_jobs(node)
    stamp = 1
    for _ in range(10):
        gpu.energy_mj += 300_000  # 300 W
        gpu.util_samples += [FakeUtilSample(101, stamp, 75), FakeUtilSample(102, stamp, 25)]
        stamp += 1
        node.tick()
    a, b = node.job_dynamic_j("a"), node.job_dynamic_j("b")
    assert a > 0 and a / b == pytest.approx(3.0, rel=0.05)


def test_mig_splits_one_gpu_by_slice_size_and_keeps_the_node_total(
        make_node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(energy_mj=0, mig_instances=[FakeMigInstance(3, [101]), None,
                                              FakeMigInstance(1, [102])])
    FakeNvml([gpu]).install(monkeypatch)
    node = make_node()
    _two_jobs(node)
    for _ in range(5):
        gpu.energy_mj += 200_000
        node.tick()
    a, b = node.job_dynamic_j("a"), node.job_dynamic_j("b")
    assert a / b == pytest.approx(3.0, rel=0.01)
    shares = [s for r in node.results for s in r.shares if s.component == "accelerator"]
    assert sum(s.energy_j for s in shares) == pytest.approx(1000.0, rel=1e-9)
    assert node.energy_j("accelerator", "gpu0", "nvml_energy") == pytest.approx(1000.0)
    [info] = [d for d in node.device_info() if d["device"] == "gpu0"]
    assert info["attribution"] == "mig_slice_estimate"


def test_nvidia_counter_going_back_starts_a_new_baseline(
        make_node: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = FakeGpu(energy_mj=50_000_000)
    FakeNvml([gpu]).install(monkeypatch)
    node = make_node()
    gpu.energy_mj += 100_000
    node.tick()
    with caplog.at_level("WARNING"):
        gpu.energy_mj = 1_000  # GPU reset
        node.tick()
        gpu.energy_mj += 50_000
        node.tick()
    assert node.energy_j("accelerator", "gpu0", "nvml_energy") == pytest.approx(150.0)
    assert sum("went back" in r.message for r in caplog.records) == 1
    assert all(s.energy_j >= 0 for r in node.results for s in r.shares)
