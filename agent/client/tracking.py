"""In-process client: ``with track("bert-large") as job: ... job.count("sample", 32)``.

A training loop calls ``count`` every step, so counting only adds to a local tally;
a background thread sends the tallies to the agent about once a second, and whatever
is still unsent goes at exit, just before the job is ended (also when the block
raises). A send that fails stays in the tally for the next one, so a hiccup of the
agent loses nothing. When no agent answers at registration the job is measured
in-process instead (embedded mode); an agent that answers with an error is not
bypassed, because measuring twice or not at all would be worse than saying so.

A process belongs to one job at a time, so ``track()`` joins rather than registers
when it is already inside one: inside another active ``track()`` of this process it
adds to that job, and in a program started by ``joulestat run`` (or by a process with
an active ``track()``), whose environment names the job (``JOULESTAT_JOB_ID``, see
:mod:`joulestat.client.context`), it adds to that job through the API that measures it. A
joined ``track()`` never ends the job it joined. Module-level :func:`count` adds to the
innermost job of the process the same way, so ``joulestat run -- python train.py``
with ``count("sample", 32)`` in the loop is all a script needs. A server of several
models says which did what: ``with job.serving("model-a"):`` (:mod:`joulestat.client.serving`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
from joulestat.attribution.validation import (
    count_keys,
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
)
from joulestat.client.context import (
    DEFAULT_AGENT_URL,
    ENV_AGENT_URL,
    ENV_JOB_ID,
    ENV_TOKEN,
    EnclosingJob,
    agent_url_from_env,
    child_env,
    enclosing_job,
    fallback_warning,
)
from joulestat.client.serving import Serving, serving_block

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_AGENT_URL", "ENV_AGENT_URL", "ENV_JOB_ID", "ENV_TOKEN", "Serving",
           "TrackedJob", "agent_url_from_env", "count", "current_job", "serving", "track"]

FLUSH_INTERVAL_S = 1.0
EXIT_SEND_ATTEMPTS = 3
JOIN_WAIT_S = 3.0  # `joulestat run` registers its job just after starting the program
_RETRYABLE = (404, 408, 429)  # 404: the agent restarted without the job; register again

# This process's open jobs, innermost last: a track() opened while one is open joins it.
_open_jobs: list[TrackedJob] = []
_open_lock = threading.Lock()
_implicit: TrackedJob | None = None  # count() outside any track(): the enclosing job


class TrackedJob:
    """One job of this process; use it through :func:`track`."""

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
        timeout_s: float = 2.0,
    ) -> None:
        # Checked here so a bad name fails the same way whether an agent runs or not.
        self.name, self.kind = validate_name(name), validate_kind(kind)
        self.labels = validate_labels(labels)
        self.requested_id = validate_job_id(job_id) if job_id is not None else None
        self.agent_url = agent_url or agent_url_from_env()
        token = token if token is not None else os.environ.get(ENV_TOKEN) or None
        self._client = AgentClient(self.agent_url, token, timeout_s)
        self._flush_interval_s = flush_interval_s
        self._id: str | None = None
        self._embedded: Any = None
        self._pending: dict[str, float] = {}
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
        if self._id is None:
            raise RuntimeError("the job has no id until it is started")
        return self._id

    @property
    def embedded(self) -> bool:
        """True when no agent answered and the job is measured in this process."""
        return self._embedded is not None

    @property
    def joined(self) -> bool:
        """True when this track() adds to a job it is inside of, rather than its own."""
        return self._parent is not None or self._joined is not None

    def start(self) -> TrackedJob:
        with _open_lock:
            parent = _open_jobs[-1] if _open_jobs else None
        if parent is not None and self.requested_id in (None, parent.id):
            self._parent, self._id = parent, parent.id
            log.info("joulestat: track(%r) joins job %s (%r), already open in this process",
                     self.name, parent.id, parent.name)
        elif not self._join_enclosing():
            self._start_own()
        with _open_lock:
            _open_jobs.append(self)
        self._active = True
        return self

    def _join_enclosing(self) -> bool:
        """Join the job our environment names (we run under `joulestat run`)."""
        enclosing = enclosing_job()
        if enclosing is None or self.requested_id not in (None, enclosing.job_id):
            return False
        client = AgentClient(enclosing.agent_url, enclosing.token, self._client.timeout_s)
        deadline = time.monotonic() + JOIN_WAIT_S
        while True:
            try:
                client.get(enclosing.job_id)
                break
            except AgentError as exc:
                if exc.status != 404 or time.monotonic() >= deadline:
                    log.warning("joulestat: cannot join job %s named by %s (%s); tracking "
                                "%r as a job of its own", enclosing.job_id, ENV_JOB_ID, exc,
                                self.name)
                    return False
                time.sleep(0.05)
            except AgentUnavailable as exc:
                log.warning("joulestat: the API of job %s (%s) does not answer (%s); "
                            "tracking %r as a job of its own", enclosing.job_id,
                            enclosing.agent_url, exc, self.name)
                return False
        self._client, self._joined, self._id = client, enclosing, enclosing.job_id
        self.agent_url = enclosing.agent_url
        log.info("joulestat: track(%r) joins job %s, which this program runs in",
                 self.name, enclosing.job_id)
        self._start_flusher()
        return True

    def _start_own(self) -> None:
        pid = os.getpid()
        try:
            job = self._client.register(self.name, self.kind, [pid], self.labels,
                                        self.requested_id, origin="client")
        except AgentUnavailable as exc:
            warning = fallback_warning(self.agent_url, self._client.token, forced=False)
            if warning:
                log.warning("joulestat: %s", warning)
            from joulestat.runtime.embedded import EmbeddedJob

            self._embedded = EmbeddedJob(self.name, self.kind, dict(self.labels), {pid},
                                         self.requested_id,
                                         reason=f"no joulestat agent answered ({exc})")
            self._embedded.start()
            self._id = str(self._embedded.id)
            self._export(getattr(self._embedded, "api_url", None),
                         getattr(self._embedded, "api_token", None))
        else:
            self._id = str(job["id"])
            self._start_flusher()
            self._export(self.agent_url, self._client.token)

    def _start_flusher(self) -> None:
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name=f"joulestat-client-{self.id[:8]}")
        self._flusher.start()

    def _export(self, api_url: str | None, token: str | None) -> None:
        """Name this job in the environment, so programs it starts join it."""
        if api_url is None:
            return
        for key, value in child_env(self.id, api_url, token).items():
            self._saved_env[key] = os.environ.get(key)
            os.environ[key] = value
        if not token and ENV_TOKEN in os.environ:
            self._saved_env[ENV_TOKEN] = os.environ.pop(ENV_TOKEN)

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def count(self, unit: str, count: float = 1, *, model: str | None = None,
              busy_s: float | None = None) -> None:
        """Add ``count`` units of work (samples, tokens, ...); cheap, never blocks on I/O.
        ``model``: which model did them, ``busy_s``: how long it kept the process busy
        (the job's energy is split among its models by busy time)."""
        keys = count_keys(unit, count, model, busy_s)
        if not self._active:
            raise RuntimeError(f"job {self.name!r} is not running; count inside `with track()`")
        for key, amount in keys:
            self._add(key, amount)

    def serving(self, model: str, unit: str = "inference") -> AbstractContextManager[Serving]:
        """``with job.serving("model-a") as s: ... s.count(n)``: the block's wall time is
        ``model``'s busy time, and ``s.count(n)`` counts ``n`` ``unit`` for it."""
        return serving_block(self, model, unit)

    def _add(self, key: str, amount: float) -> None:
        """Add to a unit key already checked (:func:`count_keys`)."""
        if self._parent is not None:
            self._parent._add(key, amount)
        elif self._embedded is not None:
            self._embedded.count(key, amount)
        else:
            with self._lock:
                self._pending[key] = self._pending.get(key, 0.0) + amount

    @property
    def active(self) -> bool:  # between start and end: counts are taken
        return self._active

    def end(self) -> dict[str, Any] | None:
        """Send what is left, end the job (unless joined), return its summary; never raises.

        A job of its own is ended and, where the agent measures it, its summary is the
        final one (its last tick attributed and stored). A joined track() only sends its
        counts: its summary is None, the job it joined goes on.
        """
        if not self._active:
            return self.summary
        self._active = False
        with _open_lock:
            if self in _open_jobs:
                _open_jobs.remove(self)
        self._restore_env()
        try:
            if self._parent is not None:
                return None
            if self._embedded is not None:
                self.summary = self._embedded.end()
                return self.summary
            self._send_rest()
            if self._joined is not None:
                return None
            self.summary = self._client.end(self.id)
            timeout_s = self._client.final_timeout_s()
            if timeout_s is not None:
                self.summary = self._client.wait_final(self.id, timeout_s)
        except (AgentUnavailable, AgentError) as exc:
            log.warning("joulestat: job %s: could not end it at the agent: %s", self._id, exc)
        except Exception:
            log.exception("joulestat: job %s: ending it failed", self._id)
        return self.summary

    def _send_rest(self) -> None:
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        for attempt in range(EXIT_SEND_ATTEMPTS):
            if self._flush():
                return
            if attempt + 1 < EXIT_SEND_ATTEMPTS:
                time.sleep(0.2 * (attempt + 1))
        log.error("joulestat: job %s: could not send counts %s before exit",
                  self._id, self._pending)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            self._flush()

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
                    log.error("joulestat: job %s: agent refused %g %s, dropped: %s",
                              self._id, amount, unit, exc.message)
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
            "joulestat: job %s: sending counts failed, will retry: %s", self._id, exc
        )
        self._failing = True

    def _register_again(self) -> None:
        try:
            self._client.register(self.name, self.kind, [os.getpid()], self.labels, self.id,
                                  origin="client")
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
) -> TrackedJob:
    """A job for ``with``: registered with this process's pid on enter, ended on exit.

    The agent is ``agent_url``, else ``$JOULESTAT_AGENT_URL``, else the local default;
    the token comes from ``$JOULESTAT_API_TOKEN``. With no agent answering, the job is
    measured in this process; ``job.embedded`` says which happened. Inside another
    job (an open track() of this process, or ``joulestat run``) it joins that job
    instead; ``job.joined`` says so.
    """
    return TrackedJob(name, kind, labels, job_id, agent_url, flush_interval_s=flush_interval_s)


def current_job() -> TrackedJob | None:
    """The innermost open track() of this process, else the job it runs in, else None."""
    global _implicit
    with _open_lock:
        if _open_jobs:
            return _open_jobs[-1]
        if _implicit is not None and _implicit._active:
            return _implicit
        if enclosing_job() is None:
            return None
        job = TrackedJob("enclosing", "other")
        if not job._join_enclosing():
            return None
        job._active = True
        _implicit = job
    atexit.register(job.end)
    return job


def count(unit: str, n: float = 1, *, model: str | None = None,
          busy_s: float | None = None) -> None:
    """Add ``n`` units of work (``model``, ``busy_s``: :meth:`TrackedJob.count`) to the
    job this code runs in (:func:`current_job`). Under ``joulestat run`` no ``track()``
    is needed; outside any job this raises: a count with no job would be lost unsaid."""
    _job_here("count").count(unit, n, model=model, busy_s=busy_s)


def serving(model: str, unit: str = "inference") -> AbstractContextManager[Serving]:
    """:meth:`TrackedJob.serving` of the job this code runs in; raises outside a job."""
    return _job_here("serving").serving(model, unit)


def _job_here(what: str) -> TrackedJob:
    job = current_job()
    if job is None:
        raise RuntimeError(f"joulestat.{what}() outside a job: run the program under "
                           "`joulestat run` or call it inside `with track(...)`")
    return job
