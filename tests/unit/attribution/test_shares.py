"""How a tick's energy is shared among jobs (joulestat.attribution.shares): CPU by CPU
time, GPUs by utilization, idle power to the jobs present by the policy, a lone job
carrying the whole node, and never more than the node drew (conserved on random ticks)."""

from __future__ import annotations

import random

import pytest

from joulestat.attribution.shares import DeviceUse, TickUsage, attribute, cpu_shares
from joulestat.core.tick import Tick, TickEntry


def tick(*entries: tuple[str, str, float], duration_s: float = 1.0) -> Tick:
    return Tick(100.0, 100.0 + duration_s,
                tuple(TickEntry(c, d, "model:test", e) for c, d, e in entries))


def by_job(shares, component: str) -> dict:
    return {s.job: s for s in shares if s.component == component}


def test_cpu_split_by_cpu_time_and_idle_shared() -> None:
    t = tick(("cpu", "node", 100.0))
    usage = TickUsage(node_busy_cpu_s=1.5, job_cpu_s={"a": 1.0, "b": 0.5})
    shares = by_job(attribute(t, usage, {("cpu", "node"): 40.0}, "share"), "cpu")
    # dynamic 60 J: a 1.0/1.5, b 0.5/1.5; idle 40 J split 2:1 among jobs
    assert shares["a"].dynamic_j == pytest.approx(40.0)
    assert shares["b"].dynamic_j == pytest.approx(20.0)
    assert shares["a"].idle_j == pytest.approx(40 * 2 / 3)
    assert shares[None].energy_j == pytest.approx(0.0, abs=1e-9)


def test_exclude_keeps_idle_unattributed() -> None:
    t = tick(("cpu", "node", 100.0))
    usage = TickUsage(node_busy_cpu_s=2.0, job_cpu_s={"a": 1.0})
    shares = by_job(attribute(t, usage, {("cpu", "node"): 40.0}, "exclude"), "cpu")
    assert shares["a"].dynamic_j == pytest.approx(30.0)
    assert shares["a"].idle_j == 0
    assert shares[None].dynamic_j == pytest.approx(30.0)
    assert shares[None].idle_j == pytest.approx(40.0)


def test_lone_job_carries_the_whole_node_under_share() -> None:
    t = tick(("cpu", "node", 50.0), ("dram", "node", 10.0))
    usage = TickUsage(node_busy_cpu_s=0.2, job_cpu_s={"a": 0.2})
    shares = attribute(t, usage, {("cpu", "node"): 45.0, ("dram", "node"): 10.0})
    assert sum(s.energy_j for s in shares if s.job == "a") == pytest.approx(60.0)


def test_gpu_split_by_utilization_and_idle_to_holders() -> None:
    t = tick(("accelerator", "gpu0", 300.0), ("accelerator", "gpu1", 70.0))
    usage = TickUsage(
        node_busy_cpu_s=1.0, job_cpu_s={"a": 0.5, "b": 0.5},
        devices={("accelerator", "gpu0"): DeviceUse({"a": 60.0, "b": 20.0}, ("a", "b"))},
    )
    shares = attribute(t, usage, {("accelerator", "gpu0"): 60.0, ("accelerator", "gpu1"): 70.0})
    gpu0 = {s.job: s for s in shares if s.device == "gpu0"}
    assert gpu0["a"].dynamic_j == pytest.approx(180.0)
    assert gpu0["b"].dynamic_j == pytest.approx(60.0)
    assert gpu0["a"].idle_j == gpu0["b"].idle_j == pytest.approx(30.0)
    gpu1 = {s.job: s for s in shares if s.device == "gpu1"}
    assert list(gpu1) == [None] and gpu1[None].idle_j == pytest.approx(70.0)  # nobody holds it


def test_shares_never_exceed_the_node() -> None:
    assert sum(cpu_shares(TickUsage(1.0, {"a": 0.8, "b": 0.6})).values()) == pytest.approx(1.0)


@pytest.mark.parametrize("policy", ["share", "exclude"])
def test_conservation_on_random_ticks(policy: str) -> None:
    rng = random.Random(7)
    for _ in range(500):
        jobs = [f"j{i}" for i in range(rng.randint(0, 5))]
        entries = [(c, d, rng.uniform(0, 500)) for c, d in
                   [("cpu", "node"), ("dram", "node"), ("net", "eth0"), ("accelerator", "gpu0"),
                    ("platform", "psys")]]
        usage = TickUsage(
            node_busy_cpu_s=rng.uniform(0, 4),
            job_cpu_s={j: rng.uniform(0, 2) for j in jobs},
            devices={("accelerator", "gpu0"): DeviceUse({j: rng.uniform(0, 100) for j in jobs[:2]},
                                                tuple(jobs[:3]))},
            presence={j: rng.random() for j in jobs},
        )
        idle = {(c, d): rng.uniform(0, 300) for c, d, _ in entries}
        t = tick(*entries, duration_s=rng.uniform(0.05, 3))
        shares = attribute(t, usage, idle, policy)
        for component, device, energy_j in entries:
            parts = [s for s in shares if (s.component, s.device) == (component, device)]
            assert sum(s.energy_j for s in parts) == pytest.approx(energy_j, rel=1e-12, abs=1e-9)
            assert all(s.dynamic_j >= -1e-9 and s.idle_j >= -1e-9 for s in parts)


def test_idle_share_scaled_by_presence() -> None:
    t = tick(("cpu", "node", 100.0))
    usage = TickUsage(node_busy_cpu_s=0.0, job_cpu_s={"a": 0.0}, running_jobs=("a",),
                      presence={"a": 0.25})
    shares = by_job(attribute(t, usage, {("cpu", "node"): 100.0}), "cpu")
    assert shares["a"].idle_j == pytest.approx(25.0)
    assert shares[None].idle_j == pytest.approx(75.0)
