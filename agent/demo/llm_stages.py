"""``joulestat demo --llm``'s run: a tiny GPT-2 of random weights generating tokens in
this process, pinned to at most :data:`LLM_CPUS` CPUs (setup ``demo-2vcpu`` where there
are two), behind a server exposing vLLM's metric names (:mod:`joulestat.demo.llm`). One
``demo-llm`` job per concurrency on this process's pid, each counted from those metrics
as ``--serving-metrics`` counts a real vLLM's, so a new store shows energy per output
token and time to first token; each stage's figures are then read back from the store
(:class:`LlmStage`). It needs the ``hf`` extra (torch and transformers), which the
command checks before anything is written.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joulestat.core.errors import ConfigError
from joulestat.demo.jobs import DemoJob, Measurement, Progress

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.demo.llm import TinyLLMServer

LLM = "demo-llm"  # the jobs' name
LLM_CPUS = 2  # the LLM demo runs pinned to this many CPUs at most (its setup's name)


@dataclass(frozen=True, slots=True)
class LlmDemoSettings:
    """What the --llm run measures: each stage's length, its concurrencies, and the CPUs
    this process may run on (it uses the first :data:`LLM_CPUS` of them)."""

    seconds: float
    levels: tuple[int, ...]
    cpus: tuple[int, ...]  # sorted

    @property
    def use(self) -> list[int]:
        """The CPUs the run is pinned to."""
        return list(self.cpus[:LLM_CPUS])

    @property
    def setup(self) -> str:
        """The placeholder setup (and instance type) its jobs run as."""
        return f"demo-{len(self.use)}vcpu"

    @property
    def steps(self) -> int:
        """The run's steps: the model's build, then a stage a concurrency."""
        return len(self.levels) + 1


@dataclass(frozen=True, slots=True)
class LlmStage:
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


def run_llm_stages(settings: LlmDemoSettings, measurement: Measurement, progress: Progress,
                   interval_s: float) -> list[LlmStage]:
    """A stage per concurrency, each a job on this process (whose threads generate),
    counted from the server's metrics: the agent's path for a real vLLM. ``interval_s``:
    how often the measurement reads them (:meth:`Measurement.interval_s`)."""
    from joulestat.demo.llm import TinyLLMServer

    mine = os.sched_getaffinity(0)
    # Every thread started from here on (the model's, the metrics server's, an in-process
    # measurement's) inherits the pin: the job runs on the CPUs its setup names.
    os.sched_setaffinity(0, settings.use)
    jobs: list[tuple[int, DemoJob, dict[str, Any]]] = []
    try:
        progress.step("building a GPT-2 of 2 layers with random weights")
        with TinyLLMServer() as server:
            for level in settings.levels:
                job, summary = _stage(measurement, progress, server, settings.setup,
                                      len(settings.use), level, settings.seconds, interval_s)
                jobs.append((level, job, summary))
    finally:
        os.sched_setaffinity(0, mine)
    return _read_back(jobs, measurement)


def _stage(measurement: Measurement, progress: Progress, server: TinyLLMServer, setup: str,
           vcpus: int, level: int, seconds: float, interval_s: float
           ) -> tuple[DemoJob, dict[str, Any]]:
    from joulestat.attribution.agent_labels import SERVING_METRICS
    from joulestat.demo.llm import run_load

    progress.step(f"LLM generation at concurrency {level} ({setup})")
    wait_s = 3 * interval_s + 5.0
    before, scrapes = server.totals(), server.scrapes
    job = DemoJob(measurement, LLM, "inference", {
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


def _read_back(jobs: list[tuple[int, DemoJob, dict[str, Any]]], measurement: Measurement
               ) -> list[LlmStage]:
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
                engine = engine or open_reader_engine(measurement.pipeline.store.db)
                report = build_report(engine, job.id, series=False)
            work = report.get("work_units") or {}
            ttft = ((report.get("latency") or {}).get(MODEL_NAME) or {}).get("ttft") or {}
            stages.append(LlmStage(
                level, job.id, bool(summary.get("final", True)),
                float(work.get("output_token", 0.0)), float(work.get("prompt_token", 0.0)),
                float(work.get("request", 0.0)), float(report["energy_j"]["total"]),
                report["job"].get("duration_s"), ttft.get("p50_s"), ttft.get("p99_s")))
    finally:
        if engine is not None:
            engine.dispose()
    return stages
