"""A small fleet as a team runs one: three agents, one PostgreSQL, one Prometheus.

The store goes away mid-run (its database refuses every connection, those open ended)
and one agent is killed (`kill -9`) during the outage and restarted while the store is
still away: afterwards every node's stored energy equals its fake RAPL wattage times
the time its ticks cover, within one tick, with no overlapping or duplicate ticks; and
PromQL over the scrapes gives each wattage.

The store is a database of its own on the session's PostgreSQL server (``pg``): the
outage is that database's, so the server goes on serving every other test's."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    RunningAgent,
    agent_at_head,
    agent_env,
    free_port,
    in_memory,
    jobs_in_store,
    start_run,
    wait_for,
)
from tests.helpers.pg import SERVER_USER, PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
NODES = {"n-small": ("c5.large", 20.0), "n-mid": ("c5.xlarge", 45.0),
         "n-big": ("g5.xlarge", 90.0)}
INTERVAL_S = 1.0
RATE_WINDOW_S = 30  # PromQL's rate() window, all of it after the restart


def _promql(port: int, query: str) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(query)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        data = json.loads(response.read())
    return {r["metric"].get("instance_type", ""): float(r["value"][1])
            for r in data["data"]["result"]}


def _stored(db_url: str, node: str) -> tuple[float, float, list[tuple[int, int]]]:
    engine = create_engine(db_url)
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT t_start_ms, t_end_ms, energy_j FROM tick_energy WHERE node = :n AND "
            "component = 'cpu' ORDER BY t_end_ms"), {"n": node}).all()
    engine.dispose()
    return (sum(r[2] for r in rows), sum(r[1] - r[0] for r in rows) / 1000,
            [(r[0], r[1]) for r in rows])


def _store_answers(server: PostgresServer, db_url: str, answers: bool) -> None:
    """The store's database takes connections again, or refuses every new one and ends
    those open: to its agents, a store that went away."""
    import psycopg

    name = make_url(db_url).database
    with psycopg.connect(host="127.0.0.1", port=server.port, user=SERVER_USER,
                         dbname="postgres", autocommit=True) as connection:
        connection.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(answers).lower()}')
        if not answers:
            connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def _store_up(agent: RunningAgent) -> float:
    return agent.value("joulestat_agent_store_up")


def test_three_agents_one_store_one_prometheus_through_an_outage_and_a_crash(
        tmp_path: Path, pg: PostgresServer) -> None:
    if shutil.which("prometheus") is None:
        pytest.skip("Prometheus server not installed (Debian: apt-get install prometheus)")
    db_url = pg.create_database("fleet")
    with ExitStack() as stack:
        stack.callback(_store_answers, pg, db_url, True)  # whatever happens below
        agents, args_of = {}, {}
        for node, (itype, watts) in NODES.items():
            root = tmp_path / node
            fake = FakePowercap(in_memory(root / "sys"))
            fake.add_zone("intel-rapl:0", "package-0")
            stack.enter_context(fake.drive("intel-rapl:0", power_w=watts, hz=200))
            args_of[node] = ("--sysfs-root", str(root / "sys"), "--interval", str(INTERVAL_S),
                             "--node", node, "--instance-type", itype, "--db", db_url)
            agents[node] = stack.enter_context(agent_at_head(
                root, *args_of[node], env=agent_env(JOULESTAT_FLUSH_INTERVAL="2")))
        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        targets = ", ".join(f"'127.0.0.1:{a.port}'" for a in agents.values())
        config.write_text("global: {scrape_interval: 1s}\nscrape_configs:\n"
                          f"  - job_name: joulestat\n    static_configs:\n"
                          f"      - targets: [{targets}]\n")
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stack.callback(lambda: (prom.terminate(), prom.wait(timeout=20)))

        # Every node has stored some ticks ...
        wait_for(lambda: all(len(_stored(db_url, node)[2]) >= 3 for node in NODES),
                 timeout_s=60, every_s=0.5)
        _store_answers(pg, db_url, False)  # ... when the store goes away:
        # every agent has noticed and spooled a batch ...
        wait_for(lambda: all(_store_up(agent) == 0 and list((tmp_path / node / "spool")
                                                            .glob("*.json"))
                             for node, agent in agents.items()), timeout_s=60, every_s=0.2)
        victim = agents["n-mid"]
        victim.proc.send_signal(signal.SIGKILL)  # ... and an agent dies during the outage
        victim.proc.wait()
        # Nobody measures n-mid for a while (its restart covers the gap): the others tick on.
        others = {node: agent.value("joulestat_agent_ticks_total")
                  for node, agent in agents.items() if node != "n-mid"}
        wait_for(lambda: all(agents[node].value("joulestat_agent_ticks_total") >= ticks + 2
                             for node, ticks in others.items()), timeout_s=60, every_s=0.2)
        # Restarted while the store is still away: it waits for it (--db-wait), then
        # writes its spool back and resumes from the checkpoint it spooled.
        agents["n-mid"] = restarted = stack.enter_context(agent_at_head(
            tmp_path / "n-mid", *args_of["n-mid"], env=agent_env(JOULESTAT_FLUSH_INTERVAL="2"),
            port=victim.port, api_port=victim.api_port))
        wait_for(lambda: "measuring meanwhile" in restarted.log(), timeout_s=60)
        _store_answers(pg, db_url, True)  # the store is back
        wait_for(lambda: all(_store_up(agent) == 1 and not list((tmp_path / node / "spool")
                                                                .glob("*.json"))
                             for node, agent in agents.items()), timeout_s=60, every_s=0.2)
        # Prometheus holds a full rate() window of the restarted agent, all of it after
        # its first tick (the one that covers the gap, whose joules the window must not
        # hold): no counter reset in it, no sample from before that tick, and a sample
        # for (nearly) every scrape.
        restarted_series = (f"joulestat_agent_ticks_total{{instance='127.0.0.1:{victim.port}'}}"
                            f"[{RATE_WINDOW_S}s]")

        def window_after_the_gap() -> bool:
            return (_promql(prom_port, f"resets({restarted_series})") == {"": 0.0}
                    and _promql(prom_port, f"min_over_time({restarted_series})").get("", 0) >= 1
                    and _promql(prom_port, f"count_over_time({restarted_series})").get("", 0)
                    >= RATE_WINDOW_S - 2)
        wait_for(window_after_the_gap, timeout_s=180, every_s=1.0)

        # Node series carry no instance_type: it comes from joulestat_node_info, joined
        # as deploy/prometheus/rules.yml's recording rules do.
        rates = _promql(prom_port, "sum by (instance_type) ("
                        f"rate(joulestat_node_energy_joules_total{{component='cpu'}}"
                        f"[{RATE_WINDOW_S}s])"
                        " * on (job, instance) group_left (instance_type) joulestat_node_info)")
        for agent in agents.values():
            assert agent.stop() == 0
        logs = {node: agent.log() for node, agent in agents.items()}
        stored = {node: _stored(db_url, node) for node in NODES}

    for node, (itype, watts) in NODES.items():
        assert rates[itype] == pytest.approx(watts, rel=0.05), (itype, rates)
        energy_j, covered_s, spans = stored[node]
        print(f"{node}: {energy_j:.1f} J over {covered_s:.1f} s = "
              f"{energy_j / covered_s:.3f} W (fake {watts} W)")
        assert abs(energy_j - watts * covered_s) <= watts * INTERVAL_S
        assert len({end for _, end in spans}) == len(spans)  # no duplicate tick
        for (_s0, e0), (s1, _e1) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1  # no overlap
    assert "resumed from the checkpoint" in logs["n-mid"]
    assert "spooled batch(es)" in logs["n-mid"]


def test_an_embedded_run_beside_the_agent_counts_its_job_once_and_no_tick_twice(
        tmp_path: Path) -> None:
    """The run misses the agent's address and measures in-process on the agent's node
    and store: it records its job only; the node's ticks stay the agent's alone."""
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--node", "n1") as agent:
        env = agent_env(JOULESTAT_DB=agent.db_url, JOULESTAT_NODE="n1",
                        JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_INTERVAL="0.2",
                        JOULESTAT_AGENT_URL="http://127.0.0.1:9", JOULESTAT_NVML="false")
        run = start_run("solo", "import time\nwhile time.process_time() < 2: pass", env)
        _out, err = run.communicate(timeout=60)
        summary = json.loads([line for line in err.splitlines() if line.startswith("{")][-1])
        assert summary["mode"] == "embedded"
        assert "this run records its job only" in err
        # ... and says where the agent answers (issue 24: it knew the pid, not the URL).
        assert f"job API at {agent.api_url}" in err
        assert f"point JOULESTAT_AGENT_URL at {agent.api_url}" in err
        # A second agent for the same node is refused, naming the first.
        second = subprocess.run(
            [sys.executable, "-m", "agent", "agent", "--db", agent.db_url, "--node", "n1",
             "--metrics-port", "0", "--api-port", "0", "--sysfs-root", str(tmp_path),
             "--spool-dir", str(tmp_path / "spool2")],
            env=agent_env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "node 'n1' is written by agent pid" in second.stderr
        assert f"job API at {agent.api_url}" in second.stderr
        ticks = agent.value("joulestat_agent_ticks_total")
        wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= ticks + 3)
        assert agent.stop() == 0
    _energy, _covered, spans = _stored(agent.db_url, "n1")
    assert len({end for _, end in spans}) == len(spans)
    for (_s0, e0), (s1, _e1) in zip(spans, spans[1:], strict=False):
        assert s1 >= e0 - 1, "two writers stored overlapping ticks of one node"
    job = jobs_in_store(agent_env(JOULESTAT_DB=agent.db_url))["solo"]
    assert job["total_j"] == pytest.approx(summary["total_energy_j"], rel=1e-9)
    assert job["dynamic_j"]["cpu"] > 0
