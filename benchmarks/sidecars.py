"""Shared by the overhead benchmarks: the joulestat agent and CodeCarbon's tracker run
side by side, and what each costs in CPU time and memory.

``overhead.py`` (a quiet node) and ``busy_node.py`` (thousands of processes, dozens of
jobs) both start the two the same way, so their figures compare.

CPU time is read from a cgroup of each process's own where the machine lets us make one
(cgroup v2 ``cpu.stat`` ``usage_usec``, else v1 ``cpuacct.usage``, both exact to the
microsecond or better), else from ``/proc/<pid>/stat`` (10 ms clock ticks, so the window
must be long for a process that uses a few milliseconds a second). The meter is written
here, apart from the agent's own cgroup code, on purpose: a benchmark must measure the
code before a change with the same instrument as after it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")
JOULESTAT = Path(sys.executable).with_name("joulestat")

CODECARBON_SCRIPT = textwrap.dedent(
    """
    import signal, threading, logging
    from codecarbon import OfflineEmissionsTracker
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tracker = OfflineEmissionsTracker(
        country_iso_code="USA", measure_power_secs={interval}, save_to_file=False,
        log_level="error", tracking_mode="machine",
    )
    tracker.start()
    print("started", flush=True)
    stop.wait()
    tracker.stop()
    """
)


@dataclass
class Usage:
    name: str
    cpu_total_s: float = 0.0
    cpu_steady_s: float = 0.0
    peak_rss_bytes: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the kernel's own high-water mark of resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of a process and its reaped children, from /proc/<pid>/stat."""
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def agent_env() -> dict[str, str]:
    """The environment the benchmarks run joulestat in: no cloud metadata probe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOULESTAT_")}
    env["JOULESTAT_CLOUD_METADATA"] = "false"
    return env


def migrate_store(db_url: str, env: dict[str, str]) -> float:
    """Migrate first, as a deployment does once: the daemon's own cost is what is
    compared. Returns the wall seconds it took."""
    started = time.monotonic()
    subprocess.run([str(JOULESTAT), "db", "upgrade", "--db", db_url], env=env, check=True,
                   capture_output=True)
    return time.monotonic() - started


@dataclass
class CpuMeter:
    """CPU seconds of one measured process, read the most exact way available."""

    source: str  # "cgroup v2", "cgroup v1 cpuacct" or "/proc/<pid>/stat"
    preexec: Callable[[], None] | None  # puts the child in its cgroup before it execs
    _read: Callable[[int], float]
    _cleanup: Callable[[], None]

    def cpu_s(self, pid: int) -> float:
        return self._read(pid)

    def close(self) -> None:
        self._cleanup()


def _proc_meter() -> CpuMeter:
    return CpuMeter("/proc/<pid>/stat", None, lambda pid: cpu_s(psutil.Process(pid)),
                    lambda: None)


def _own_path(hierarchy: str) -> str | None:
    """This process's cgroup path in one hierarchy (``""`` for v2), from /proc/self/cgroup."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if controllers == hierarchy or hierarchy in controllers.split(","):
            return path
    return None


def _try_cgroup(base: Path, own: str | None, name: str, counter: str,
                parse: Callable[[str], float], source: str) -> CpuMeter | None:
    if own is None or not (base / "cgroup.procs").exists():
        return None
    directory = base / own.lstrip("/") / name
    try:
        directory.mkdir()
        procs = os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        try:
            directory.rmdir()
        except OSError:
            pass
        return None

    def preexec() -> None:  # runs in the child between fork and exec
        os.write(procs, b"0")

    def read(_pid: int) -> float:
        return parse((directory / counter).read_text())

    def cleanup() -> None:
        os.close(procs)
        for _ in range(50):  # the process may take a moment to leave after its exit
            try:
                directory.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    try:
        read(0)
    except (OSError, ValueError):
        cleanup()
        return None
    return CpuMeter(source, preexec, read, cleanup)


def _usage_usec(text: str) -> float:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    raise ValueError("no usage_usec in cpu.stat")


def cpu_meter(name: str, root: Path = CGROUP_ROOT) -> CpuMeter:
    """A meter for one process to be started: a fresh cgroup when the machine lets us
    make one beside our own (v2 first, then v1 cpuacct), else /proc/<pid>/stat."""
    unique = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    v2 = root if (root / "cgroup.controllers").exists() else root / "unified"
    if (v2 / "cgroup.controllers").exists():
        meter = _try_cgroup(v2, _own_path(""), unique, "cpu.stat", _usage_usec, "cgroup v2")
        if meter is not None:
            return meter
    for v1 in (root / "cpuacct", root / "cpu,cpuacct"):
        meter = _try_cgroup(v1, _own_path("cpuacct"), unique, "cpuacct.usage",
                            lambda text: int(text) / 1e9, "cgroup v1 cpuacct")
        if meter is not None:
            return meter
    return _proc_meter()


def start_agent(args: list[str], env: dict[str, str], meter: CpuMeter) -> subprocess.Popen:
    return subprocess.Popen([str(JOULESTAT), "agent", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=meter.preexec)


def start_codecarbon(interval_s: float, workdir: Path, env: dict[str, str],
                     meter: CpuMeter) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CODECARBON_SCRIPT.format(interval=interval_s)],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        preexec_fn=meter.preexec,
    )


def stop(procs: list[subprocess.Popen], timeout_s: float = 30) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def api(url: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method="POST" if data else "GET",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_for_agent(api_url: str, agent: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if agent.poll() is not None:
            raise SystemExit(f"agent exited with {agent.returncode}: {agent.stderr.read()}")
        try:
            api(api_url, "/v1/health")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("the agent's API never answered") from None
            time.sleep(0.2)
