"""``joulestat demo``: measure a small real workload, so a new store has something to compare.

The command line of it: its options, their checks (before anything is written), the
settings it hands the demo, and what it prints (the jobs measured, then ``joulestat
compare`` of them and the dashboard's URL). What it runs is :mod:`joulestat.demo`: the
CPU run, two training jobs and an inference job per concurrency
(:mod:`joulestat.demo.training_serving`), or with ``--llm`` a tiny GPT-2 serving job per
concurrency (:mod:`joulestat.demo.llm_stages`), each job measured by the node's agent
when one answers (as ``joulestat run`` is) or in this process (embedded mode). The
``--llm`` run needs the ``hf`` extra (torch and transformers), checked here before
anything is written.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from joulestat.core.errors import ConfigError
from joulestat.core.extras import Extra, install_hint, require, require_installed
from joulestat.runtime.embedded import EMBEDDED_OPTIONS
from joulestat.runtime.settings import add_options, resolve

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.api.agent_client import AgentAddress, AgentClient
    from joulestat.demo.jobs import Measurement
    from joulestat.demo.llm_stages import LlmDemoSettings, LlmStage

TRAIN_SECONDS, SERVE_LEVELS = 12.0, "1,4,16"
# --llm: three stages of 30 s, with the model's build (~10 s) and each stage's waits for
# the metrics' reads, about two minutes on two cores.
LLM_SECONDS, LLM_LEVELS = 30.0, "1,2,4"
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
    """A bar on stderr redrawn in place on a terminal; a line per step elsewhere (the
    :class:`~joulestat.demo.jobs.Progress` the demo's stages report to)."""

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


def _agent(address: AgentAddress, embedded: bool) -> tuple[AgentClient | None, str]:
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
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    from joulestat.api.agent_client import AgentAddress
    from joulestat.demo.jobs import Measurement
    from joulestat.demo.llm_stages import LlmDemoSettings
    from joulestat.demo.training_serving import (
        SERVE,
        TRAIN,
        TrainServeSettings,
        run_training_and_serving,
    )
    from joulestat.runtime.embedded import embedded_settings

    api, where = _agent(settings.section(AgentAddress), args.embedded)
    # What jobs measured in this process use.
    measurement = Measurement(api, embedded_settings(settings))
    if args.llm:
        return _demo_llm(LlmDemoSettings(seconds, tuple(levels), cpus), measurement, where,
                         settings.get("db"))
    demo = TrainServeSettings(backend, seconds, tuple(levels), cpus)
    print(f"joulestat demo: {demo.stages} jobs of {seconds:g} s on "
          f"{backend}, measured {where}" + ("" if len(cpus) > 1 else
          "; one CPU available, so no 2-vCPU configuration"), file=sys.stderr)
    progress = _Progress(demo.stages)
    results = run_training_and_serving(demo, measurement, progress)
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


def _llm_backend(name: str) -> str:
    """--llm runs on PyTorch with transformers (the hf extra), imported now: a missing
    one is one line naming the extra, before anything is written."""
    if name == "numpy":
        raise ConfigError("--llm: the model runs on PyTorch; --backend numpy does not apply")
    for module in ("torch", "transformers"):
        require(module, Extra.HF, "joulestat demo --llm")
    return "torch"


def _demo_llm(demo: LlmDemoSettings, measurement: Measurement, where: str,
              db: str | None) -> int:
    """The --llm run (:func:`joulestat.demo.llm_stages.run_llm_stages`), then its jobs."""
    from joulestat.demo.llm_stages import run_llm_stages

    interval_s = measurement.interval_s()
    print(f"joulestat demo --llm: {len(demo.levels)} jobs of {demo.seconds:g} s, a tiny GPT-2 "
          f"(random weights) generating on torch CPU ({demo.setup}), its tokens read from its "
          f"vLLM-named metrics, measured {where}", file=sys.stderr)
    progress = _Progress(demo.steps)
    stages = run_llm_stages(demo, measurement, progress, interval_s)
    progress.done()
    _print_llm(stages, db)
    return 0


def _print_llm(stages: list[LlmStage], db: str | None) -> None:
    from joulestat.cli.dashboard import DEFAULT_PORT, running_dashboard
    from joulestat.core import units
    from joulestat.core.redact import redact_url
    from joulestat.demo.llm_stages import LLM

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
