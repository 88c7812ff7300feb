"""In-process client: ``with track("bert-large") as job: ... job.count("sample", 32)``.

A training loop calls ``count`` every step, so counting only adds to a local tally;
a background thread sends the tallies to the agent about once a second, and whatever
is still unsent goes at exit, just before the job is ended (also when the block
raises). A send that fails stays in the tally for the next one, so a hiccup of the
agent loses nothing.

It never breaks the program it measures: nothing here raises into the user's code.
A job is measured as well as it can be, and ``job.mode`` (:class:`Mode`) with
``job.mode_reason`` says how and why: by the agent; else, when no agent answers at
registration, in this process (embedded mode); else not at all (the store cannot be
opened, the agent refused the job, a bug of ours). An agent that answers with an
error is not bypassed, because measuring the node twice would be worse than not
measuring the job. A job not measured still takes ``count()`` calls, and tallies them
for its summary. Whatever failed is one WARNING on the ``joulestat`` logger per cause
(:mod:`joulestat.client.notice`), and a bad argument (a name, a unit, a NaN count) is
the same: said once, naming the argument and its value, and the call goes on without
it (a bad name, kind, label or id of ``track()`` is replaced, a bad count is dropped).

A process belongs to one job at a time, so ``track()`` joins rather than registers
when it is already inside one: inside another active ``track()`` of this process it
adds to that job, and in a program started by ``joulestat run`` (or by a process with
an active ``track()``), whose environment names the job (``JOULESTAT_JOB_ID``, see
:mod:`joulestat.client.context`), it adds to that job through the API that measures it. A
joined ``track()`` never ends the job it joined. Module-level :func:`count` adds to the
innermost job of the process the same way, so ``joulestat run -- python train.py``
with ``count("sample", 32)`` in the loop is all a script needs. A server of several
models says which did what: ``with job.serving("model-a"):`` (:mod:`joulestat.client.serving`).

Importing this module, and measuring through an agent, costs the standard library
only; embedded mode loads the agent's own modules (the store, the sensors) when it is
used.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from enum import StrEnum
from typing import Any

from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
from joulestat.attribution.agent_labels import SERVING_METRICS, validate_serving_url
from joulestat.client.context import (
    DEFAULT_AGENT_URL,
    ENV_AGENT_URL,
    ENV_JOB_ID,
    ENV_JOB_TOKEN,
    ENV_TOKEN,
    EnclosingJob,
    agent_url_from_env,
    child_env,
    enclosing_job,
    fallback_warning,
)
from joulestat.client.notice import bad_argument, shown, warn_once
from joulestat.client.serving import Serving, serving_block
from joulestat.core.model_units import BUSY, split_key
from joulestat.core.redact import redact_labels, redact_text
from joulestat.core.validation import (
    MAX_LABELS,
    JobError,
    count_keys,
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
)

log = logging.getLogger(__name__)

__all__ = ["Mode", "TrackedJob", "count", "current_job", "serving", "track"]

FLUSH_INTERVAL_S = 1.0
TIMEOUT_S = 2.0
EXIT_SEND_ATTEMPTS = 3
JOIN_WAIT_S = 3.0  # `joulestat run` registers its job just after starting the program
_RETRYABLE = (404, 408, 429)  # 404: the agent restarted without the job; register again
UNNAMED = "unnamed"  # the name of a job whose track() was given a name it cannot take
NOT_COUNTED = "not counted (said once: later calls like it are not counted either)"

# This process's open jobs, innermost last: a track() opened while one is open joins it.
_open_jobs: list[TrackedJob] = []
_open_lock = threading.Lock()
_implicit: TrackedJob | None = None  # count() outside any track(): the enclosing job
# The enclosing job a join failed for, and when to try it again: never when its API said
# no (or its URL is bad), after a pause when nothing answered (an agent restarting):
# a loop of count() calls must not wait on a failing join each step.
_unjoinable: tuple[str, float] | None = None
REJOIN_AFTER_S = 5.0


class Mode(StrEnum):
    """Who measures a job: ``job.mode``, and ``"mode"`` in its summary."""

    AGENT = "agent"  # the node's agent (or, joined, the API of the run it joined)
    EMBEDDED = "embedded"  # this process, no agent having answered
    NONE = "none"  # nothing: ``job.mode_reason`` says why; counts are tallied locally


class TrackedJob:
    """One job of this process; use it through :func:`track`. No method raises."""

    def __init__(
        self,
        name: str,
        kind: str = "training",
        labels: Mapping[str, str] | None = None,
        job_id: str | None = None,
        agent_url: str | None = None,
        *,
        token: str | None = None,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
        pids: Iterable[int] | None = None,
        serving_metrics: str | None = None,
    ) -> None:
        # Checked here, so a bad argument is said the same way whether an agent runs or
        # not; each is replaced by what still measures the job, never raised.
        self.name = _checked("name", name, validate_name, UNNAMED)
        self.kind = _checked("kind", kind, validate_kind, "other")
        self.labels = _checked_labels(labels)
        self.requested_id = None if job_id is None else _checked(
            "job_id", job_id, validate_job_id, None, "the job gets an id of its own")
        self._flush_interval_s = _positive("flush_interval_s", flush_interval_s,
                                           FLUSH_INTERVAL_S)
        timeout_s = _positive("timeout_s", timeout_s, TIMEOUT_S)
        token = token if token is not None else os.environ.get(ENV_TOKEN) or None
        self.agent_url, self._client = _agent_client(agent_url, token, timeout_s)
        # The processes the job is, with their descendants: this one, and those a run of
        # several processes names (joulestat.integrations.training: a node's ranks).
        self._pids = sorted({os.getpid(), *(pids or ())})
        # A serving engine's Prometheus endpoint the agent reads tokens and requests from.
        url = None if serving_metrics is None else _checked(
            "serving_metrics", serving_metrics, validate_serving_url, None,
            "the job is tracked without the server's token counts")
        self._agent_labels = {SERVING_METRICS: url} if url else {}
        self._id: str | None = None
        self._mode: Mode | None = None
        self._mode_reason = "not started"
        self._embedded: Any = None
        self._pending: dict[str, float] = {}  # counted, not yet sent to the agent
        self._counted: dict[str, float] = {}  # everything counted: a summary of our own
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._failing = False
        self._active = False
        self._parent: TrackedJob | None = None  # an open track() of this process we joined
        self._joined: EnclosingJob | None = None  # the job our environment names
        self._saved_env: dict[str, str | None] = {}
        self.summary: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        """The job's id ("" before it starts: it has none yet)."""
        if self._id is None:
            warn_once(("id", "before start"), f"job {self.name!r}: its id was read before "
                      "the job started; it has none yet (read it inside `with track()`)")
            return ""
        return self._id

    @property
    def mode(self) -> Mode | None:
        """Who measures the job (None before it starts); :attr:`mode_reason` says why."""
        return self._mode

    @property
    def mode_reason(self) -> str:
        return self._mode_reason

    @property
    def embedded(self) -> bool:
        """True when no agent answered and the job is measured in this process."""
        return self._embedded is not None

    @property
    def joined(self) -> bool:
        """True when this track() adds to a job it is inside of, rather than its own."""
        return self._parent is not None or self._joined is not None

    @property
    def active(self) -> bool:  # between start and end: counts are taken
        return self._active

    def start(self) -> TrackedJob:
        """Register the job (or join the one this code runs in); never raises: what
        fails leaves the job measured in-process or not at all, said once."""
        if self._active:
            return self
        try:
            self._begin()
        except Exception as exc:  # a bug of ours: the program goes on, unmeasured
            self._stop.set()  # a flusher already started sends nothing more
            self._drop_embedded()
            self._not_measured(("start", type(exc).__name__),
                               f"measuring job {self.name!r} failed inside joulestat "
                               f"({exc!r}); it is not measured")
        with _open_lock:
            _open_jobs.append(self)
        self._active = True
        return self

    def _begin(self) -> None:
        with _open_lock:
            parent = _open_jobs[-1] if _open_jobs else None
        if parent is not None and self.requested_id in (None, parent.id):
            self._parent, self._id = parent, parent.id
            self._set_mode(parent.mode or Mode.NONE,
                           f"joins job {parent.id} ({parent.name!r}), open in this "
                           f"process: {parent.mode_reason}")
            log.info("joulestat: track(%r) joins job %s (%r), already open in this process",
                     self.name, parent.id, parent.name)
        elif not self._join_enclosing(f"tracking {self.name!r} as a job of its own"):
            self._start_own()

    def _join_enclosing(self, instead: str) -> bool:
        """Join the job our environment names (we run under `joulestat run`); when that
        fails, say so once (and what is done ``instead``) and return False."""
        global _unjoinable
        enclosing = enclosing_job()
        if enclosing is None or self.requested_id not in (None, enclosing.job_id):
            return False
        if _unjoinable is not None and _unjoinable[0] == enclosing.job_id \
                and time.monotonic() < _unjoinable[1]:
            return False
        cause = ("join", enclosing.job_id)
        try:
            client = AgentClient(enclosing.agent_url, enclosing.token, self._client.timeout_s)
        except ValueError as exc:
            warn_once(cause, f"cannot join job {enclosing.job_id} named by {ENV_JOB_ID}: "
                      f"{ENV_AGENT_URL}: {exc}; {instead}")
            _unjoinable = (enclosing.job_id, math.inf)
            return False
        deadline = time.monotonic() + JOIN_WAIT_S
        while True:
            try:
                found = client.get(enclosing.job_id)
                break
            except AgentError as exc:
                if exc.status != 404 or time.monotonic() >= deadline:
                    warn_once(cause, f"cannot join job {enclosing.job_id} named by "
                              f"{ENV_JOB_ID} ({exc}); {instead}")
                    busy = exc.status >= 500 or exc.status == 429  # may answer soon
                    _unjoinable = (enclosing.job_id,
                                   time.monotonic() + REJOIN_AFTER_S if busy else math.inf)
                    return False
                time.sleep(0.05)
            except AgentUnavailable as exc:
                warn_once(cause, f"the API of job {enclosing.job_id} "
                          f"({enclosing.agent_url}) does not answer ({exc}); {instead}")
                _unjoinable = (enclosing.job_id, time.monotonic() + REJOIN_AFTER_S)
                return False
        client.remember(enclosing.job_id, enclosing.job_token)  # counts need it
        self._client, self._joined, self._id = client, enclosing, enclosing.job_id
        self.agent_url = enclosing.agent_url
        by = Mode.EMBEDDED if found.get("origin") == "embedded" else Mode.AGENT
        self._set_mode(by, f"joins job {enclosing.job_id}, which this program runs in "
                       f"({ENV_JOB_ID}), measured by {by.value}")
        log.info("joulestat: track(%r) joins job %s, which this program runs in",
                 self.name, enclosing.job_id)
        self._start_flusher()
        return True

    def _start_own(self) -> None:
        try:
            # This process may be in the job our environment names (an outer track(),
            # a `joulestat run`): its token lets this job take the process over.
            enclosing = enclosing_job()
            job = self._client.register(self.name, self.kind, self._pids, self.labels,
                                        self.requested_id, origin="client",
                                        agent_labels=self._agent_labels or None,
                                        holding=None if enclosing is None
                                        else enclosing.job_token)
        except AgentUnavailable as exc:
            self._start_embedded(_reason(exc))
            return
        except AgentError as exc:
            self._not_measured(
                ("refused", self.agent_url, exc.status),
                f"the agent at {self.agent_url} refused job {self.name!r} ({exc}); it is "
                "not measured (measuring it in-process beside that agent would count this "
                "node twice)")
            return
        self._id = str(job["id"])
        self._set_mode(Mode.AGENT, f"measured by the agent at {self.agent_url}")
        self._start_flusher()
        self._export(self.agent_url, self._client.token, self._client.job_token(self._id))

    def _start_embedded(self, why: str) -> None:
        """No agent answered: measure in this process, else not at all."""
        no_agent = f"no joulestat agent answered at {self.agent_url} ({why})"
        try:
            twice = fallback_warning(self.agent_url, self._client.token, forced=False)
        except Exception:  # a probe that fails says nothing worth a word
            twice = None
        if twice:
            warn_once(("twice", self.agent_url), twice)
        try:
            from joulestat.runtime.embedded import EmbeddedJob

            extra = {"agent_labels": self._agent_labels} if self._agent_labels else {}
            embedded = EmbeddedJob(self.name, self.kind, dict(self.labels), set(self._pids),
                                   self.requested_id, reason=no_agent, **extra)
            embedded.start()
        except Exception as exc:  # the store, a sensor, a setting, a missing dependency
            failure = _failure(exc)
            self._not_measured(("embedded", self.agent_url, failure),
                               f"{no_agent}, and measuring in-process failed: {failure}; "
                               f"job {self.name!r} is not measured")
            return
        self._embedded, self._id = embedded, str(embedded.id)
        self._set_mode(Mode.EMBEDDED, f"{no_agent}; measured in this process")
        warn_once(("no agent", self.agent_url),
                  f"{no_agent}; measuring job {self.name!r} in-process (embedded mode)")
        self._export(getattr(embedded, "api_url", None), getattr(embedded, "api_token", None),
                     getattr(embedded, "job_token", None))

    def _not_measured(self, cause: tuple[Any, ...], message: str) -> None:
        self._set_mode(Mode.NONE, message)
        if self._id is None:
            self._id = self.requested_id or uuid.uuid4().hex
        warn_once(cause, message)

    def _drop_embedded(self) -> None:
        if self._embedded is not None:
            embedded, self._embedded = self._embedded, None
            try:
                embedded.end()
            except Exception:
                log.debug("joulestat: ending a half-started measurement", exc_info=True)

    def _set_mode(self, mode: Mode, reason: str) -> None:
        self._mode, self._mode_reason = mode, redact_text(reason)

    def _start_flusher(self) -> None:
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name=f"joulestat-client-{self.id[:8]}")
        self._flusher.start()

    def _export(self, api_url: str | None, token: str | None,
                job_token: str | None = None) -> None:
        """Name this job in the environment, with its token, so programs it starts
        join it and may count into it."""
        if api_url is None:
            return
        for key, value in child_env(self.id, api_url, token, job_token).items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        for key, given in ((ENV_TOKEN, token), (ENV_JOB_TOKEN, job_token)):
            if not given and key in os.environ:
                self._saved_env[key] = os.environ.pop(key)

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def count(self, unit: str, count: float = 1, *, model: str | None = None,
              busy_s: float | None = None) -> None:
        """Add ``count`` units of work (samples, tokens, ...); cheap, never blocks on I/O,
        never raises (a bad argument is said once and not counted).
        ``model``: which model did them, ``busy_s``: how long it kept the process busy
        (the job's energy is split among its models by busy time)."""
        try:
            try:
                keys = count_keys(unit, count, model, busy_s)
            except JobError as exc:
                keys = self._without_busy_time(unit, count, model, busy_s, exc)
                if keys is None:
                    return
            if not self._active:
                warn_once(("count", "not running"),
                          f"{_call('job.count', unit, count, model, busy_s)}: job "
                          f"{self.name!r} is not running; {NOT_COUNTED} (count inside "
                          "`with track()`)")
                return
            for key, amount in keys:
                self._add(key, amount)
        except Exception as exc:
            _internal("job.count()", exc)

    @staticmethod
    def _without_busy_time(unit: str, count: float, model: str | None, busy_s: float | None,
                           exc: JobError) -> list[tuple[str, float]] | None:
        """What is still countable of a refused call: busy time without a model cannot be
        anyone's, but the units were done (a request handler's inference happened), so
        they are counted and only ``busy_s`` is left out; else nothing. Said once."""
        call = _call("job.count", unit, count, model, busy_s)
        if model is None and busy_s is not None:
            try:
                keys = count_keys(unit, count)
            except JobError:
                pass
            else:
                bad_argument(call, exc, "the count is kept, its busy_s left out")
                return keys
        bad_argument(call, exc, NOT_COUNTED)
        return None

    def figures(self) -> dict[str, Any] | None:
        """The job's figures so far, from whoever measures it (the agent's store, else
        this process's): energy, CO2e and cost, in total and per unit, and how the
        energy was obtained (``energy_is``, ``measured_share``): the numbers
        ``joulestat report`` gives now (:func:`joulestat.reports.figures.figures_of`).
        Counts not sent yet are sent first. None where there are none (the job is not
        measured, or its agent does not answer), said once; never raises."""
        return self._from_measurer("figures")

    def report(self) -> dict[str, Any] | None:
        """The job's report (``joulestat report --format json``) now; None as for
        :meth:`figures`."""
        return self._from_measurer("report")

    def _from_measurer(self, what: str) -> dict[str, Any] | None:
        if self._parent is not None:
            return self._parent._from_measurer(what)
        if self._id is None or self._mode in (None, Mode.NONE):
            warn_once((what, "not measured", self._id),
                      f"job {self.name!r} has no {what}: {self._mode_reason}")
            return None
        try:
            if self._embedded is not None:
                service = self._embedded.figures()
                return service.figures(self._id) if what == "figures" \
                    else service.report(self._id)
            if self._active:
                self._flush()  # the counts so far, so per-unit figures include them
            if what == "figures":
                return self._client.figures(self._id)
            return self._client.report(self._id)
        except (AgentUnavailable, AgentError) as exc:
            # 503 while the store has not taken the job yet: quietly, it will.
            if not (isinstance(exc, AgentError) and exc.status == 503):
                warn_once((what, self._id, type(exc).__name__),
                          f"job {self._id}: no {what} from {self.agent_url}: {exc}")
            return None
        except Exception as exc:
            _internal(f"job.{what}()", exc)
            return None

    def serving(self, model: str, unit: str = "inference") -> AbstractContextManager[Serving]:
        """``with job.serving("model-a") as s: ... s.count(n)``: the block's wall time is
        ``model``'s busy time, and ``s.count(n)`` counts ``n`` ``unit`` for it."""
        return serving_block(self, model, unit)

    def _add(self, key: str, amount: float) -> None:
        """Add to a unit key already checked (:func:`count_keys`)."""
        if self._parent is not None:
            self._parent._add(key, amount)
            return
        if self._embedded is not None:
            try:
                self._embedded.count(key, amount)
            except JobError as exc:  # a cap of the job's (units, models, total)
                warn_once(("refused count", self._id, str(exc)),
                          f"job {self._id}: {amount:g} {key} not counted: {exc}")
                return
        with self._lock:
            self._counted[key] = self._counted.get(key, 0.0) + amount
            if self._embedded is None and self._mode is not Mode.NONE:
                self._pending[key] = self._pending.get(key, 0.0) + amount

    def end(self) -> dict[str, Any] | None:
        """Send what is left, end the job (unless joined), return its summary; never raises.

        A job of its own is ended and, where the agent measures it, its summary is the
        final one (its last tick attributed and stored); ``"mode"`` and
        ``"mode_reason"`` in it say who measured it and why. A job not measured, or
        one whose end the agent did not take, gets a summary of what this process
        counted (``"final": false``). A joined track() only sends its counts: its
        summary is None, the job it joined goes on.
        """
        if not self._active:
            return self.summary
        self._active = False
        try:
            with _open_lock:
                if self in _open_jobs:
                    _open_jobs.remove(self)
            self._restore_env()
            if self._parent is not None:
                return None
            if self._mode is Mode.NONE:
                self.summary = self._local_summary("ended")
                return self.summary
            if self._embedded is not None:
                summary = self._embedded.end()
            else:
                self._send_rest()
                if self._joined is not None:
                    return None
                summary = self._client.end(self.id)
                timeout_s = self._client.final_timeout_s()
                if timeout_s is not None:
                    summary = self._client.wait_final(self.id, timeout_s)
            self.summary = {**summary, "mode": str(self._mode),
                            "mode_reason": self._mode_reason}
        except (AgentUnavailable, AgentError) as exc:
            warn_once(("end", self._id), f"job {self._id}: could not end it at the agent: "
                      f"{exc}")
            self.summary = self._local_summary("unknown")
        except Exception as exc:
            _internal("ending a job", exc)
            self.summary = self._local_summary("unknown")
        return self.summary

    def _local_summary(self, status: str) -> dict[str, Any]:
        """What this process knows of the job: its counts, not its energy."""
        units: dict[str, float] = {}
        models: dict[str, dict[str, float]] = {}
        with self._lock:
            counted = dict(self._counted)
        for key, amount in counted.items():
            unit, model = split_key(key) or (key, None)
            if model is not None:
                per_model = models.setdefault(model, {})
                per_model[unit] = per_model.get(unit, 0.0) + amount
            if unit != BUSY:  # a model's units are the job's too, as the registry adds them
                units[unit] = units.get(unit, 0.0) + amount
        return {"id": self._id, "name": self.name, "kind": self.kind,
                "labels": dict(self.labels), "status": status, "units": units,
                "models": models, "final": False, "mode": str(self._mode),
                "mode_reason": self._mode_reason}

    def _send_rest(self) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        for attempt in range(EXIT_SEND_ATTEMPTS):
            if self._flush():
                return
            if attempt + 1 < EXIT_SEND_ATTEMPTS:
                time.sleep(0.2 * (attempt + 1))
        warn_once(("unsent", self._id),
                  f"job {self._id}: could not send counts {self._pending} before exit")

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            try:
                self._flush()
            except Exception as exc:  # the thread must not die with a traceback
                _internal("sending counts", exc)

    def _flush(self) -> bool:
        """Send the tallies; what fails goes back into them. True when nothing is left."""
        with self._lock:
            pending, self._pending = self._pending, {}
        failed: dict[str, float] = {}
        for unit, amount in pending.items():
            try:
                self._client.count(self.id, unit, amount)
            except AgentUnavailable as exc:
                failed[unit] = amount
                self._note_failure(exc)
            except AgentError as exc:
                if exc.status not in _RETRYABLE and 400 <= exc.status < 500:
                    warn_once(("refused count", self._id, exc.message),
                              f"job {self._id}: the agent refused {amount:g} {unit}, "
                              f"dropped: {exc.message}")
                    continue
                failed[unit] = amount
                self._note_failure(exc)
                if exc.status == 404 and self._joined is None:
                    self._register_again()
        if failed:
            with self._lock:
                for unit, amount in failed.items():
                    self._pending[unit] = self._pending.get(unit, 0.0) + amount
            return False
        if self._failing and pending:
            log.info("joulestat: job %s: counts reach the agent again", self._id)
            self._failing = False
        return True

    def _note_failure(self, exc: Exception) -> None:
        # One warning per outage, not one a second.
        (log.debug if self._failing else log.warning)(
            "%s", redact_text(f"joulestat: job {self._id}: sending counts failed, will "
                              f"retry: {exc}"))
        self._failing = True

    def _register_again(self) -> None:
        try:
            self._client.register(self.name, self.kind, self._pids, self.labels, self.id,
                                  origin="client", agent_labels=self._agent_labels or None)
        except (AgentUnavailable, AgentError) as exc:
            log.debug("joulestat: job %s: registering again failed: %s", self._id, exc)

    def __enter__(self) -> TrackedJob:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.end()


def track(
    name: str,
    kind: str = "training",
    labels: Mapping[str, str] | None = None,
    job_id: str | None = None,
    agent_url: str | None = None,
    *,
    flush_interval_s: float = FLUSH_INTERVAL_S,
    serving_metrics: str | None = None,
) -> TrackedJob:
    """A job for ``with``: registered with this process's pid on enter, ended on exit.

    The agent is ``agent_url``, else ``$JOULESTAT_AGENT_URL``, else the local default;
    the token comes from ``$JOULESTAT_API_TOKEN``. With no agent answering, the job is
    measured in this process; where that fails too, it is not measured. ``job.mode``
    says which (:class:`Mode`), ``job.mode_reason`` why. Inside another job (an open
    track() of this process, or ``joulestat run``) it joins that job instead;
    ``job.joined`` says so. Never raises: the block always runs, and whatever fails is
    said once on the ``joulestat`` logger. ``serving_metrics``: the Prometheus endpoint
    of a serving engine (vLLM, TGI, SGLang) this job serves through; the agent reads its
    token and request counters and latency histograms into the job every tick.
    """
    return TrackedJob(name, kind, labels, job_id, agent_url, flush_interval_s=flush_interval_s,
                      serving_metrics=serving_metrics)


def current_job() -> TrackedJob | None:
    """The innermost open track() of this process, else the job it runs in, else None."""
    global _implicit
    try:
        with _open_lock:
            if _open_jobs:
                return _open_jobs[-1]
            if _implicit is not None and _implicit._active:
                return _implicit
            if enclosing_job() is None:
                return None
            job = TrackedJob("enclosing", "other")
            # A join that failed is not tried again: a loop must not wait on it each step.
            if not job._join_enclosing("counts outside a track() are not counted"):
                return None
            job._active = True
            _implicit = job
        atexit.register(job.end)
        return job
    except Exception as exc:
        _internal("current_job()", exc)
        return None


def count(unit: str, n: float = 1, *, model: str | None = None,
          busy_s: float | None = None) -> None:
    """Add ``n`` units of work (``model``, ``busy_s``: :meth:`TrackedJob.count`) to the
    job this code runs in (:func:`current_job`). Under ``joulestat run`` no ``track()``
    is needed; outside any job the count is dropped, and that is said once."""
    try:
        job = current_job()
        if job is None:
            warn_once(("count", "outside a job"),
                      f"{_call('count', unit, n, model, busy_s)} outside a job: "
                      f"{NOT_COUNTED}; run the program under `joulestat run` or count "
                      "inside `with track(...)`")
            return
        job.count(unit, n, model=model, busy_s=busy_s)
    except Exception as exc:
        _internal("count()", exc)


def serving(model: str, unit: str = "inference") -> AbstractContextManager[Serving]:
    """:meth:`TrackedJob.serving` of the job this code runs in; outside a job the block
    runs and records nothing, said once."""
    job = current_job()
    if job is None:
        warn_once(("serving", "outside a job"),
                  f"serving({shown(model)}) outside a job: its busy time is not counted; "
                  "run the program under `joulestat run` or serve inside `with track(...)`")
    return serving_block(job, model, unit)


# -- Arguments: a bad one is said once and replaced, never raised ---------------------

def _checked(argument: str, value: Any, validate: Callable[[Any], Any], fallback: Any,
             consequence: str | None = None) -> Any:
    try:
        return validate(value)
    except JobError as exc:
        bad_argument(f"track({argument}={shown(value)})", exc,
                     consequence or f"the job is tracked with {argument}={fallback!r}")
        return fallback


def _checked_labels(labels: Any) -> dict[str, str]:
    """The labels, else those of them that pass (at most :data:`MAX_LABELS`)."""
    try:
        return validate_labels(labels)
    except JobError as exc:
        error = exc
    kept: dict[str, str] = {}
    refused: dict[str, str] = {}
    for key, value in (labels.items() if isinstance(labels, Mapping) else ()):
        try:
            entry = validate_labels({key: value})
        except JobError:
            refused[str(key)[:40]] = str(value)[:40]
            continue
        if len(kept) < MAX_LABELS:
            kept.update(entry)
    # The refused entries shown redacted: a label may hold a credential.
    value = shown(redact_labels(refused)) if refused else shown(labels)
    bad_argument(f"track(labels={value})", error,
                 f"the job is tracked with {len(kept)} label(s) that pass: "
                 f"{', '.join(sorted(kept)) or 'none'}")
    return kept


def _positive(argument: str, value: Any, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and value > 0:
        return float(value)
    bad_argument(f"track({argument}={shown(value)})",
                 JobError(f"{argument}: expected seconds > 0, got {shown(value)}"),
                 f"using {default:g} s")
    return default


def _agent_client(agent_url: Any, token: str | None, timeout_s: float
                  ) -> tuple[str, AgentClient]:
    """The agent's URL and a client for it; a URL that cannot be one is said once, and
    the default (this node's agent) is asked instead."""
    url = agent_url or agent_url_from_env()
    try:
        return url, AgentClient(url, token, timeout_s)
    except Exception as exc:
        source = (f"track(agent_url={shown(agent_url)})" if agent_url
                  else f"{ENV_AGENT_URL}={shown(url)}")
        warn_once(("argument", "agent_url", source),
                  f"{source}: {exc}; looking for the agent at {DEFAULT_AGENT_URL}")
        return DEFAULT_AGENT_URL, AgentClient(DEFAULT_AGENT_URL, token, timeout_s)


def _call(name: str, unit: Any, n: Any, model: Any, busy_s: Any) -> str:
    """The call as the user wrote it, for a warning that names the argument's value."""
    extra = (f", model={shown(model)}" if model is not None else "") + (
        f", busy_s={shown(busy_s)}" if busy_s is not None else "")
    return f"{name}({shown(unit)}, {shown(n)}{extra})"


def _reason(exc: AgentUnavailable) -> str:
    """An AgentUnavailable's reason without the request it names ("POST URL: ...")."""
    return str(exc).split(": ", 1)[-1]


def _failure(exc: Exception) -> str:
    """What a failed in-process measurement says: a setting's message as it is, any
    other exception with its type (a missing dependency, a permission refused)."""
    from joulestat.core.errors import ConfigError

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ConfigError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _internal(where: str, exc: Exception) -> None:
    """A bug of ours: said once, and the user's program goes on."""
    warn_once(("internal", where, type(exc).__name__),
              f"{where} failed inside joulestat ({exc!r}); the program goes on")
