"""A small client for the agent's job API, for ``joulestat run``/``jobs`` and ``track()``.

Its one job beyond HTTP is to keep two failures apart: :class:`AgentUnavailable` means
nothing answered (refused, timed out, not HTTP), so a caller may fall back to measuring
in-process; :class:`AgentError` means an agent answered and said no, which a fallback
would only hide. Stdlib ``urllib`` with proxies and redirects off: the agent is local,
and a proxy or a redirect would send the bearer token somewhere else.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_ERROR_BODY = 64 * 1024
# Answers that mean "the agent is restarting or busy, ask again", not "no": a restart
# drops connections (refused, reset) and an overloaded or starting API says 503 or 429.
RETRY_STATUSES = frozenset({429, 503})


class AgentUnavailable(RuntimeError):
    """No agent answered at the URL: connection refused, timed out, or reset."""


class AgentError(RuntimeError):
    """The agent answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"agent answered {status}: {message}")
        self.status, self.message = status, message


def _unknown_field(exc: AgentError, name: str) -> bool:
    """Whether the agent refused a request for holding a field it does not know."""
    return exc.status == 400 and "unknown field" in exc.message and name in exc.message


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx becomes an HTTPError, hence an AgentError


@dataclass(frozen=True, slots=True)
class AgentAddress:
    """Where a client finds the node agent's job API, from the options of the same
    names: its URL and the token it may require."""

    agent_url: str
    api_token: str | None


# The registrant's credential of one job (what its registration answered as
# ``job_token``), sent to end it, count into it or register it again.
JOB_TOKEN_HEADER = "X-Joulestat-Job-Token"


class AgentClient:
    """Calls to one agent; each call is one short-lived connection.

    It keeps the ``job_token`` of every job it registered (or was given with
    :meth:`remember`) and sends it with that job's counts, end and re-registration:
    the agent lets only the registrant do those (docs/jobs.md, "Who may do what")."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 2.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"agent URL: expected http://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.token = token or None
        self._auth = f"Bearer {token}".encode() if token else None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
        self._job_tokens: dict[str, str] = {}
        # job id -> the token of the job whose processes it took over (register's
        # ``holding``), sent again when it registers again (after an agent restart).
        self._holding: dict[str, str] = {}
        # Set once the agent refused ``agent_labels`` as an unknown field: an agent of a
        # joulestat from before them, still running after an upgrade of this one.
        self._no_agent_labels = False

    def remember(self, job_id: str, job_token: str | None) -> None:
        """Act as the registrant of ``job_id`` (its token came from elsewhere: the
        environment ``joulestat run`` gave, or embedded mode's own API)."""
        if job_token:
            self._job_tokens[job_id] = job_token

    def job_token(self, job_id: str) -> str | None:
        """The token this client holds for ``job_id``, if any."""
        return self._job_tokens.get(job_id)

    def register(
        self,
        name: str,
        kind: str,
        pids: Iterable[int] | None = None,
        labels: Mapping[str, str] | None = None,
        job_id: str | None = None,
        origin: str | None = None,
        holding: str | None = None,
        instance_type: str | None = None,
        agent_labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Register a job (or register ``job_id`` again); ``holding``: the token of the
        job that holds ``pids`` now, which lets this one take them over (and is sent
        again with this job's later registrations); ``instance_type``: what the job runs
        as, when not the node's own (the agent records it for the job); ``agent_labels``:
        what joulestat noted about how the job is measured (``cpu_source``), apart from
        its labels."""
        body: dict[str, Any] = {"name": name, "kind": kind}
        if pids is not None:
            body["pids"] = sorted(pids)
        if labels is not None:
            body["labels"] = dict(labels)
        if agent_labels and not self._no_agent_labels:
            body["agent_labels"] = dict(agent_labels)
        if job_id is not None:
            body["job_id"] = job_id
        if origin is not None:
            body["origin"] = origin
        if instance_type is not None:
            body["instance_type"] = instance_type
        if job_id is not None:
            holding = holding or self._holding.get(job_id)
        try:
            answer = self._object("POST", "/v1/jobs", body, job_id, holding)
        except AgentError as exc:
            if "agent_labels" not in body or not _unknown_field(exc, "agent_labels"):
                raise
            # Refused whole (400), so nothing was registered: register without them
            # rather than not measure the job at all.
            self._no_agent_labels = True
            log.warning("the agent at %s predates agent labels (it refused %s): the job is "
                        "registered without them; restart the agent to run this joulestat's "
                        "version", self.base_url, ", ".join(sorted(body["agent_labels"])))
            del body["agent_labels"]
            answer = self._object("POST", "/v1/jobs", body, job_id, holding)
        if isinstance(answer.get("id"), str) and isinstance(answer.get("job_token"), str):
            self._job_tokens[answer["id"]] = answer["job_token"]
            if holding:
                self._holding[answer["id"]] = holding
        return answer

    def count(self, job_id: str, unit: str, count: float) -> dict[str, Any]:
        return self._object("POST", f"{_job_path(job_id)}/units", {"unit": unit, "count": count},
                            job_id)

    def end(self, job_id: str, cpu_s: float | None = None, ended_at: float | None = None
            ) -> dict[str, Any]:
        """End the job; ``ended_at`` (epoch seconds) says when, for an end sent late."""
        body: dict[str, Any] = {} if cpu_s is None else {"cpu_s": cpu_s}
        if ended_at is not None:
            body["ended_at"] = ended_at
        return self._object("POST", f"{_job_path(job_id)}/end", body, job_id)

    def get(self, job_id: str) -> dict[str, Any]:
        return self._object("GET", _job_path(job_id))

    def figures(self, job_id: str) -> dict[str, Any]:
        """The job's figures so far (energy, CO2e, cost, per unit, how measured), from the
        agent's store as ``joulestat report`` gives them now
        (:func:`joulestat.reports.figures.figures_of`)."""
        return self._object("GET", f"{_job_path(job_id)}/figures")

    def report(self, job_id: str) -> dict[str, Any]:
        """The job's report (``joulestat report --format json``), built by the agent now."""
        return self._object("GET", f"{_job_path(job_id)}/report")

    def wait_final(self, job_id: str, timeout_s: float, poll_s: float = 0.05
                   ) -> dict[str, Any]:
        """The ended job once its last tick is attributed and stored (``"final": true``),
        or as it stands after ``timeout_s`` (``final`` still false) if the agent is slow
        or its store is away."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get(job_id)
            if job.get("final") or time.monotonic() >= deadline:
                return job
            time.sleep(poll_s)

    def final_timeout_s(self) -> float | None:
        """How long a job's final tick may take at this API: two of its ticks and a
        flush; None when it measures nothing (no ``interval_s`` in its health answer),
        so there is no final tick to wait for."""
        try:
            interval_s = self.health().get("interval_s")
            return None if interval_s is None else 2 * float(interval_s) + 5.0
        except (AgentError, AgentUnavailable, TypeError, ValueError):
            return None

    def jobs(self, running: bool = False) -> list[dict[str, Any]]:
        answer = self._object("GET", "/v1/jobs?running=1" if running else "/v1/jobs")
        jobs = answer.get("jobs")
        if not isinstance(jobs, list):
            raise AgentError(200, "answer has no list of jobs")
        return jobs

    def health(self) -> dict[str, Any]:
        return self._object("GET", "/v1/health")

    def _object(self, method: str, path: str, body: Any = None, job_id: str | None = None,
                holding: str | None = None) -> dict[str, Any]:
        answer = self._request(method, path, body, job_id, holding)
        if not isinstance(answer, dict):
            raise AgentError(200, f"expected a JSON object, got {type(answer).__name__}")
        return answer

    def _request(self, method: str, path: str, body: Any = None, job_id: str | None = None,
                 holding: str | None = None) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._auth is not None:
            request.add_header("Authorization", self._auth)  # type: ignore[arg-type]
        own = None if job_id is None else self._job_tokens.get(job_id)
        tokens = [token for token in (own, holding) if token]
        if tokens:
            request.add_header(JOB_TOKEN_HEADER, ", ".join(tokens))
        url = f"{method} {self.base_url}{path}"
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            try:
                message = _error_message(exc)
            finally:
                exc.close()
            raise AgentError(exc.code, message) from None
        except urllib.error.URLError as exc:
            raise AgentUnavailable(f"{url}: {exc.reason}") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise AgentUnavailable(f"{url}: {exc!r}") from exc
        try:
            return json.loads(raw)
        except ValueError:
            raise AgentError(status, f"{url}: the answer is not JSON") from None


def _job_path(job_id: str) -> str:
    return "/v1/jobs/" + quote(job_id, safe="")


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(MAX_ERROR_BODY)
    except (OSError, http.client.HTTPException):
        return exc.reason or "no message"
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        return answer["error"]
    text = raw.decode("utf-8", "replace").strip()[:200]
    return text or str(exc.reason)


def retrying(call: Callable[[], T], within_s: float, what: str, first_delay_s: float = 0.1,
             max_delay_s: float = 0.5, sleep: Callable[[float], object] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> T:
    """``call()``, asked again while the agent is away or restarting (nothing answers,
    or it answers 429/503), with backoff from ``first_delay_s`` doubling to
    ``max_delay_s``, for at most ``within_s``; then the last error is raised.

    For calls that are safe to repeat (ending a job, reading it): an agent restarted
    under a supervisor after ``kill -9`` is back within seconds, and what the caller
    had to say (a job's end) must not be lost in between. The delay stays short so the
    call lands soon after the agent's API is back, before its first tick. Says once, at
    WARNING, what it waits for."""
    deadline, delay_s, warned = clock() + within_s, first_delay_s, False
    while True:
        try:
            return call()
        except AgentError as exc:
            if exc.status not in RETRY_STATUSES or clock() >= deadline:
                raise
            reason = str(exc)
        except AgentUnavailable as exc:
            if clock() >= deadline:
                raise
            reason = str(exc)
        if not warned:
            log.warning("%s: the agent did not answer (%s); trying again for up to %.0f s",
                        what, reason, within_s)
            warned = True
        sleep(max(0.0, min(delay_s, deadline - clock())))
        delay_s = min(delay_s * 2, max_delay_s)
