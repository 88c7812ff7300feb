"""Run the real ``joulestat agent`` as a subprocess and scrape it, as a user would."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

JOULESTAT = str(Path(sys.executable).with_name("joulestat"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def agent_env(**extra: str) -> dict[str, str]:
    """The environment minus any JOULESTAT_* of the developer's, and never a metadata probe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOULESTAT_")}
    env["JOULESTAT_CLOUD_METADATA"] = "false"
    env["JOULESTAT_FLUSH_INTERVAL"] = "1"  # tests read the store soon after the agent writes
    env.update(extra)
    return env


@dataclass
class RunningAgent:
    proc: subprocess.Popen
    port: int
    db_url: str
    log_path: Path
    api_port: int = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def client_env(self, **extra: str) -> dict[str, str]:
        """Environment for `joulestat run/jobs` talking to this agent and its store."""
        return agent_env(**{"JOULESTAT_AGENT_URL": self.api_url,
                            "JOULESTAT_DB": self.db_url, **extra})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def text(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            return response.read().decode()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """{(sample name, sorted labels): value} from one scrape."""
        found = {}
        for family in text_string_to_metric_families(self.text()):
            for sample in family.samples:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return found

    def value(self, name: str, **labels: str) -> float:
        wanted = tuple(sorted(labels.items()))
        return self.samples()[(name, wanted)]

    def series(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        return {labels: v for (n, labels), v in self.samples().items() if n == name}

    def log(self) -> str:
        return self.log_path.read_text()

    def api_accepts(self) -> None:
        """Returns once the job API's port takes a connection; raises OSError before."""
        socket.create_connection(("127.0.0.1", self.api_port), timeout=5).close()

    def stop(self, timeout_s: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout_s)


@contextmanager
def running_agent(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                  api_port: int | None = None, port: int | None = None
                  ) -> Iterator[RunningAgent]:
    port, api_port = port or free_port(), api_port or free_port()
    db_url = f"sqlite:///{tmp_path / 'agent.db'}"
    log_path = tmp_path / "agent.log"
    if "--db" in args:
        db_url = args[list(args).index("--db") + 1]
    else:
        args = ("--db", db_url, *args)
    if "--spool-dir" not in args:  # a test's outage must never reach another test's store
        args = ("--spool-dir", str(tmp_path / "spool"), *args)
    argv = [JOULESTAT, "agent", "--metrics-port", str(port), "--api-port", str(api_port),
            "--nvml", "false", *args]
    with log_path.open("a") as log:
        proc = subprocess.Popen(argv, env=env or agent_env(), stdout=log, stderr=log)
    agent = RunningAgent(proc, port, db_url, log_path, api_port)
    try:
        deadline = time.monotonic() + 30
        # Ready once it serves metrics and accepts on the job API (which opens after the
        # store and the jobs restored from it: on a loaded machine, seconds later).
        ready = [agent.text] + ([] if "--api-port" in args else [agent.api_accepts])
        while ready:
            if proc.poll() is not None:
                raise AssertionError(f"agent exited with {proc.returncode}:\n{agent.log()}")
            try:
                ready[0]()
                ready.pop(0)
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"agent never became ready:\n{agent.log()}") from None
                time.sleep(0.1)
        yield agent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 60
            ) -> subprocess.CompletedProcess:
    return subprocess.run([JOULESTAT, *args], env=env or agent_env(), capture_output=True,
                          text=True, timeout=timeout_s)


def wait_for(predicate, timeout_s: float = 15, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(every_s)


def start_run(name: str, code: str, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [JOULESTAT, "run", "--name", name, "--json", *extra, "--", sys.executable, "-c", code],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def summary_of(proc: subprocess.Popen, timeout_s: float = 60) -> dict:
    _out, err = proc.communicate(timeout=timeout_s)
    lines = [line for line in err.splitlines() if line.startswith("{")]
    assert lines, err
    return json.loads(lines[-1])


def stored_jobs(env: dict[str, str]) -> dict[str, dict]:
    result = subprocess.run([JOULESTAT, "jobs", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {job["name"]: job for job in json.loads(result.stdout)}


@contextmanager
def agent_on_fake_rapl(tmp_path: Path, *args: str, power_w: float = 60.0,
                       interval_s: float = 0.25, env: dict[str, str] | None = None
                       ) -> Iterator[RunningAgent]:
    """The real agent, node ``n1``, on a fake RAPL package drawing ``power_w``, ticking
    every ``interval_s``: the node the integration tests measure jobs on."""
    from tests.fakes.powercap import FakePowercap

    fake = FakePowercap(tmp_path / "sys")
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**13)
    node = ("--sysfs-root", str(tmp_path / "sys"), "--interval", str(interval_s),
            "--node", "n1")
    with fake.drive("intel-rapl:0", power_w=power_w, hz=500), \
            running_agent(tmp_path, *node, *args, env=env) as agent:
        yield agent
