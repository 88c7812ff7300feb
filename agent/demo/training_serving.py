"""``joulestat demo``'s CPU run: two training jobs and one inference job per concurrency,
each a real process measured as a :class:`~joulestat.demo.jobs.DemoJob`, in under two
minutes at the command's defaults:

* ``demo-train`` twice: an MLP trained on generated data for the given seconds, pinned
  by CPU affinity to one vCPU and then to two (``setup=demo-1vcpu`` / ``demo-2vcpu``),
  counting samples and steps. numpy by default; PyTorch when it is installed.
* ``demo-serve`` at each concurrency: one inference server process pinned to one vCPU,
  loaded from this process by N connections sending one request at a time; each stage
  is a job on the server's pid labelled ``concurrency=N`` that counts the inferences the
  server made during it and carries its latency as ``p50_ms``/``p99_ms``.

The configurations are named as placeholders, never as cloud instance types: each job
runs as instance type ``demo-1vcpu`` or ``demo-2vcpu`` (an agent records the type a job
says it runs as), priced at made-up rates wherever the jobs are read
(:data:`joulestat.carbon.catalog.DEMO_PRICES_USD_PER_H`, price source ``demo``), so the
first comparison a user sees has costs. A job is registered once its process has
imported its libraries and built its data, so a comparison reads the work, not the
start-up. The workloads are :mod:`joulestat.demo.workers`, each run as a process of its
own; they need numpy or PyTorch, nothing else. A job interrupted (Ctrl-C) is ended with
what it measured so far, never left running in the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from joulestat.core.errors import ConfigError
from joulestat.demo.jobs import DemoJob, Measurement, Progress
from joulestat.demo.workers import FEATURES

TRAIN, SERVE = "demo-train", "demo-serve"  # the jobs' names


@dataclass(frozen=True, slots=True)
class TrainServeSettings:
    """What the CPU run measures: its workers' ``backend`` (``numpy`` or ``torch``), each
    job's length, the inference stages' concurrencies, and the CPUs it may use."""

    backend: str
    seconds: float
    levels: tuple[int, ...]
    cpus: tuple[int, ...]  # sorted

    @property
    def setups(self) -> list[tuple[str, list[int]]]:
        """The training configurations, by setup name: 1 vCPU, and 2 where there are."""
        return [("demo-1vcpu", list(self.cpus[:1]))] + (
            [("demo-2vcpu", list(self.cpus[:2]))] if len(self.cpus) > 1 else [])

    @property
    def stages(self) -> int:
        """How many jobs the run measures (a training job a setup, a serving one a level)."""
        return len(self.setups) + len(self.levels)


def run_training_and_serving(settings: TrainServeSettings, measurement: Measurement,
                             progress: Progress) -> list[dict[str, Any]]:
    """Every job of the CPU run, one after another; each one's summary as stored."""
    results = [_train(measurement, progress, settings.backend, setup, use, settings.seconds)
               for setup, use in settings.setups]
    results += _serve(measurement, progress, settings.backend, list(settings.cpus),
                      list(settings.levels), settings.seconds)
    return results


def nearest_rank(ordered: list[float], percent: int) -> float:
    """The nearest-rank ``percent``-th percentile of ``ordered`` (sorted, not empty)."""
    return ordered[min(len(ordered) - 1, max(0, -(-percent * len(ordered) // 100) - 1))]


def _worker(role: str, backend: str, cpus: list[int], seconds: float) -> subprocess.Popen:
    env = {**os.environ, **dict.fromkeys(
        ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")}
    env.pop("JOULESTAT_JOB_ID", None)  # the demo registers its workers itself
    return subprocess.Popen(
        [sys.executable, "-m", "joulestat.demo.workers", role, backend,
         ",".join(map(str, cpus)), str(seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def _ready(child: subprocess.Popen) -> dict[str, Any]:
    line = child.stdout.readline() if child.stdout else ""
    if not line.startswith("{"):
        child.kill()
        raise ConfigError(f"demo worker failed to start (exit {child.wait()})")
    return json.loads(line)


def _train(measurement: Measurement, progress: Progress, backend: str, setup: str,
           cpus: list[int], seconds: float) -> dict[str, Any]:
    progress.step(f"training on {len(cpus)} vCPU ({setup})")
    child = _worker("train", backend, cpus, seconds)
    try:
        info = _ready(child)
        job = DemoJob(measurement, TRAIN, "training", {
            "setup": setup, "vcpus": str(len(cpus)), "backend": info["backend"],
            "demo": "true"}, child.pid, setup)
    except BaseException:  # no job to measure: the worker must not run on unwatched
        child.kill()
        child.wait()
        raise
    assert child.stdin is not None and child.stdout is not None
    try:
        child.stdin.write("go\n")
        child.stdin.flush()
        seen = {"sample": 0.0, "step": 0.0}
        started = time.monotonic()
        for line in child.stdout:
            counts = json.loads(line)
            for unit in seen:
                job.count(unit, counts[unit] - seen[unit])
                seen[unit] = counts[unit]
            progress.update((time.monotonic() - started) / seconds,
                            f"{seen['sample']:.0f} samples")
        _pid, status, usage = os.wait4(child.pid, 0)
    except BaseException:
        child.kill()
        job.end()
        raise
    child.returncode = os.waitstatus_to_exitcode(status)
    return job.end(cpu_s=usage.ru_utime + usage.ru_stime)  # wait4: its last moments too


def _post(port: int, path: str, body: bytes = b"") -> dict[str, Any]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST" if body else "GET", path, body)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def _load(port: int, concurrency: int, seconds: float, progress: Progress) -> list[float]:
    """``concurrency`` connections, one request at a time each; latencies in seconds."""
    import http.client

    body = json.dumps({"inputs": [[0.5] * FEATURES]}).encode()
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        try:
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                connection.request("POST", "/infer", body)
                connection.getresponse().read()
                mine.append(time.perf_counter() - t0)
        except (OSError, http.client.HTTPException):
            pass  # the server went away: the stage counts what it answered
        finally:
            connection.close()
            latencies.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        progress.update(1 - (deadline - time.monotonic()) / seconds, f"{concurrency} clients")
        time.sleep(0.1)
    return sorted(latencies)


def _serve(measurement: Measurement, progress: Progress, backend: str, cpus: list[int],
           levels: list[int], seconds: float) -> list[dict[str, Any]]:
    """The server pinned to the last CPU, the clients to the others (when there are)."""
    child = _worker("serve", backend, cpus[-1:], 0)
    info = _ready(child)
    mine = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, cpus[:-1])
    summaries = []
    try:
        for level in levels:
            progress.step(f"inference at concurrency {level} (demo-1vcpu)")
            before = _post(info["port"], "/stats")["inferences"]
            job = DemoJob(measurement, SERVE, "inference", {
                "setup": "demo-1vcpu", "vcpus": "1", "concurrency": str(level),
                "backend": info["backend"], "demo": "true"}, child.pid, "demo-1vcpu")
            try:
                latencies = _load(info["port"], level, seconds, progress)
                job.count("inference", _post(info["port"], "/stats")["inferences"] - before)
                if latencies:  # nearest-rank percentiles, in milliseconds
                    job.relabel({f"p{q}_ms": f"{nearest_rank(latencies, q) * 1e3:.3g}"
                                 for q in (50, 99)})
            finally:
                summaries.append(job.end())
    finally:
        os.sched_setaffinity(0, mine)
        if child.stdin is not None:
            child.stdin.close()  # the server stops when its stdin closes
        child.wait(timeout=10)
    return summaries
