"""The real ``joulestat agent`` process: metrics, store, bad input, clean stop. Settings
it refuses before starting anything are given through the command's entry point in this
process (tests/helpers/cli.py): the message and the exit status are the command's."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.fakes.powercap import FakePowercap
from tests.fakes.proc_stat import FakeProc
from tests.helpers.agent_process import agent_at_head, agent_env, in_memory, read_cli, wait_for

ENERGY = "joulestat_node_energy_joules_total"
POWER = "joulestat_node_power_watts"
TICKS = "joulestat_agent_ticks_total"


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def test_fake_rapl_counter_with_wraps_is_exported_at_its_rate(tmp_path: Path) -> None:
    """Acceptance 2: a package counter growing at a known rate and wrapping every 2 s."""
    power_w, interval_s = 40.0, 0.2
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    # 80 J range: at 40 W the counter wraps every 2 s, several times during the test.
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=80_000_000)
    fake.add_zone("intel-rapl:0:0", "core", parent="intel-rapl:0")
    with fake.drive("intel-rapl:0", power_w=power_w, hz=500) as driver, agent_at_head(
        tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", str(interval_s),
        "--node", "n1",
    ) as agent:
        key = labels(component="cpu", device="package-0", source="rapl")
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 3)
        wait_for(lambda: driver.wraps >= 4, timeout_s=60)  # 8 s of ticks across wraps
        last = agent.samples()
        assert last[(ENERGY, key)] > 0
        # core is a sub-zone of the package: never exported as extra cpu energy
        assert [k for (n, k) in last if n == ENERGY and dict(k)["component"] == "cpu"] == [key]
        assert agent.stop() == 0
    # Each tick covers the time it really took (a loaded machine skips slots): the rate
    # is the ticks' energy over their covered time, read back from the agent's store.
    with sqlite3.connect(tmp_path / "agent.db") as connection:
        energy_j, covered_ms = connection.execute(
            "SELECT sum(energy_j), sum(t_end_ms - t_start_ms) FROM tick_energy "
            "WHERE node = 'n1' AND component = 'cpu' AND source = 'rapl'").fetchone()
    rate_w = energy_j / (covered_ms / 1000)
    print(f"stored rate {rate_w:.4f} W for {power_w} W, error {rate_w / power_w - 1:+.4%}")
    assert rate_w == pytest.approx(power_w, rel=0.01), (rate_w, agent.log())
    assert "fill:rapl" not in agent.log()  # wraps are not mistaken for faulty counters


def test_metrics_pass_promtool(tmp_path: Path) -> None:
    """Acceptance 3: the exposition is clean for `promtool check metrics`."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI: .ci/run installs Debian's prometheus")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.1") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 2)
        text = agent.text()
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
    assert check.returncode == 0 and check.stdout + check.stderr == "", check.stdout + check.stderr


def _cpu_power_w(agent) -> float:
    """The estimated cpu power of the agent's last tick."""
    return sum(v for k, v in agent.series(POWER).items() if dict(k)["component"] == "cpu")


def test_vm_without_sensors_reports_estimates_that_follow_load(tmp_path: Path) -> None:
    """Acceptance 4: no RAPL, no GPU: non-zero model:* cpu and dram; cpu rises with load.

    The node's load is a fake /proc/stat advancing in real time at a load the test sets,
    so the test holds on a machine busy with other work (whose real load is near 100 %)."""
    proc = FakeProc(tmp_path / "proc", threads=2)
    proc.cpuinfo("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", vm=True)
    proc.meminfo(8 * 1024 * 1024)
    with proc.drive(load=0.05) as load, agent_at_head(
            tmp_path, "--sysfs-root", str(tmp_path), "--procfs-root", str(tmp_path / "proc"),
            "--interval", "0.25") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 4)
        power = agent.series(POWER)
        sources = {dict(k)["component"]: dict(k)["source"] for k in power}
        assert sources["cpu"].startswith("model:") and sources["dram"].startswith("model:")
        assert all(v > 0 for k, v in power.items() if dict(k)["component"] in ("cpu", "dram"))
        idle_w = _cpu_power_w(agent)
        assert idle_w > 0
        load.load = 0.95
        busy_w = wait_for(lambda: (w := _cpu_power_w(agent)) > idle_w * 1.2 and w,
                          timeout_s=30)
        print(f"cpu estimate {idle_w:.2f} W at 5 % load, {busy_w:.2f} W at 95 %")
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
    result = read_cli("agent", *port, "--db", f"sqlite:///{tmp_path}/a.db", *args,
                      env=agent_env(**env))
    assert result.returncode == 2, result.stderr
    assert named in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_replay_trace_names_file_and_line(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("t_s,component,device,watts\n0,cpu,package-0,10\n1,cpu,package-0,lots\n")
    result = read_cli("agent", "--metrics-port", "0", "--db", f"sqlite:///{tmp_path}/a.db",
                      "--replay", str(trace))
    assert result.returncode == 2
    assert f"{trace}:3" in result.stderr


def test_malformed_sysfs_zone_does_not_stop_the_others(tmp_path: Path) -> None:
    """Acceptance 5: one unreadable zone, the agent keeps ticking on what it can read."""
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**12)
    fake.add_zone("intel-rapl:1", "package-1", max_energy_range_uj=10**12)
    with fake.drive("intel-rapl:0", power_w=10.0), fake.drive("intel-rapl:1", power_w=20.0), \
            agent_at_head(tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", "0.1"
                          ) as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 3)
        zone = tmp_path / "sys" / "class" / "powercap" / "intel-rapl:1" / "energy_uj"
        fake.pause("intel-rapl:1")
        zone.write_text("garbage\n")
        before = agent.samples()
        after = wait_for(lambda: (now := agent.samples())[(TICKS, ())]
                         > before[(TICKS, ())] + 3 and now, timeout_s=30)
        key0 = labels(component="cpu", device="package-0", source="rapl")
        assert after[(ENERGY, key0)] > before[(ENERGY, key0)]
        # The bad zone's ticks are filled from its recent power, never a measured 0 J.
        filled = labels(component="cpu", device="package-1", source="fill:rapl")
        wait_for(lambda: agent.samples().get((ENERGY, filled), 0) > 0)
        assert agent.value("joulestat_agent_sensor_faults_total", sensor="rapl",
                           kind="unreadable") == 1
        assert agent.proc.poll() is None
        assert agent.stop() == 0
    assert "package-1" in agent.log() or "intel-rapl:1" in agent.log()


def test_sigterm_flushes_the_store(tmp_path: Path) -> None:
    """Acceptance 1 (daemon part): serves metrics, writes the store, exits cleanly."""
    from joulestat.store.engine import make_engine
    from joulestat.store.nodes import node_energy_j

    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
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
