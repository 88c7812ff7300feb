"""``joulestat demo``: measure a small real workload, so a new store has something to compare.

Two training jobs and one inference job per concurrency, each a real process measured
by the node's agent (when one answers, as ``joulestat run`` does) or in this process
(embedded mode), in under two minutes at the defaults:

* ``demo-train`` twice: an MLP trained on generated data for ``--seconds``, pinned by
  CPU affinity to one vCPU and then to two (``setup=demo-1vcpu`` / ``demo-2vcpu``),
  counting samples and steps. numpy by default; PyTorch when it is installed.
* ``demo-serve`` at three concurrencies: one inference server process pinned to one
  vCPU, loaded from this process by N connections sending one request at a time; each
  stage is a job on the server's pid labelled ``concurrency=N`` that counts the
  inferences the server made during it and carries its latency as ``p50_ms``/``p99_ms``.

The configurations are named as placeholders, never as cloud instance types: each
job runs as instance type ``demo-1vcpu`` or ``demo-2vcpu`` (an agent records the type a
job says it runs as), priced at made-up rates wherever the jobs are read
(:data:`joulestat.carbon.catalog.DEMO_PRICES_USD_PER_H`, price source ``demo``), so the
first comparison a user sees has costs. A job is registered once its process has
imported its libraries and built its data, so a comparison reads the work, not the
start-up. The workloads are
:mod:`joulestat.demo.workers`, each run as a process of its own; they need numpy
(which the dashboard already brings) or PyTorch, nothing else. A job interrupted
(Ctrl-C) is ended with what it measured so far, never left running in the store.

``joulestat demo --llm`` measures LLM serving instead (:func:`_demo_llm`): a tiny GPT-2
of random weights generating tokens in this process, pinned to at most two CPUs (setup
``demo-2vcpu``), behind a server exposing vLLM's metric names
(:mod:`joulestat.demo.llm`). One ``demo-llm`` job per concurrency (1, 2, 4) on this
process's pid, each counted from those metrics as ``--serving-metrics`` counts a real
vLLM's, so a new store shows energy per output token and time to first token. It needs
the ``hf`` extra (torch and transformers), checked before anything is written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, install_hint, require, require_installed
from joulestat.demo.workers import FEATURES
from joulestat.runtime.embedded import EMBEDDED_OPTIONS
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.api.agent_client import AgentAddress
    from joulestat.runtime.assembly import PipelineSettings

TRAIN, SERVE, LLM = "demo-train", "demo-serve", "demo-llm"
TRAIN_SECONDS, SERVE_LEVELS = 12.0, "1,4,16"
# --llm: three stages of 30 s, with the model's build (~10 s) and each stage's waits for
# the metrics' reads, about two minutes on two cores.
LLM_SECONDS, LLM_LEVELS = 30.0, "1,2,4"
LLM_CPUS = 2  # the LLM demo runs pinned to this many CPUs at most (its setup's name)
OPTIONS = tuple(dict.fromkeys(("agent_url", "api_token", "log_level",
                               *(o for o in EMBEDDED_OPTIONS if o != "instance_type"))))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="measure a small training run and an inference server, then compare",
        description="Measure a small real workload so a new store has something to "
        "compare: an MLP trained on 1 and on 2 vCPUs (CPU affinity) and an inference "
        "server loaded at three concurrencies, each a job measured by the node's agent "
        "(or in this process when none answers), then `joulestat compare` of them and "
        "the dashboard's URL. numpy by default, PyTorch when installed; about two "
        "minutes. With --llm, an LLM serving job instead: a tiny GPT-2 (random weights, "
        "no download) generating on CPU behind a server with vLLM's metric names, at "
        "three concurrencies, for energy per output token and time to first token. "
        "Instance types and prices are demo placeholders, not cloud offers.")
    parser.add_argument("--llm", action="store_true",
                        help="measure LLM serving instead: a GPT-2 of 2 layers with random "
                        "weights generating tokens in this process, counted from its "
                        "vLLM-named Prometheus metrics (--serving-metrics), a job per "
                        "concurrency; needs the hf extra (pip install 'joulestat[hf]')")
    parser.add_argument("--seconds", type=float, default=None,
                        help=f"length of each job, in seconds [{TRAIN_SECONDS:g}; "
                        f"{LLM_SECONDS:g} with --llm]")
    parser.add_argument("--concurrency", default=None,
                        help=f"the inference stages' concurrencies [{SERVE_LEVELS}; "
                        f"{LLM_LEVELS} with --llm]")
    parser.add_argument("--backend", choices=("auto", "numpy", "torch"), default="auto",
                        help="auto: PyTorch when installed, else numpy; --llm runs on "
                        "PyTorch [auto]")
    parser.add_argument("--embedded", action="store_true",
                        help="measure in-process even if an agent answers")
    add_options(parser, OPTIONS)
    parser.set_defaults(func=_demo)


class _Progress:
    """A bar on stderr redrawn in place on a terminal; a line per step elsewhere."""

    def __init__(self, steps: int) -> None:
        self.steps, self.index, self.text = steps, -1, ""
        self.tty = sys.stderr.isatty()
        self._drawn = 0.0

    def step(self, text: str) -> None:
        self.index, self.text = self.index + 1, text
        if not self.tty:
            print(f"[{self.index + 1}/{self.steps}] {text}", file=sys.stderr, flush=True)
        self.update(0.0, force=True)

    def update(self, part: float, detail: str = "", force: bool = False) -> None:
        if not self.tty or (not force and time.monotonic() - self._drawn < 0.1):
            return
        self._drawn = time.monotonic()
        done = (self.index + min(max(part, 0.0), 1.0)) / self.steps
        bar = "#" * round(done * 24)
        line = f"[{bar:<24}] {done:4.0%}  {self.index + 1}/{self.steps} {self.text} {detail}"
        print(f"\r{line[:118]:<118}", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            self.index = self.steps - 1
            self.update(1.0, "done", force=True)
            print(file=sys.stderr)


class _Job:
    """One demo job on one process, through the agent's API or measured in-process."""

    def __init__(self, api: Any, settings: PipelineSettings, name: str, kind: str,
                 labels: dict[str, str], pid: int, instance_type: str,
                 agent_labels: dict[str, str] | None = None) -> None:
        self.api, self.name, self.kind, self.pid = api, name, kind, pid
        self.labels, self.id, self.embedded = dict(labels), uuid.uuid4().hex, None
        self.instance_type, self.agent_labels = instance_type, dict(agent_labels or {})
        if api is not None:  # the agent records the placeholder type: the job is priced
            api.register(name, kind, [pid], self.labels, self.id,
                         instance_type=instance_type, agent_labels=self.agent_labels or None)
            return
        from joulestat.runtime.embedded import EmbeddedJob

        node = replace(settings.node, instance_type=instance_type)
        self.embedded = EmbeddedJob(name, kind, self.labels, {pid}, self.id,
                                    replace(settings, node=node), reason="demo",
                                    agent_labels=self.agent_labels or None).start()

    def count(self, unit: str, n: float) -> None:
        if n <= 0:
            return
        if self.embedded is not None:
            self.embedded.count(unit, n)
        else:
            self.api.count(self.id, unit, n)

    def relabel(self, extra: dict[str, str]) -> None:
        """A running job takes new labels when registered again under its id."""
        self.labels.update(extra)
        if self.embedded is not None:
            self.embedded.add_pid(self.pid, labels=self.labels)
        else:
            self.api.register(self.name, self.kind, [self.pid], self.labels, self.id,
                              instance_type=self.instance_type,
                              agent_labels=self.agent_labels or None)

    def counted(self, unit: str) -> float:
        """How much of ``unit`` the running job has counted so far."""
        if self.embedded is not None:
            assert self.embedded.job is not None
            return float(self.embedded.job.units.get(unit, 0.0))
        return float((self.api.get(self.id).get("units") or {}).get(unit, 0.0))

    def end(self, cpu_s: float | None = None) -> dict[str, Any]:
        """End it; the summary is the stored one (its last tick attributed and stored)."""
        if self.embedded is not None:
            return self.embedded.end(cpu_s=cpu_s)
        self.api.end(self.id, cpu_s=cpu_s)
        return self.api.wait_final(self.id, self.api.final_timeout_s() or 10.0)


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


def _train(api: Any, settings: PipelineSettings, progress: _Progress, backend: str, setup: str,
           cpus: list[int], seconds: float) -> dict[str, Any]:
    progress.step(f"training on {len(cpus)} vCPU ({setup})")
    child = _worker("train", backend, cpus, seconds)
    try:
        info = _ready(child)
        job = _Job(api, settings, TRAIN, "training", {"setup": setup, "vcpus": str(len(cpus)),
                   "backend": info["backend"], "demo": "true"}, child.pid, setup)
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


def _load(port: int, concurrency: int, seconds: float, progress: _Progress) -> list[float]:
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


def _rank(ordered: list[float], percent: int) -> float:
    return ordered[min(len(ordered) - 1, max(0, -(-percent * len(ordered) // 100) - 1))]


def _serve(api: Any, settings: PipelineSettings, progress: _Progress, backend: str, cpus: list[int],
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
            job = _Job(api, settings, SERVE, "inference", {
                "setup": "demo-1vcpu", "vcpus": "1", "concurrency": str(level),
                "backend": info["backend"], "demo": "true"}, child.pid, "demo-1vcpu")
            try:
                latencies = _load(info["port"], level, seconds, progress)
                job.count("inference", _post(info["port"], "/stats")["inferences"] - before)
                if latencies:  # nearest-rank percentiles, in milliseconds
                    job.relabel({f"p{q}_ms": f"{_rank(latencies, q) * 1e3:.3g}"
                                 for q in (50, 99)})
            finally:
                summaries.append(job.end())
    finally:
        os.sched_setaffinity(0, mine)
        if child.stdin is not None:
            child.stdin.close()  # the server stops when its stdin closes
        child.wait(timeout=10)
    return summaries


def _agent(address: AgentAddress, embedded: bool) -> tuple[Any, str]:
    """The agent's API when one answers (and --embedded is not given), else None."""
    from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
    from joulestat.client.context import fallback_warning

    url, token = address.agent_url, address.api_token
    reason = "--embedded"
    if not embedded:
        client = AgentClient(url, token)
        try:
            health = client.health()
        except AgentUnavailable:
            reason = f"no agent answered at {url}"
        except AgentError as exc:
            raise ConfigError(f"--agent-url {url}: {exc}") from None
        else:
            return client, f"by the agent at {url} (node {health.get('node')})"
    warning = fallback_warning(url, token, forced=embedded)
    if warning:
        print(f"joulestat demo: {warning}", file=sys.stderr)
    return None, f"in this process ({reason})"


def _backend(name: str) -> str:
    """auto: torch when it is installed; found without importing it (seconds of start-up)."""
    from importlib.util import find_spec

    if name in ("auto", "torch") and find_spec("torch") is not None:
        return "torch"
    if name == "torch":
        raise ConfigError("--backend torch: PyTorch is not installed "
                          f"({install_hint(Extra.EXAMPLES)})")
    require_installed(("numpy",), Extra.DEMO, "the demo (numpy, or PyTorch)")
    return "numpy"


def _levels(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or not all(1 <= n <= 256 for n in levels):
        raise ConfigError(f"--concurrency {text!r}: expected numbers 1..256, e.g. 1,4,16")
    return levels


def _demo(args: argparse.Namespace) -> int:
    from joulestat.cli.main import main as cli_main
    from joulestat.core.logs import setup_logging
    from joulestat.core.redact import redact_url
    from joulestat.store.access import open_engine
    from joulestat.store.engine import default_db_url

    settings = resolve(args, OPTIONS)
    quiet = "log_level" not in vars(args) and "JOULESTAT_LOG_LEVEL" not in os.environ
    setup_logging("WARNING" if quiet else settings["log_level"])
    logging.getLogger("joulestat.host.identity").setLevel(logging.ERROR)  # demo-1vcpu is no typo
    seconds = args.seconds if args.seconds is not None else (
        LLM_SECONDS if args.llm else TRAIN_SECONDS)
    if not 1 <= seconds <= 600:
        raise ConfigError(f"--seconds {seconds:g}: expected 1..600")
    levels = _levels(args.concurrency or (LLM_LEVELS if args.llm else SERVE_LEVELS))
    # --llm: torch and transformers imported here, before the store is opened, so a
    # missing extra is one line and nothing is written.
    backend = _llm_backend(args.backend) if args.llm else _backend(args.backend)
    # The store first: one that cannot be opened stops the demo with one line naming it
    # (password hidden), before any worker runs, not with a worker killed mid-way.
    open_engine(settings.get("db")).dispose()
    cpus = sorted(os.sched_getaffinity(0))
    configs = [("demo-1vcpu", cpus[:1])] + ([("demo-2vcpu", cpus[:2])] if len(cpus) > 1 else [])
    from joulestat.api.agent_client import AgentAddress
    from joulestat.runtime.embedded import embedded_settings

    api, where = _agent(settings.section(AgentAddress), args.embedded)
    pipeline = embedded_settings(settings)  # what jobs measured in this process use
    if args.llm:
        return _demo_llm(api, pipeline, where, levels, seconds, settings.get("db"))
    print(f"joulestat demo: {len(configs) + len(levels)} jobs of {seconds:g} s on "
          f"{backend}, measured {where}" + ("" if len(cpus) > 1 else
          "; one CPU available, so no 2-vCPU configuration"), file=sys.stderr)
    progress = _Progress(len(configs) + len(levels))
    results = [_train(api, pipeline, progress, backend, setup, use, seconds)
               for setup, use in configs]
    results += _serve(api, pipeline, progress, backend, cpus, levels, seconds)
    progress.done()
    _print_jobs(results)
    db = ["--db", settings["db"]] if settings.get("db") else []
    shown_db = ["--db", redact_url(settings["db"])] if db else []
    for how in (["--jobs", TRAIN, "--by", "label:setup"],
                ["--jobs", SERVE, "--by", "label:concurrency"]):
        command = ["compare", *how]
        print(f"\n$ joulestat {' '.join(command + shown_db)}", flush=True)
        cli_main(command + db)
        sys.stdout.flush()
    _print_dashboard(redact_url(settings.get("db") or default_db_url()))
    return 0


def _print_jobs(results: list[dict[str, Any]]) -> None:
    from joulestat.core import units

    print("\njobs measured (energy attributed to each job's process):")
    for job in results:
        labels = job.get("labels") or {}
        energy_j = float(job.get("total_energy_j") or 0.0)
        level = (f"concurrency={labels['concurrency']}" if "concurrency" in labels
                 else f"setup={labels.get('setup', '?')}")
        parts = [f"{job['name']} {level}", units.energy(energy_j)]
        for unit, n in sorted((job.get("units") or {}).items()):
            parts.append(f"{units.count(n)} {unit}s, {units.per(units.energy(energy_j / n), unit)}"
                         if n else f"0 {unit}s")
        if "p50_ms" in labels:
            parts.append(f"p50 {labels['p50_ms']} ms, p99 {labels['p99_ms']} ms")
        print("  " + "; ".join(parts) + ("" if job.get("final", True) else " (not final)"))


def _print_dashboard(db: str) -> None:
    """Where to look next: the running dashboard's own URL when one announced itself
    (``joulestat dashboard`` writes it), else how to start one on the default port."""
    from joulestat.cli.dashboard import DEFAULT_PORT, running_dashboard

    running = running_dashboard()
    base = running.url if running is not None else f"http://127.0.0.1:{DEFAULT_PORT}"
    if running is None:
        how = "start the dashboard (`joulestat dashboard`, or `make run`), then open"
    elif running.db != db:
        how = (f"the dashboard at {running.url} reads another store ({running.db}); "
               f"start one on {db} (`joulestat dashboard --db ...`), then open")
    else:
        how = "the dashboard is running; open"
    print(f"\n{how}:\n"
          f"  {base}/compare?kind=training&unit=sample&by=label:setup&period=All%20time\n"
          f"  {base}/load_curve\n"
          "Instance types named demo-* are placeholders for this machine's CPUs, priced at "
          "made-up rates (price source `demo`), not cloud offers; `setup` names the "
          "configuration.")


# -- joulestat demo --llm --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LlmStage:
    """One --llm stage as stored: its job, and its figures read back from the store."""

    concurrency: int
    job_id: str
    final: bool
    output_tokens: float
    prompt_tokens: float
    requests: float
    energy_j: float
    duration_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None

    @property
    def energy_per_output_token_j(self) -> float | None:
        return self.energy_j / self.output_tokens if self.output_tokens > 0 else None


def _llm_backend(name: str) -> str:
    """--llm runs on PyTorch with transformers (the hf extra), imported now: a missing
    one is one line naming the extra, before anything is written."""
    if name == "numpy":
        raise ConfigError("--llm: the model runs on PyTorch; --backend numpy does not apply")
    for module in ("torch", "transformers"):
        require(module, Extra.HF, "joulestat demo --llm")
    return "torch"


def _demo_llm(api: Any, pipeline: PipelineSettings, where: str, levels: list[int],
              seconds: float, db: str | None) -> int:
    """A stage per concurrency, each a job on this process (whose threads generate),
    counted from the server's metrics: the agent's path for a real vLLM."""
    from joulestat.demo.llm import TinyLLMServer

    mine = os.sched_getaffinity(0)
    use = sorted(mine)[:LLM_CPUS]
    setup = f"demo-{len(use)}vcpu"
    # Every thread started from here on (the model's, the metrics server's, an in-process
    # measurement's) inherits the pin: the job runs on the CPUs its setup names.
    os.sched_setaffinity(0, use)
    interval_s = (api.health().get("interval_s") if api is not None else None) or \
        pipeline.tick.interval_s
    print(f"joulestat demo --llm: {len(levels)} jobs of {seconds:g} s, a tiny GPT-2 (random "
          f"weights) generating on torch CPU ({setup}), its tokens read from its vLLM-named "
          f"metrics, measured {where}", file=sys.stderr)
    progress = _Progress(len(levels) + 1)
    jobs: list[tuple[int, _Job, dict[str, Any]]] = []
    try:
        progress.step("building a GPT-2 of 2 layers with random weights")
        with TinyLLMServer() as server:
            for level in levels:
                job, summary = _llm_stage(api, pipeline, progress, server, setup, len(use),
                                          level, seconds, float(interval_s))
                jobs.append((level, job, summary))
    finally:
        os.sched_setaffinity(0, mine)
    progress.done()
    _print_llm(_llm_read_back(jobs, pipeline), db)
    return 0


def _llm_stage(api: Any, pipeline: PipelineSettings, progress: _Progress, server: Any,
               setup: str, vcpus: int, level: int, seconds: float, interval_s: float
               ) -> tuple[_Job, dict[str, Any]]:
    from joulestat.attribution.agent_labels import SERVING_METRICS
    from joulestat.demo.llm import run_load

    progress.step(f"LLM generation at concurrency {level} ({setup})")
    wait_s = 3 * interval_s + 5.0
    before, scrapes = server.totals(), server.scrapes
    job = _Job(api, pipeline, LLM, "inference", {
        "setup": setup, "vcpus": str(vcpus), "concurrency": str(level), "backend": "torch",
        "demo": "true"}, os.getpid(), setup, agent_labels={SERVING_METRICS: server.url})
    try:
        # The job's first read of the metrics is its baseline (what was served before is
        # not the job's). An in-process measurement starts its own poller with the job,
        # so its first read is the job's; an agent's may be reading for the job before
        # (ended, still listed): two reads, so that one surely began after this one's.
        if not server.wait_scrapes(scrapes + (1 if job.embedded is not None else 2), wait_s):
            raise ConfigError(f"the measurement did not read the demo server's metrics "
                              f"within {wait_s:g} s (an agent older than --serving-metrics? "
                              "restart it, or run with --embedded)")
        run_load(server, level, seconds, progress.update)
        # Tokens are counted when the metrics are next read: wait for a read after the
        # last token and for the job to have counted every one (a tick later).
        expected = server.totals().output_tokens - before.output_tokens
        server.wait_scrapes(server.scrapes + 1, wait_s)
        deadline = time.monotonic() + wait_s
        while job.counted("output_token") < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        counted = job.counted("output_token")
        if counted < expected:
            logging.getLogger(__name__).warning(
                "demo-llm concurrency=%d: %d of %d output tokens counted before the job ended",
                level, counted, expected)
    finally:
        summary = job.end()
    return job, summary


def _llm_read_back(jobs: list[tuple[int, _Job, dict[str, Any]]], pipeline: PipelineSettings
                   ) -> list[_LlmStage]:
    """Each stage's figures as the store has them: its report (the agent's, through its
    API, or built from the store the in-process measurement wrote)."""
    from joulestat.demo.llm import MODEL_NAME
    from joulestat.reports.model import build_report
    from joulestat.store.access import open_reader_engine

    engine = None
    stages = []
    try:
        for level, job, summary in jobs:
            if job.embedded is None:
                report = job.api.report(job.id)
            else:
                engine = engine or open_reader_engine(pipeline.store.db)
                report = build_report(engine, job.id, series=False)
            work = report.get("work_units") or {}
            ttft = ((report.get("latency") or {}).get(MODEL_NAME) or {}).get("ttft") or {}
            stages.append(_LlmStage(
                level, job.id, bool(summary.get("final", True)),
                float(work.get("output_token", 0.0)), float(work.get("prompt_token", 0.0)),
                float(work.get("request", 0.0)), float(report["energy_j"]["total"]),
                report["job"].get("duration_s"), ttft.get("p50_s"), ttft.get("p99_s")))
    finally:
        if engine is not None:
            engine.dispose()
    return stages


def _print_llm(stages: list[_LlmStage], db: str | None) -> None:
    from joulestat.cli.dashboard import DEFAULT_PORT, running_dashboard
    from joulestat.core import units
    from joulestat.core.redact import redact_url

    print("\nLLM serving jobs measured (energy attributed to this process; tokens and "
          "latency from the server's vLLM-named metrics):")
    for stage in stages:
        rate = (f", {units.sig(stage.output_tokens / stage.duration_s)} tokens/s"
                if stage.duration_s else "")
        print(f"  {LLM} concurrency={stage.concurrency}: "
              f"{units.count(stage.output_tokens)} output tokens{rate} "
              f"({units.count(stage.requests)} requests), {units.energy(stage.energy_j)}, "
              f"{units.per(units.energy(stage.energy_per_output_token_j), 'output token')}; "
              f"TTFT p50 {units.si(stage.ttft_p50_s, 's')}, p99 {units.si(stage.ttft_p99_s, 's')}"
              + ("" if stage.final else " (not final)"))
    shown_db = f" --db {redact_url(db)}" if db else ""
    running = running_dashboard()
    base = running.url if running is not None else f"http://127.0.0.1:{DEFAULT_PORT}"
    print(f"\ncompare them:  joulestat compare --jobs {LLM} --by label:concurrency "
          f"--unit output_token{shown_db}\n"
          f"look at them:  joulestat dashboard{shown_db}, then "
          f"{base}/compare?kind=inference&unit=output_token&by=label:concurrency"
          "&period=All%20time\n"
          "demo-* instance types are placeholders for this machine's CPUs, priced at made-up "
          "rates, not cloud offers; the model's weights are random, so its tokens are "
          "nonsense, but what they cost is measured.")
