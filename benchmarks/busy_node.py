"""The agent's cost on a busy node: thousands of unrelated processes, dozens of jobs.

Starts ``--processes`` unrelated sleeping processes (a Kubernetes GPU node runs 1,000 to
3,000) and ``--jobs`` jobs registered through the agent's HTTP API (each a shell with
``--job-children`` sleeping children, so every job is a small process tree), then runs
the agent and CodeCarbon's tracker side by side at the same interval and prints, over
the steady window after a warm-up:

* each one's CPU time as a share of one core, from a cgroup of its own where this
  machine lets the benchmark make one (else from ``/proc/<pid>/stat`` in 10 ms ticks:
  give it a longer ``--seconds``), and the agent/CodeCarbon ratio;
* the agent's peak RSS (VmHWM) and its ticks counted against the ticks the interval
  asks for;
* how many of the jobs were attributed energy (a job the agent did not measure would
  make it look cheap).

Targets (issue 13): at 1 Hz with 2,000 processes and 50 jobs, agent CPU at most 2x
CodeCarbon's tracker's and peak RSS at most 50 MiB; at 20 Hz on the quiet node with 10
jobs, the rate held and at most 5 % of a core. The idle agent (``--jobs 0 --processes
0``) should cost what it did before.

    .venv/bin/python benchmarks/busy_node.py                        # 2,000 processes, 50 jobs, 1 Hz
    .venv/bin/python benchmarks/busy_node.py --jobs 0 --processes 0 # the idle agent
    .venv/bin/python benchmarks/busy_node.py --interval 0.05        # 20 Hz, quiet node, 10 jobs
    .venv/bin/python benchmarks/busy_node.py --seconds 600          # a longer window
    .venv/bin/python benchmarks/busy_node.py --processes 0 --jobs 10 --via run
                                            # 10 `joulestat run -- sleep` jobs (cgroups)
    .venv/bin/python benchmarks/busy_node.py --flush-interval 300   # the store's share apart

To measure code before a change with the same benchmark, point the agent at that tree:
``PYTHONPATH=/path/to/old/tree .venv/bin/python benchmarks/busy_node.py`` (the editable
install comes after PYTHONPATH).

``--processes`` and ``--jobs`` default to 2,000 and 50 at intervals of 0.5 s and more,
and to the quiet node (0 and 10) at faster rates. The default window (10 s warm-up,
60 s measured) keeps a run within two minutes. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.sidecars import (  # noqa: E402  (after the path insert)
    JOULESTAT,
    CpuMeter,
    agent_env,
    api,
    cpu_meter,
    free_port,
    migrate_store,
    peak_rss_bytes,
    start_agent,
    start_codecarbon,
    stop,
    wait_for_agent,
)

SLEEP_S = "1000000"
MIB = 1024 * 1024


def spawn_sleepers(count: int) -> list[int]:
    """``count`` unrelated ``sleep`` processes (posix_spawn: no Python per process)."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    return [os.posix_spawn(sleep, ["sleep", SLEEP_S], os.environ) for _ in range(count)]


def spawn_job_trees(count: int, children: int) -> list[int]:
    """``count`` shells, each waiting on ``children`` sleeping children."""
    script = " ".join(["sleep", SLEEP_S, "&"] * children) + " wait"
    return [os.posix_spawn("/bin/sh", ["sh", "-c", script], os.environ) for _ in range(count)]


def start_runs(count: int, api_url: str, env: dict[str, str]) -> list[subprocess.Popen]:
    """``count`` jobs as ``joulestat run -- sleep``: each command in a cgroup of its own
    where the machine allows it, else measured by its process tree."""
    run_env = {**env, "JOULESTAT_AGENT_URL": api_url}
    return [subprocess.Popen([str(JOULESTAT), "run", "--name", f"bench-{i}", "--json", "--",
                              "sleep", SLEEP_S], env=run_env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for i in range(count)]


def run_job_ids(api_url: str, count: int, timeout_s: float = 60) -> list[str]:
    """The ids of the ``bench-*`` jobs once all ``count`` have registered."""
    deadline = time.monotonic() + timeout_s
    while True:
        jobs = [j for j in api(api_url, "/v1/jobs?running=1")["jobs"]
                if j["name"].startswith("bench-")]
        if len(jobs) >= count or time.monotonic() > deadline:
            return [j["id"] for j in jobs]
        time.sleep(0.2)


def reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def kill_job_children(shell_pids: list[int]) -> None:
    """The shells' own children (their sleeps), found before the shells die."""
    children: list[int] = []
    for pid in shell_pids:
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            continue
        children.extend(int(c) for c in text.split())
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid``'s tick loop (its main thread) and of its other threads (the
    store's, the HTTP ports'), from ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on
    the CPU): where the agent's time goes. Python names no OS thread, so the main
    thread is told apart by its id, the process's own."""
    found = {"tick loop": 0.0, "other threads": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            on_cpu_ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        found["tick loop" if task.name == str(pid) else "other threads"] += on_cpu_ns / 1e9
    return found


def scrape(metrics_url: str) -> dict[str, float]:
    """The agent's own counters: ticks, and the summary of its work per tick."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    found = {}
    for name in ("joulestat_agent_ticks_total", "joulestat_agent_tick_seconds_sum",
                 "joulestat_agent_tick_seconds_count"):
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
        found[name] = float(match.group(1)) if match else float("nan")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="tick interval, seconds")
    parser.add_argument("--processes", type=int, default=None,
                        help="unrelated sleeping processes [2000; 0 below 0.5 s intervals]")
    parser.add_argument("--jobs", type=int, default=None,
                        help="jobs registered through the API [50; 10 below 0.5 s intervals]")
    parser.add_argument("--job-children", type=int, default=1,
                        help="sleeping children under each job's shell [1]")
    parser.add_argument("--via", choices=("api", "run"), default="api",
                        help="jobs registered through the API (a shell and its children, "
                        "read by process tree), or started as `joulestat run -- sleep` "
                        "(in cgroups of their own where this machine allows) [api]")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window [60]")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before it [10]")
    parser.add_argument("--no-codecarbon", action="store_true",
                        help="run the agent alone (no ratio)")
    parser.add_argument("--flush-interval", type=float, default=10.0,
                        help="the agent's store flush interval [10, its default]: a long "
                        "one shows the agent's cost without the store's")
    args = parser.parse_args()
    quiet = args.interval < 0.5
    processes = args.processes if args.processes is not None else (0 if quiet else 2000)
    jobs = args.jobs if args.jobs is not None else (10 if quiet else 50)

    workdir = Path(tempfile.mkdtemp(prefix="joulestat-busy-"))
    env = agent_env()
    db_url = f"sqlite:///{workdir / 'agent.db'}"
    print(f"one-off store migration: {migrate_store(db_url, env):.2f} s wall")

    started = time.monotonic()
    sleepers = spawn_sleepers(processes)
    shells = spawn_job_trees(jobs if args.via == "api" else 0, args.job_children)
    time.sleep(0.5)  # let the shells fork their children
    print(f"started {processes} unrelated processes and {len(shells)} job trees in "
          f"{time.monotonic() - started:.1f} s")

    meters: dict[str, CpuMeter] = {"joulestat agent": cpu_meter("agent")}
    if not args.no_codecarbon:
        meters["codecarbon tracker"] = cpu_meter("codecarbon")
    metrics_port, api_port = free_port(), free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    procs = {"joulestat agent": start_agent(
        ["--interval", str(args.interval), "--metrics-port", str(metrics_port),
         "--api-port", str(api_port), "--db", db_url, "--log-level", "WARNING",
         "--flush-interval", str(args.flush_interval)],
        env, meters["joulestat agent"])}
    if not args.no_codecarbon:
        procs["codecarbon tracker"] = start_codecarbon(args.interval, workdir, env,
                                                       meters["codecarbon tracker"])
    job_ids: list[str] = []
    runs: list[subprocess.Popen] = []
    try:
        wait_for_agent(api_url, procs["joulestat agent"])
        for i, pid in enumerate(shells):
            job = api(api_url, "/v1/jobs", {"name": f"bench-{i}", "kind": "other",
                                             "pids": [pid]})
            job_ids.append(job["id"])
        if args.via == "run":
            runs = start_runs(jobs, api_url, env)
            job_ids = run_job_ids(api_url, jobs)
        time.sleep(args.warmup)
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"{name} exited early with {proc.returncode}", file=sys.stderr)
                return 1
        node_processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
        first = {name: meters[name].cpu_s(p.pid) for name, p in procs.items()}
        first_threads = thread_cpu_s(procs["joulestat agent"].pid)
        first_scrape, first_s = scrape(metrics_url), time.monotonic()
        time.sleep(args.seconds)
        last = {name: meters[name].cpu_s(p.pid) for name, p in procs.items()}
        last_threads = thread_cpu_s(procs["joulestat agent"].pid)
        last_scrape, elapsed_s = scrape(metrics_url), time.monotonic() - first_s
        rss = {name: peak_rss_bytes(p.pid) for name, p in procs.items()}
        running = {j["id"]: j for j in api(api_url, "/v1/jobs?running=1")["jobs"]}
        sources = {j.get("agent_labels", {}).get("cpu_source", "process tree").split(" /")[0]
                   for j in running.values() if j["id"] in job_ids}  # without the paths
    finally:
        stop(runs, timeout_s=60)  # each forwards SIGTERM to its sleep and ends its job
        stop(list(procs.values()))
        for meter in meters.values():
            meter.close()
        kill_job_children(shells)
        reap(sleepers + shells)

    attributed = sum(1 for i in job_ids if running.get(i, {}).get("total_energy_j", 0) > 0)
    ticks = last_scrape["joulestat_agent_ticks_total"] - first_scrape["joulestat_agent_ticks_total"]
    work_s = (last_scrape["joulestat_agent_tick_seconds_sum"]
              - first_scrape["joulestat_agent_tick_seconds_sum"])
    expected = elapsed_s / args.interval
    share = {name: (last[name] - first[name]) / elapsed_s for name in procs}

    how = (f"API, {args.job_children} child each" if args.via == "api"
           else f"joulestat run, CPU from {' / '.join(sorted(sources)) or 'none'}")
    print(f"interval {args.interval} s, {node_processes} processes on the node, {jobs} jobs "
          f"({how}), warm-up {args.warmup} s, window "
          f"{elapsed_s:.1f} s, store flush every {args.flush_interval:g} s; CPU from "
          f"{meters['joulestat agent'].source}")
    print(f"{'process':<22}{'CPU % of a core':>16}{'peak RSS MiB':>14}")
    for name in procs:
        print(f"{name:<22}{100 * share[name]:>16.3f}{rss[name] / MIB:>14.1f}")
    if "codecarbon tracker" in share and share["codecarbon tracker"] > 0:
        ratio = share["joulestat agent"] / share["codecarbon tracker"]
        print(f"ratio agent/codecarbon CPU: {ratio:.2f}")
    print(f"agent ticks {ticks:.0f} of {expected:.0f} asked ({100 * ticks / expected:.1f} %), "
          f"mean work per tick {1000 * work_s / ticks if ticks else float('nan'):.3f} ms")
    print(f"jobs attributed energy: {attributed} of {jobs}")
    by_thread = {name: last_threads[name] - first_threads.get(name, 0.0) for name in last_threads}
    print("agent CPU by thread (schedstat), ms over the window: " + ", ".join(
        f"{name} {1000 * s:.1f}" for name, s in sorted(by_thread.items(), key=lambda kv: -kv[1])
        if s > 0))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
