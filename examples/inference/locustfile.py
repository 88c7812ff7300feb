"""Locust load test of server.py in stages of concurrency; each stage is a joulestat job.

    locust -f examples/inference/locustfile.py --headless --host http://127.0.0.1:8000 \\
        --stages 1,4,16 --stage-seconds 30

The shape holds each number of users (``--stages``) for ``--stage-seconds``, spawning a
stage's users at once, then stops the test. Each stage is a job (``--job-name``, kind
``inference``) registered with the node's agent on the server's process and labelled
``concurrency=N``: its energy is what the agent attributes to the server during the
stage, its units the inferences and busy time per model the server counted meanwhile,
sent about once a second (:mod:`stage_jobs`), and
its latency percentiles over the stage (``p50_ms``, ``p99_ms``: nearest-rank over the
response times of the stage's successful requests, in milliseconds) become labels
before it ends. Those come from each request as it completes, unrounded (Locust's own
percentiles round to whole milliseconds, and a fast server answers in less than one);
under a distributed runner, where requests complete on the workers, Locust's
aggregated percentiles stand in. Locust's statistics are reset at each stage's start.

Every user sends one request at a time with no think time, so the number of users is
the concurrency the server sees. Needs the agent on this node (``make run``, or
``joulestat agent``; ``JOULESTAT_AGENT_URL`` names another port) and the server started
on its own, not under ``joulestat run`` (the stage jobs do the counting). The test
stops with an error, exit status 1, when either is missing.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from locust import FastHttpUser, LoadTestShape, constant, events, task
from locust.env import Environment
from stage_jobs import AgentApi, StageError, StageJobs, call_json

log = logging.getLogger("joulestat.stages")
INPUTS = 64
KEEP_LATENCIES = 200_000  # a reservoir: a long stage at a high rate keeps a fair sample
_latencies_ms: list[float] = []
_seen = [0]
_models: list[str] = []
_rng = random.Random(7)
_rows = [[_rng.uniform(-1, 1) for _ in range(INPUTS)]]
_stages: StageJobs | None = None


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = parser.add_argument_group("joulestat stages")
    group.add_argument("--stages", default="1,4,16",
                       help="users (= concurrency) of each stage, comma-separated [1,4,16]")
    group.add_argument("--stage-seconds", type=float, default=30.0,
                       help="how long each stage holds [30]")
    group.add_argument("--job-name", default="mlp-serve", help="the stage jobs' name")
    group.add_argument("--models", default="",
                       help="models to call, comma-separated [all the server serves]")
    group.add_argument("--agent-url", default="",
                       help="the agent's job API [JOULESTAT_AGENT_URL, else :9465]")


def _levels(environment: Environment) -> list[int]:
    text = environment.parsed_options.stages
    levels = [int(part) for part in text.split(",") if part.strip()]
    if not levels or min(levels) < 1:
        raise StageError(f"--stages {text!r}: expected positive integers, e.g. 1,4,16")
    return levels


def _fail(environment: Environment, message: str) -> None:
    log.error("%s", message)
    environment.process_exit_code = 1
    if environment.runner is not None:
        environment.runner.quit()


def _setup(environment: Environment) -> bool:
    """Check the agent and the server before any load, and pick the models to call.

    Called by the shape's first tick: it runs before Locust's ``test_start`` and only
    where the shape runs (the local runner, or the master)."""
    global _stages
    options = environment.parsed_options
    api = AgentApi(url=options.agent_url) if options.agent_url else AgentApi()
    _stages = StageJobs(environment.host or "", options.job_name,
                        labels={"load_test": "locust"}, api=api)
    try:
        _levels(environment)
        _stages.check()
        served = list(call_json(environment.host.rstrip("/") + "/v1/models")["models"])
    except (StageError, OSError, ValueError) as exc:
        _fail(environment, f"joulestat stages: {exc}")
        return False
    wanted = [m.strip() for m in options.models.split(",") if m.strip()] or served
    missing = sorted(set(wanted) - set(served))
    if missing:
        _fail(environment, f"--models: the server does not serve {missing}; it serves {served}")
        return False
    _models[:] = wanted
    _stages.labels["models"] = "+".join(wanted)
    return True


@events.request.add_listener
def _on_request(response_time: float, exception: BaseException | None, **_kwargs: Any
                ) -> None:
    """Every successful request's response time, for the stage's percentiles."""
    if exception is not None or _stages is None or _stages.job_id is None:
        return
    _seen[0] += 1
    if len(_latencies_ms) < KEEP_LATENCIES:
        _latencies_ms.append(response_time)
    else:
        slot = random.randrange(_seen[0])
        if slot < KEEP_LATENCIES:
            _latencies_ms[slot] = response_time


def _percentile(ordered: list[float], percent: float) -> float:
    """Nearest rank: the smallest value with ``percent`` % of the values at or below."""
    rank = max(1, -int(-percent * len(ordered) // 100))
    return ordered[min(rank, len(ordered)) - 1]


def _close_stage(environment: Environment) -> None:
    """Finish the running stage's job with the latency Locust saw during it."""
    if _stages is None or _stages.job_id is None:
        return
    total = environment.runner.stats.total if environment.runner else None
    p50 = p99 = None
    failures = 0
    if _latencies_ms:
        ordered = sorted(_latencies_ms)
        p50, p99 = _percentile(ordered, 50), _percentile(ordered, 99)
    elif total is not None and total.num_requests:  # distributed: the workers' aggregate
        p50 = total.get_response_time_percentile(0.5)
        p99 = total.get_response_time_percentile(0.99)
    if total is not None:
        failures = total.num_failures
    job = _stages.finish(p50, p99, failures)
    log.info("stage concurrency=%s ended: job %s, %s requests, p50 %.3g ms, p99 %.3g ms",
             _stages.level, job.get("id"), total.num_requests if total else 0,
             p50 or 0.0, p99 or 0.0)


@events.quitting.add_listener
def _quitting(environment: Environment, **_kwargs: Any) -> None:
    """A stop in the middle of a stage (Ctrl-C, --run-time) still ends its job; then
    every stage job is waited for until its last tick is stored, and listed."""
    if _stages is None:
        return
    try:
        _close_stage(environment)
        for job in _stages.wait_final():
            labels = job.get("labels", {})
            inferences = job.get("units", {}).get("inference", 0)
            energy = job.get("total_energy_j", 0.0)
            per = f"{energy / inferences:.4g} J/inference" if inferences else "no inferences"
            print(f"joulestat: {job.get('name')} concurrency={labels.get('concurrency')}: "
                  f"{inferences:.0f} inferences, {energy:.4g} J, {per}, "
                  f"p50 {labels.get('p50_ms')} ms, p99 {labels.get('p99_ms')} ms, "
                  f"job {job.get('id')}{'' if job.get('final') else ' (not final yet)'}")
    except (StageError, OSError, ValueError) as exc:
        log.error("joulestat stages: %s", exc)
        environment.process_exit_code = 1


class StagedConcurrency(LoadTestShape):
    """``--stages`` users for ``--stage-seconds`` each; a joulestat job per stage."""

    def __init__(self) -> None:
        super().__init__()
        self._index = -1

    def tick(self) -> tuple[int, float] | None:
        environment = self.runner.environment
        if self._index == -1 and _stages is None and not _setup(environment):
            return None
        levels = _levels(environment)
        index = int(self.get_run_time() // environment.parsed_options.stage_seconds)
        try:
            if index != self._index:
                _close_stage(environment)
                self._index = index
                if index < len(levels):
                    environment.runner.stats.reset_all()
                    _latencies_ms.clear()
                    _seen[0] = 0
                    _stages.begin(levels[index])
        except (StageError, OSError, ValueError) as exc:
            _fail(environment, f"joulestat stages: {exc}")
            return None
        if index >= len(levels):
            return None
        try:  # the stage's inferences and busy time so far, so the split sees them in time
            _stages.progress()
        except (StageError, OSError, ValueError) as exc:
            log.warning("joulestat stages: counting the stage's progress failed (%s); "
                        "what it missed goes with the next count", exc)
        return levels[index], float(levels[index])


class InferenceUser(FastHttpUser):
    """One request at a time, no think time: users = concurrency."""

    wait_time = constant(0)

    @task
    def infer(self) -> None:
        model = random.choice(_models) if _models else "mlp"
        self.client.post(f"/v1/models/{model}/infer", json={"inputs": _rows},
                         name=f"/v1/models/{model}/infer")
