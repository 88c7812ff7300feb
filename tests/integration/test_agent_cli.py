"""The real ``joulestat agent`` process: metrics, store, bad input, clean stop."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import agent_env, run_cli, running_agent, wait_for

ENERGY = "joulestat_node_energy_joules_total"
POWER = "joulestat_node_power_watts"
TICKS = "joulestat_agent_ticks_total"


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def test_fake_rapl_counter_with_wraps_is_exported_at_its_rate(tmp_path: Path) -> None:
    """Acceptance 2: a package counter growing at a known rate and wrapping every 2 s."""
    power_w, interval_s = 40.0, 0.2
    fake = FakePowercap(tmp_path / "sys")
    # 80 J range: at 40 W the counter wraps every 2 s, several times during the test.
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=80_000_000)
    fake.add_zone("intel-rapl:0:0", "core", parent="intel-rapl:0")
    with fake.drive("intel-rapl:0", power_w=power_w, hz=500), running_agent(
        tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", str(interval_s)
    ) as agent:
        key = labels(component="cpu", device="package-0", source="rapl")
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 3)
        first = agent.samples()
        time.sleep(7.0)
        last = agent.samples()
        ticks = last[(TICKS, ())] - first[(TICKS, ())]
        energy_j = last[(ENERGY, key)] - first[(ENERGY, key)]
        # Ticks fire on a fixed monotonic grid, so ticks x interval is the time they covered.
        rate_w = energy_j / (ticks * interval_s)
        print(f"exported rate {rate_w:.4f} W for {power_w} W, error {rate_w / power_w - 1:+.4%}")
        assert rate_w == pytest.approx(power_w, rel=0.01), (rate_w, agent.log())
        # core is a sub-zone of the package: never exported as extra cpu energy
        assert [k for (n, k) in last if n == ENERGY and dict(k)["component"] == "cpu"] == [key]
        assert agent.stop() == 0
    assert "dropped" not in agent.log()  # wraps are not mistaken for implausible jumps


def test_metrics_pass_promtool(tmp_path: Path) -> None:
    """Acceptance 3: the exposition is clean for `promtool check metrics`."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI: .ci/run installs Debian's prometheus")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.1") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 2)
        text = agent.text()
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


def _cpu_power_w(agent, seconds: float) -> float:
    """Average estimated cpu power over a window, from the counter and tick count."""
    def cpu_energy(samples):
        return sum(v for (n, k), v in samples.items()
                   if n == ENERGY and dict(k)["component"] == "cpu")

    before = agent.samples()
    time.sleep(seconds)
    after = agent.samples()
    ticks = after[(TICKS, ())] - before[(TICKS, ())]
    return (cpu_energy(after) - cpu_energy(before)) / (ticks * 0.25)


def test_vm_without_sensors_reports_estimates_that_follow_load(tmp_path: Path) -> None:
    """Acceptance 4: no RAPL, no GPU: non-zero model:* cpu and dram; cpu rises under a burner."""
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.25") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 2)
        power = agent.series(POWER)
        sources = {dict(k)["component"]: dict(k)["source"] for k in power}
        assert sources["cpu"].startswith("model:") and sources["dram"].startswith("model:")
        assert all(v > 0 for k, v in power.items() if dict(k)["component"] in ("cpu", "dram"))
        idle_w = _cpu_power_w(agent, 3.0)
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            busy_w = _cpu_power_w(agent, 3.0)
        finally:
            burner.kill()
            burner.wait()
        assert idle_w > 0
        assert busy_w > idle_w * 1.2, (idle_w, busy_w)
        assert agent.stop() == 0


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--interval", "0"], {}, "--interval"),
        (["--interval", "abc"], {}, "--interval"),
        ([], {"JOULESTAT_METRICS_PORT": "99999"}, "JOULESTAT_METRICS_PORT"),
        (["--sysfs-root", "/nonexistent/sys"], {}, "--sysfs-root"),
        (["--db", "nonsense"], {}, "--db"),
        (["--db", "mysql+nodriver://x/y"], {}, "--db"),
    ],
)
def test_bad_config_stops_with_a_message_naming_the_setting(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    port = [] if "JOULESTAT_METRICS_PORT" in env else ["--metrics-port", "0"]
    result = run_cli("agent", *port, "--db", f"sqlite:///{tmp_path}/a.db", *args,
                     env=agent_env(**env), timeout_s=30)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_replay_trace_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("t_s,component,device,watts\n0,cpu,package-0,10\n1,cpu,package-0,lots\n")
    result = run_cli("agent", "--metrics-port", "0", "--db", f"sqlite:///{tmp_path}/a.db",
                     "--replay", str(trace))
    assert result.returncode == 2
    assert f"{trace}:3" in result.stderr


def test_malformed_sysfs_zone_does_not_stop_the_others(tmp_path: Path) -> None:
    """Acceptance 5: one unreadable zone, the agent keeps ticking on what it can read."""
    fake = FakePowercap(tmp_path / "sys")
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**12)
    fake.add_zone("intel-rapl:1", "package-1", max_energy_range_uj=10**12)
    with fake.drive("intel-rapl:0", power_w=10.0), fake.drive("intel-rapl:1", power_w=20.0), \
            running_agent(tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", "0.1"
                          ) as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 3)
        zone = tmp_path / "sys" / "class" / "powercap" / "intel-rapl:1" / "energy_uj"
        fake.pause("intel-rapl:1")
        zone.write_text("garbage\n")
        before = agent.samples()
        time.sleep(1.0)
        after = agent.samples()
        assert after[(TICKS, ())] > before[(TICKS, ())] + 3
        key0 = labels(component="cpu", device="package-0", source="rapl")
        assert after[(ENERGY, key0)] > before[(ENERGY, key0)]
        assert agent.proc.poll() is None
        assert agent.stop() == 0
    assert "package-1" in agent.log() or "intel-rapl:1" in agent.log()


def test_sigterm_flushes_the_store(tmp_path: Path) -> None:
    """Acceptance 1 (daemon part): serves metrics, writes the store, exits cleanly."""
    from joulestat.store.engine import make_engine
    from joulestat.store.nodes import node_energy_j

    with running_agent(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "test-node") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 5)
        exported = agent.series(ENERGY)
        agent.proc.terminate()
        assert agent.proc.wait(timeout=20) == 0
    stored = node_energy_j(make_engine(agent.db_url), "test-node", 0, time.time() + 60)
    assert stored, agent.log()
    cpu_stored = sum(v for (component, _device), v in stored.items() if component == "cpu")
    cpu_exported = sum(v for k, v in exported.items() if dict(k)["component"] == "cpu")
    assert cpu_stored >= cpu_exported > 0  # the store holds every tick, the final one too
