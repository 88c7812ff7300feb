"""In-process client: ``with track("bert-large") as job: ... job.count("sample", 32)``.

A training loop calls ``count`` every step, so counting only adds to a local tally;
a background thread sends the tallies to the agent about once a second, and whatever
is still unsent goes at exit, just before the job is ended (also when the block
raises). A send that fails stays in the tally for the next one, so a hiccup of the
agent loses nothing. When no agent answers at registration the job is measured
in-process instead (embedded mode); an agent that answers with an error is not
bypassed, because measuring twice or not at all would be worse than saying so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from agent.config import OPTIONS
from agent.jobs.http_client import AgentClient, AgentError, AgentUnavailable
from agent.jobs.registry import (
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
    validate_units,
)

log = logging.getLogger(__name__)

ENV_AGENT_URL = "JOULESTAT_AGENT_URL"
ENV_TOKEN = OPTIONS["api_token"].env
DEFAULT_AGENT_URL: str = OPTIONS["agent"].default
FLUSH_INTERVAL_S = 1.0
EXIT_SEND_ATTEMPTS = 3
_RETRYABLE = (404, 408, 429)  # 404: the agent restarted without the job; register again


def agent_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """JOULESTAT_AGENT_URL, else the agent's own setting JOULESTAT_AGENT, else the default."""
    env = os.environ if env is None else env
    return env.get(ENV_AGENT_URL) or env.get(OPTIONS["agent"].env) or DEFAULT_AGENT_URL


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

    def start(self) -> TrackedJob:
        pid = os.getpid()
        try:
            job = self._client.register(self.name, self.kind, [pid], self.labels,
                                        self.requested_id, origin="client")
        except AgentUnavailable as exc:
            log.info("no joulestat agent answered (%s); measuring in this process", exc)
            from agent.jobs.embedded import EmbeddedJob

            self._embedded = EmbeddedJob(self.name, self.kind, dict(self.labels), {pid},
                                         self.requested_id)
            self._embedded.start()
            self._id = str(self._embedded.id)
        else:
            self._id = str(job["id"])
            self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                             name=f"joulestat-client-{self._id[:8]}")
            self._flusher.start()
        self._active = True
        return self

    def count(self, unit: str, count: float = 1) -> None:
        """Add ``count`` units of work (samples, tokens, ...); cheap, never blocks on I/O."""
        unit, amount = validate_units(unit, count)
        if not self._active:
            raise RuntimeError(f"job {self.name!r} is not running; count inside `with track()`")
        if self._embedded is not None:
            self._embedded.count(unit, amount)
            return
        with self._lock:
            self._pending[unit] = self._pending.get(unit, 0.0) + amount

    def end(self) -> dict[str, Any] | None:
        """Send what is left, end the job, return its summary; never raises."""
        if not self._active:
            return self.summary
        self._active = False
        try:
            if self._embedded is not None:
                self.summary = self._embedded.end()
                return self.summary
            self._stop.set()
            if self._flusher is not None:
                self._flusher.join()
            for attempt in range(EXIT_SEND_ATTEMPTS):
                if self._flush():
                    break
                if attempt + 1 < EXIT_SEND_ATTEMPTS:
                    time.sleep(0.2 * (attempt + 1))
            else:
                log.error("joulestat: job %s: could not send counts %s before exit",
                          self._id, self._pending)
            self.summary = self._client.end(self.id)
        except (AgentUnavailable, AgentError) as exc:
            log.warning("joulestat: job %s: could not end it at the agent: %s", self._id, exc)
        except Exception:
            log.exception("joulestat: job %s: ending it failed", self._id)
        return self.summary

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
                if exc.status == 404:
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
    measured in this process; ``job.embedded`` says which happened.
    """
    return TrackedJob(name, kind, labels, job_id, agent_url, flush_interval_s=flush_interval_s)
