"""Tokens and requests from a serving engine's own metrics, into the jobs that name it.

A job registered with ``serving_metrics`` (the agent label of that name: ``joulestat
run --serving-metrics URL``, ``track(serving_metrics=URL)``, the API's field) is
counted from the engine's Prometheus endpoint rather than by its code: vLLM, TGI and
SGLang never call ``count()``, but each exposes cumulative token and request counters
and latency histograms per model (:mod:`joulestat.host.serving_metrics` reads them).

Two halves, so no HTTP request ever runs on the tick thread:

* after each tick, once :meth:`ServingUnits.start` is called, the tick hook starts a
  fetch of each endpoint the running jobs name, each on a thread of its own, which
  keeps the latest sample with the time it was taken. No thread of its own waits
  between rounds: on this 2-vCPU VM a thread that wakes once a second costs 100 to
  130 us of CPU a wakeup, about a tenth of the agent's at 10 jobs, and a node with no
  serving job would pay it for nothing (issue 48). One
  endpoint never delays another's samples: a fetch of a URL starts only once its
  previous one has ended, and every fetch ends within :data:`FETCH_TIMEOUT_S` however
  slowly its server answers, so a hanging or dripping endpoint costs its own samples
  and its own fetch's threads, nothing else (fetches in flight are at most the
  endpoints measured). Each
  fetch goes only where :class:`~joulestat.host.serving_address.ServingAddressRule`
  lets it (this node, unless the agent's allowlist says more);
* a tick hook (:meth:`ServingUnits.__call__`) takes, per job, the samples that arrived
  since the last tick and counts their differences into the registry: per model,
  ``output_token@<model>``, ``prompt_token@<model>`` and ``request@<model>`` (the
  registry adds each to the job's plain unit), and ``busy_s@<model>``: the time between
  the two samples shared among the models by the tokens (prompt and output) each
  processed in it. The store's per-model split (:mod:`joulestat.store.model_split`)
  divides the job's energy by busy time, so a job serving several models is split by
  tokens: an estimate, as the reports say (the agent label names the endpoint).

Counters are differenced as Prometheus' ``increase()`` does: a value lower than the last
is a restart, counted from zero, so a server restart loses no tokens. The first sample
of a job is its baseline (tokens served before the job began are not its). An endpoint
that stops answering is said once (WARNING) and again when it answers (INFO); the job
keeps the units it has, and the next sample's difference covers the outage.

Latency: per job and model, the histograms' differences since the job's first sample,
added up (TTFT, inter-token latency, end-to-end), which the store keeps with the job
(:meth:`ServingUnits.latency`).

Load over time: after every tick, each serving job gets a point in its trace
(:mod:`joulestat.core.serving_trace`): its energy and counted tokens and requests so
far, the engine's running and waiting requests at its latest answer, and whether the
tick's power was measured (no counter-fault fill) and the engine had answered within
two intervals; with the per-request length histograms since the job's first sample.
The reports find the job's steady-state window in it
(:mod:`joulestat.reports.steady_state`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from joulestat.attribution.agent_labels import SERVING_METRICS
from joulestat.attribution.registry import JobRegistry
from joulestat.core.histogram import (
    Histogram,
    Latency,
    histogram_add,
    histogram_delta,
    histogram_to_json,
)
from joulestat.core.model_units import (
    BUSY,
    MAX_MODELS_PER_JOB,
    OUTPUT_TOKEN,
    PROMPT_TOKEN,
    REQUEST,
    model_key,
    validate_model,
)
from joulestat.core.redact import redact_text
from joulestat.core.serving_trace import TraceBuilder, TracePoint
from joulestat.core.tick import FILL_PREFIX, Tick
from joulestat.core.validation import JobError
from joulestat.host.serving_address import ServingAddressRule
from joulestat.host.serving_metrics import (
    FETCH_TIMEOUT_S,
    ModelCounters,
    ServingEngine,
    ServingMetricsError,
    ServingSample,
    counter_delta,
    fetch_serving_metrics,
    parse_serving_metrics,
)

log = logging.getLogger(__name__)

__all__ = ["FETCH_TIMEOUT_S", "OUTPUT_TOKEN", "PROMPT_TOKEN", "REQUEST", "SERVING_CHECKPOINT",
           "ServingUnits"]

# The part of the agent's checkpoint that holds each serving job's last sample.
SERVING_CHECKPOINT = "serving"
# Between two points of a trace, more than this many intervals is a gap (the agent was
# down), not a late tick: its seconds count as neither measured nor answered.
GAP_TICKS = 5


@dataclass
class _JobState:
    """One job's view of its endpoint: the last sample counted, and its latency so far."""

    url: str
    last: ServingSample | None = None
    last_s: float | None = None
    latency: dict[str, dict[Latency, Histogram]] = field(default_factory=dict)
    failing: bool = False
    trace: TraceBuilder | None = None
    answered_s: float | None = None  # wall time of the latest sample counted
    running: float | None = None  # the engine's gauges at that sample, over its models
    waiting: float | None = None
    prompt_lengths: Histogram | None = None  # per-request lengths since the baseline
    output_lengths: Histogram | None = None


class ServingUnits:
    """Counts serving engines' tokens and requests into the jobs that name them.

    Call it after each tick (a tick hook); :meth:`start` polling from the hook,
    :meth:`close` it. ``interval_s`` is the tick's: each tick starts a round.
    ``rule``: where fetches may go (default: this node only). ``last_tick``: the
    pipeline's newest tick (its power counts as measured unless a counter fault filled
    it; None: every tick does). ``fetch``, ``clock`` and ``wall_clock`` are parameters
    for tests.
    """

    def __init__(self, registry: JobRegistry, interval_s: float = 1.0, *,
                 rule: ServingAddressRule | None = None,
                 last_tick: Callable[[], Tick | None] | None = None,
                 fetch: Callable[[str, float], str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self._registry, self._interval_s = registry, interval_s
        self._last_tick, self._wall_clock = last_tick, wall_clock
        if fetch is None:
            fetch = functools.partial(fetch_serving_metrics, rule=rule or ServingAddressRule())
        self._fetch, self._clock = fetch, clock
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[ServingSample, float]] = {}  # by job id
        self._jobs: dict[str, _JobState] = {}
        self._fetching: dict[str, threading.Thread] = {}  # by URL: at most one each
        self._stop = threading.Event()
        self._polling = False

    # -- the poller ----------------------------------------------------------------------

    def start(self) -> None:
        """Poll from now on: every tick hook starts a round (:meth:`poll`)."""
        self._polling = True

    def close(self) -> None:
        """Stop polling and wait for the fetches under way (each ends by its deadline)."""
        self._stop.set()
        deadline = time.monotonic() + FETCH_TIMEOUT_S + 1
        with self._lock:
            fetching = list(self._fetching.values())
        for thread in fetching:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def poll(self, wait_s: float = 0.0) -> None:
        """Start a fetch of every running job's endpoint (one per URL), each on a thread
        of its own; a URL whose previous fetch is still under way is left to it, so a
        slow endpoint delays nobody else's. ``wait_s``: wait up to that long for the
        fetches started (tests, which then tick)."""
        wanted: dict[str, list[str]] = {}
        for job in self._registry.jobs(running_only=True):
            url = job.agent_labels.get(SERVING_METRICS)
            if url:
                wanted.setdefault(url, []).append(job.id)
        started: list[tuple[str, threading.Thread]] = []
        with self._lock:
            if self._stop.is_set():
                return
            for url, job_ids in wanted.items():
                if url in self._fetching:
                    continue  # its last fetch is still going (at most FETCH_TIMEOUT_S)
                thread = threading.Thread(target=self._fetch_one, args=(url, job_ids),
                                          name="joulestat-serving-fetch", daemon=True)
                self._fetching[url] = thread
                started.append((url, thread))
        for url, thread in started:
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had: this round skips it
                log.warning("serving metrics: cannot start a fetch: %s", exc)
                with self._lock:
                    self._fetching.pop(url, None)
        if wait_s > 0:
            deadline = time.monotonic() + wait_s
            for _url, thread in started:
                if thread.ident is not None:
                    thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _fetch_one(self, url: str, job_ids: list[str]) -> None:
        try:
            try:
                text = self._fetch(url, FETCH_TIMEOUT_S)  # its errors name the URL
            except ServingMetricsError as exc:
                self._failed(url, job_ids, str(exc))
                return
            try:
                sample = parse_serving_metrics(text)
            except ServingMetricsError as exc:  # says what is wrong, never the page
                self._failed(url, job_ids, f"{redact_text(url)}: {exc}")
                return
            taken_s = self._clock()
            with self._lock:
                for job_id in job_ids:
                    self._latest[job_id] = (sample, taken_s)
                    state = self._jobs.get(job_id)
                    if state is not None and state.failing:
                        state.failing = False
                        log.info("serving metrics of job %s answer again at %s", job_id,
                                 redact_text(url))
        except Exception:  # a fetch's thread ends quietly otherwise: say it
            log.exception("serving metrics: fetching %s failed", redact_text(url))
        finally:
            with self._lock:
                self._fetching.pop(url, None)

    def _failed(self, url: str, job_ids: list[str], why: str) -> None:
        with self._lock:
            for job_id in job_ids:
                state = self._jobs.setdefault(job_id, _JobState(url))
                if not state.failing:
                    state.failing = True
                    log.warning("serving metrics of job %s: %s; its tokens so far are kept, "
                                "and counted on from the next answer", job_id, why)

    # -- the tick hook -------------------------------------------------------------------

    def __call__(self, _now_s: float = 0.0, _work_s: float = 0.0) -> None:
        with self._lock:
            latest, self._latest = self._latest, {}
        for job_id, (sample, taken_s) in latest.items():
            try:
                self._count(job_id, sample, taken_s)
            except JobError as exc:  # the job ended or was forgotten meanwhile
                log.debug("serving metrics of job %s not counted: %s", job_id, exc)
        self._trace()
        if self._polling:
            try:
                self.poll()  # what it fetches is counted from the next tick on
            except Exception:  # never break the tick: the next one tries again
                log.exception("serving metrics: polling failed")

    def _trace(self) -> None:
        """A point per serving job that has its baseline, at the newest tick's end."""
        with self._lock:
            states = [(job_id, state) for job_id, state in self._jobs.items()
                      if state.answered_s is not None]
        if not states:
            return  # no serving job: nothing per tick
        tick = self._last_tick() if self._last_tick is not None else None
        t_s = tick.t1_s if tick is not None else self._wall_clock()
        measured = tick is None or not any(
            entry.source.startswith(FILL_PREFIX) for entry in tick.entries)
        for job_id, state in states:
            try:
                job = self._registry.get(job_id)
            except JobError:
                continue
            if job.ended_s is not None:
                continue  # its last point was taken while it ran
            if state.trace is None:
                state.trace = TraceBuilder(self._interval_s)
                if job.serving_trace is not None:  # restored: go on from what was stored
                    state.trace.points.extend(job.serving_trace.points)
            points = state.trace.points
            before = points[-1] if points else None
            dt_s = max(0.0, t_s - before.t_s) if before is not None else 0.0
            # A gap of many ticks (the agent down, its job restored from the store) was
            # neither measured nor answered tick by tick: no coverage for it.
            covered_s = dt_s if dt_s <= GAP_TICKS * self._interval_s else 0.0
            answered = state.answered_s is not None and (
                t_s - state.answered_s <= 2 * self._interval_s + 0.5)
            units = job.units
            state.trace.append(TracePoint(
                t_s, job.energy_j, units.get(OUTPUT_TOKEN, 0.0),
                units.get(PROMPT_TOKEN, 0.0), units.get(REQUEST, 0.0),
                state.running, state.waiting,
                (before.power_s if before else 0.0) + (covered_s if measured else 0.0),
                (before.answered_s if before else 0.0) + (covered_s if answered else 0.0)))
            state.trace.prompt_lengths = state.prompt_lengths
            state.trace.output_lengths = state.output_lengths
            try:
                self._registry.set_serving_trace(job_id, state.trace.trace())
            except JobError:
                continue

    def _count(self, job_id: str, sample: ServingSample, taken_s: float) -> None:
        job = self._registry.get(job_id)
        url = job.agent_labels.get(SERVING_METRICS, "")
        with self._lock:
            state = self._jobs.setdefault(job_id, _JobState(url))
        previous, previous_s = state.last, state.last_s
        state.last, state.last_s = sample, taken_s
        state.answered_s = self._wall_clock()
        state.running, state.waiting = (
            _summed([getattr(c, name) for c in sample.models.values()])
            for name in ("running", "waiting"))
        if previous is None or previous_s is None:
            return  # the job's baseline: what the server served before it is not its
        for name in ("prompt_lengths", "output_lengths"):
            for model, counters in sample.models.items():
                now = getattr(counters, name)
                before_model = previous.models.get(model)
                then = getattr(before_model, name) if before_model is not None else None
                if now is not None and then is not None:
                    setattr(state, name, histogram_add(getattr(state, name),
                                                       histogram_delta(now, then)))
        tokens: dict[str, float] = {}
        for model, counters in sorted(sample.models.items())[:MAX_MODELS_PER_JOB]:
            try:
                validate_model(model)
            except ValueError:
                # Not quoted: the name is the page's, and the page is what the URL said.
                log.debug("serving metrics of job %s: a model name of %d characters cannot "
                          "be counted", job_id, len(model))
                continue
            before = previous.models.get(model)
            deltas = {
                OUTPUT_TOKEN: _increase(counters.output_tokens,
                                        before.output_tokens if before else None),
                PROMPT_TOKEN: _increase(counters.prompt_tokens,
                                        before.prompt_tokens if before else None),
                REQUEST: _increase(counters.requests, before.requests if before else None),
            }
            for unit, delta in deltas.items():
                if delta > 0:
                    self._registry.count(job_id, model_key(unit, model), delta)
            tokens[model] = deltas[OUTPUT_TOKEN] + deltas[PROMPT_TOKEN]
            self._add_latency(state, model, counters.latency,
                              before.latency if before else None)
        self._count_busy(job_id, tokens, taken_s - previous_s)
        if state.latency:
            self._registry.set_latency(job_id, {
                model: {kind.value: histogram_to_json(h) for kind, h in sorted(hists.items())}
                for model, hists in sorted(state.latency.items()) if hists})

    def _count_busy(self, job_id: str, tokens: Mapping[str, float], elapsed_s: float) -> None:
        """The time between two samples, shared among the models by their tokens: how
        the store's per-model split divides the job's energy (an estimate)."""
        total = sum(tokens.values())
        if total <= 0 or elapsed_s <= 0:
            return
        for model, count in tokens.items():
            if count > 0:
                self._registry.count(job_id, model_key(BUSY, model), elapsed_s * count / total)

    @staticmethod
    def _add_latency(state: _JobState, model: str, now: Mapping[Latency, Histogram],
                     before: Mapping[Latency, Histogram] | None) -> None:
        per_model = state.latency.setdefault(model, {})
        for kind, histogram in now.items():
            then = before.get(kind) if before is not None else None
            if then is None:
                continue  # first sight of this histogram: its baseline
            per_model[kind] = histogram_add(per_model.get(kind), histogram_delta(histogram, then))

    def latency(self, job_id: str) -> dict[str, dict[Latency, Histogram]]:
        """Per model, the job's latency histograms since its first sample."""
        with self._lock:
            state = self._jobs.get(job_id)
            if state is None:
                return {}
            return {model: dict(hists) for model, hists in state.latency.items() if hists}

    # -- a restart's continuity ----------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        """Per serving job, the engine's counters at the last sample counted and when
        (monotonic seconds): kept with the agent's checkpoint (every tick), so that an
        agent restarted from it counts what the engine served while it was down, as the
        checkpoint lets it charge the energy of that time to the job. Empty, at once,
        with no serving job."""
        with self._lock:
            states = [(job_id, state.last, state.last_s) for job_id, state in self._jobs.items()
                      if state.last is not None and state.last_s is not None]
        return {job_id: {"engine": sample.engine.value, "taken_s": taken_s,
                         "models": {model: [c.output_tokens, c.prompt_tokens, c.requests]
                                    for model, c in sample.models.items()}}
                for job_id, sample, taken_s in states}

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Take the samples :meth:`checkpoint` kept as the restored jobs' last ones: each
        job's next sample counts from them (the engine restarted meanwhile: from zero, as
        any restart). A job no longer running, or a part that cannot be read (said), starts
        from its next sample as a new one would."""
        for job_id, part in saved.items():
            try:
                job = self._registry.get(job_id)
            except JobError:
                continue  # ended, or not restored
            if job.ended_s is not None:
                continue
            try:
                models = {str(model): ModelCounters(*(_number(v) for v in values), latency={})
                          for model, values in part["models"].items()}
                sample = ServingSample(ServingEngine(part["engine"]), models)
                taken_s = float(part["taken_s"])
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("serving metrics of job %s: the checkpoint's last sample cannot "
                            "be read (%s); counting from the next answer", job_id, exc)
                continue
            url = job.agent_labels.get(SERVING_METRICS, "")
            with self._lock:
                self._jobs[job_id] = _JobState(url, sample, taken_s)

    def forget(self, job_ids: list[str]) -> None:
        with self._lock:
            for job_id in job_ids:
                self._jobs.pop(job_id, None)
                self._latest.pop(job_id, None)


def _number(value: Any) -> float | None:
    """A saved counter: a number, or None where the engine exposes none."""
    return None if value is None else float(value)


def _summed(values: list[float | None]) -> float | None:
    """A gauge over a server's models: None when no model exposes it."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _increase(now: float | None, then: float | None) -> float:
    """What a counter counted between two samples of the job: a counter the engine does
    not expose counts nothing; one absent from the earlier sample appeared since (a
    model's first request), so all of it is new; else Prometheus' ``increase()`` rule
    (:func:`~joulestat.host.serving_metrics.counter_delta`: a drop is a restart)."""
    if now is None:
        return 0.0
    if then is None:
        return max(0.0, now)
    return counter_delta(now, then)
