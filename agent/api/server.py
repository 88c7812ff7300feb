"""The local HTTP API through which jobs become known to the agent: the server, and its
request handling (routing, validation, answers).

Anything on the node can reach this port, so every input is treated as hostile: bodies
are size-checked before they are read, every field is validated by the registry (the
same rules as every other way in), and every refusal is a 4xx with a JSON message
naming what is wrong. Without a token the API only binds to loopback and refuses
requests that carry a browser ``Origin`` or a non-loopback ``Host`` (a web page the
user visits must not be able to register or end jobs, nor read them through DNS
rebinding). Connections go through :mod:`joulestat.core.http_gate`, like the metrics port: an
idle or slow connection holds a socket, never a thread nor an in-flight slot; each
client has ``request_timeout_s`` from accept to send its whole request; past
``max_in_flight`` complete requests waiting for or in a worker the gate answers 429;
past ``max_connections`` open the oldest silent one is closed. The handler runs in a
worker of the gate over a request already read whole, so it never waits on a client:
its ``rfile`` raises ``TimeoutError`` where the deadline passed.

Stdlib ``http.server`` handlers only, like the metrics endpoint; one request per
connection.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from joulestat.api.job_tokens import JOB_SECRET_BYTES, job_token
from joulestat.attribution.agent_labels import SERVING_METRICS, validate_serving_url
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core import jsonout
from joulestat.core.http_gate import GatedHandler, HttpGate, Limits, busy_response
from joulestat.core.redact import redact_labels, redact_text
from joulestat.core.validation import (
    JobError,
    JobNotFound,
    JobNotYours,
    check_claimable_pids,
    validate_end_time,
    validate_job_id,
    validate_pids,
)
from joulestat.host.peers import PeerLookup
from joulestat.host.serving_address import AddressRefused, ServingAddressRule

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.core.records import JobRecord
    from joulestat.reports.figures import FiguresFromStore

log = logging.getLogger(__name__)


# -- Request handling for the job API: routing, validation, answers --------------------

MAX_BODY_BYTES = 1 << 20
MAX_IN_FLIGHT = 64  # complete requests queued for or in a worker; past it: 429
MAX_CONNECTIONS = 512  # open at once; past it the oldest silent connection is closed
WORKERS = 4
REQUEST_TIMEOUT_S = 5.0  # from accept to the whole request
LINGER_S = 1.0  # after an early answer, read what the client still sends, so it sees it
# A request naming a job not known while the store has not answered since start-up:
# when to ask again (the agent probes its store every 2 s).
STORE_RETRY_AFTER_S = 2
API_ORIGINS = ("api", "run", "client")  # the origins a caller may claim; discovery's are ours
# field -> required
# agent_labels: what joulestat itself noted (``cpu_source`` from `joulestat run`), kept
# apart from the user's labels (joulestat.attribution.agent_labels).
# serving_metrics: the serving engine's Prometheus URL the agent reads the job's tokens
# and requests from (kept as the agent label of that name: joulestat.runtime.serving).
JOB_FIELDS = {"name": True, "kind": True, "pids": False, "labels": False, "job_id": False,
              "origin": False, "instance_type": False,
              "agent_labels": False, "serving_metrics": False}
UNIT_FIELDS = {"unit": True, "count": True}
# cpu_s: the wrapper's total CPU seconds of the job, from wait4(); ended_at: when its
# command exited (epoch s), so an end that arrives late (an agent restart) keeps its time.
END_FIELDS = {"cpu_s": False, "ended_at": False}
_CONTENT_LENGTH_RE = re.compile(r"[0-9]{1,18}")
_BUSY_BODY = b'{"error":"busy: too many requests in flight, retry shortly"}\n'
_BUSY_RESPONSE = busy_response("application/json", _BUSY_BODY)
# The registrant's credential for one job: given in the 201 of its registration
# (``job_token``), sent back in this header to end it, count into it or re-register it.
# Apart from ``Authorization``, which carries the node-wide --api-token.
JOB_TOKEN_HEADER = "X-Joulestat-Job-Token"


class ThisProcess(Enum):
    """:class:`ApiServer`'s ``agent_pid`` default: the pid of the process serving it."""

    PID = "this process"


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 or ::1 literals; other names may resolve anywhere."""
    host = host.strip().strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Anything on a reachable address can register jobs, so that needs a token."""
    if not token and not is_loopback(host):
        raise ValueError(f"--api-host {host} is not loopback: set --api-token")


def _host_header_name(value: str) -> str:
    value = value.strip()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class _HttpError(Exception):
    def __init__(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, list(headers)


def _names(keys: Iterable[str]) -> str:
    shown = [repr(k[:40]) if len(k) > 40 else k for k in sorted(keys)]
    return ", ".join(shown[:10]) + (f" and {len(shown) - 10} more" if len(shown) > 10 else "")


def _known(registry: JobRegistry, job_id: str) -> bool:
    try:
        registry.get(job_id)
    except JobNotFound:
        return False
    return True


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _with_serving(data: Mapping[str, Any], rule: ServingAddressRule) -> Any:
    """The registration's agent labels, with its ``serving_metrics`` field among them,
    the URL (given either way) checked against ``rule``: the agent fetches it every
    tick and anyone reads what it counts, so it must be one the agent may fetch."""
    agent_labels = data.get("agent_labels")
    url = data.get("serving_metrics")
    field = "serving_metrics"
    if url is not None:
        validate_serving_url(url, field)
        if agent_labels is None or isinstance(agent_labels, Mapping):
            agent_labels = {**(agent_labels or {}), SERVING_METRICS: url}
    elif isinstance(agent_labels, Mapping) and isinstance(
            agent_labels.get(SERVING_METRICS), str):
        url, field = agent_labels[SERVING_METRICS], f"agent_labels.{SERVING_METRICS}"
        validate_serving_url(url, field)
    if url is not None:
        parts = urlsplit(url)
        assert parts.hostname is not None  # validate_serving_url said so
        try:
            rule.resolve(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        except AddressRefused as exc:
            raise JobError(f"{field}: {redact_text(url)}: {exc}") from None
    return agent_labels  # anything else wrong with it, the registry says


def _answer(job: Job) -> dict[str, Any]:
    """A job as the API answers it: labels through the one redaction (agent/core/redact.py),
    as in every other output, since anyone who can read the API is not necessarily
    who registered a job with a token or a password in a label."""
    return {**job.to_json(), "labels": redact_labels(job.labels),
            "agent_labels": redact_labels(job.agent_labels)}


class _Handler(GatedHandler):
    server: _Server  # joulestat.api.server._Server: registry, token digest, settings
    protocol_version = "HTTP/1.0"  # one request per connection

    def version_string(self) -> str:
        return "joulestat"

    def setup(self) -> None:
        super().setup()
        self.timeout = self.server.request_timeout_s  # also the send timeout of answers

    def _dispatch(self) -> None:
        headers: list[tuple[str, str]] = []
        try:
            self._authorize()
            handler, args, query = self._route()
            status, payload = handler(*args, **query)
        except _HttpError as exc:
            status, payload, headers = exc.status, {"error": exc.message}, exc.headers
        except JobNotFound as exc:
            status, payload = exc.status, {"error": str(exc)}
            if self._store_waiting():
                later = self._not_known_yet(str(exc))
                status, payload, headers = later.status, {"error": later.message}, later.headers
        except JobError as exc:
            status, payload = exc.status, {"error": str(exc)}
        except TimeoutError:
            status = HTTPStatus.REQUEST_TIMEOUT
            payload = {"error": f"request not received within {self.timeout:g} s"}
        except ConnectionError:
            raise
        except Exception:
            log.exception("job API: unexpected error on %s %s", self.command, self.path[:200])
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"}
        self._send_json(status, payload, headers)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _dispatch

    def _authorize(self) -> None:
        digest = self.server.token_digest
        if digest is None:
            if "Origin" in self.headers:
                raise _HttpError(403, "requests from web pages (with an Origin header) are "
                                      "refused; set --api-token to expose the API")
            host = self.headers.get("Host")
            if host is not None and not is_loopback(_host_header_name(host)):
                raise _HttpError(403, f"Host {host[:100]!r} is not a loopback name; use "
                                      "127.0.0.1 or localhost, or set --api-token")
            return
        challenge = [("WWW-Authenticate", 'Bearer realm="joulestat"')]
        header = self.headers.get("Authorization")
        if header is None:
            raise _HttpError(401, "missing Authorization: Bearer <token>", challenge)
        scheme, _, given = header.strip().partition(" ")
        given_digest = hashlib.sha256(given.strip().encode("latin-1", "replace")).digest()
        # Comparing digests keeps the time independent of the token's length and content.
        if not (hmac.compare_digest(given_digest, digest) and scheme.lower() == "bearer"):
            raise _HttpError(401, "invalid token", challenge)

    def _route(self) -> tuple[Callable[..., tuple[int, Any]], list[str], dict[str, Any]]:
        target = self.path if self.path.startswith("/") else urlsplit(self.path).path
        path, _, query = target.partition("?")
        path = path.partition("#")[0]
        parts = path.split("/")
        routes: dict[str, Callable[..., tuple[int, Any]]]
        args: list[str] = []
        if parts == ["", "v1", "health"]:
            routes = {"GET": self._health}
        elif parts == ["", "v1", "jobs"]:
            routes = {"GET": self._list, "POST": self._register}
        elif len(parts) in (4, 5) and parts[:3] == ["", "v1", "jobs"] and parts[3]:
            if len(parts) == 4:
                routes = {"GET": self._get}
            elif parts[4] in ("figures", "report"):
                routes = {"GET": self._figures if parts[4] == "figures" else self._report}
            elif parts[4] in ("units", "end"):
                routes = {"POST": self._units if parts[4] == "units" else self._end}
            else:
                raise _HttpError(404, f"no such path: {path[:200]}")
            try:
                args = [unquote(parts[3], errors="strict")]
            except UnicodeDecodeError:
                raise _HttpError(404, f"no job with id {parts[3][:200]!r}") from None
        else:
            raise _HttpError(404, f"no such path: {path[:200]}")
        handler = routes.get(self.command)
        if handler is None:
            allow = ", ".join(routes)
            raise _HttpError(405, f"{self.command} not allowed here; allowed: {allow}",
                             [("Allow", allow)])
        listing = parts == ["", "v1", "jobs"] and self.command == "GET"
        return handler, args, self._query(query, listing)

    def _query(self, query: str, listing: bool) -> dict[str, Any]:
        try:
            params = parse_qsl(query, keep_blank_values=True, max_num_fields=8)
        except ValueError:
            raise _HttpError(400, "query: too many parameters") from None
        unknown = {key for key, _ in params if not (listing and key == "running")}
        if unknown:
            raise _HttpError(400, f"query: unknown parameter(s) {_names(unknown)}")
        result: dict[str, Any] = {}
        for _, value in params:
            if value.lower() not in ("", "0", "1", "true", "false"):
                raise _HttpError(400, f"running: expected 1 or 0, got {value[:40]!r}")
            result["running"] = value.lower() in ("", "1", "true")
        return result

    def _read_body(self, required: bool) -> bytes:
        if "Transfer-Encoding" in self.headers:
            raise _HttpError(411, "chunked bodies are not accepted; send Content-Length")
        values = {v.strip() for v in self.headers.get_all("Content-Length") or []}
        if not values:
            if required:
                raise _HttpError(411, "Content-Length required (a JSON object body)")
            return b""
        value = values.pop()
        if values or not _CONTENT_LENGTH_RE.fullmatch(value):
            raise _HttpError(400, "Content-Length: expected one non-negative integer")
        length = int(value)
        if length > MAX_BODY_BYTES:
            raise _HttpError(413, f"body: at most {MAX_BODY_BYTES} bytes, got {length}")
        body = self.rfile.read(length)
        if len(body) < length:
            raise _HttpError(400, f"body: connection closed after {len(body)} of {length} bytes")
        return body

    def _read_object(self, fields: Mapping[str, bool], required: bool = True) -> dict[str, Any]:
        raw = self._read_body(required)
        if not raw.strip():
            if required:
                raise _HttpError(400, "body: expected a JSON object, got an empty body")
            return {}
        try:
            data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except UnicodeDecodeError as exc:
            raise _HttpError(400, f"body: not UTF-8 (bad byte at {exc.start})") from None
        except RecursionError:
            raise _HttpError(400, "body: JSON nested too deeply") from None
        except ValueError as exc:
            raise _HttpError(400, f"body: not valid JSON: {str(exc)[:200]}") from None
        if not isinstance(data, dict):
            raise _HttpError(400, f"body: expected a JSON object, got {type(data).__name__}")
        unknown = set(data) - set(fields)
        if unknown:
            raise _HttpError(400, f"unknown field(s) {_names(unknown)}; expected "
                                  f"{', '.join(fields) or 'no fields'}")
        missing = [name for name, needed in fields.items() if needed and name not in data]
        if missing:
            raise _HttpError(400, f"{missing[0]}: required")
        return data

    def _health(self) -> tuple[int, Any]:
        answer = {"status": "ok", "node": self.server.node, "mode": self.server.mode,
                  "interval_s": self.server.interval_s}
        if self.server.store_state is not None:
            answer["store"] = self.server.store_state()
        return 200, answer

    def _store_waiting(self) -> bool:
        state = self.server.store_state
        return state is not None and state() == "waiting"

    def _not_known_yet(self, what: str) -> _HttpError:
        """A job this API does not know while its store has not answered since start-up
        may be one that was running before the start (they are restored once it
        answers): 503 and Retry-After, which clients retry, rather than a 404 that
        would make them register it again as a new job, or give up on ending it."""
        message = (f"{what} yet: the agent is waiting for its store, which holds the jobs "
                   "that were running before it started; try again")
        return _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, message,
                          [("Retry-After", str(STORE_RETRY_AFTER_S))])

    def _list(self, running: bool = False) -> tuple[int, Any]:
        jobs = sorted(self.server.registry.jobs(running_only=running), key=lambda j: j.started_s)
        return 200, {"jobs": [_answer(job) for job in jobs]}

    def _get(self, job_id: str) -> tuple[int, Any]:
        try:
            return 200, _answer(self.server.registry.get(job_id))
        except JobNotFound:
            return 200, _answer(self._ended_in_store(job_id))

    def _ended_in_store(self, job_id: str) -> Job:
        """A job this registry does not hold that ended on this node and is stored, so
        final (JobNotFound: none such, or no store to ask). A restarted agent puts back
        only the jobs it must go on measuring: one whose end and last tick were stored
        before the crash is answered from the store, not as unknown (a client waiting
        for it to be final would give up on a 404)."""
        found = self.server.ended_job
        if found is None or self._store_waiting():
            raise JobNotFound(f"no job with id {job_id!r}")
        job = found(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return job

    def _figures(self, job_id: str) -> tuple[int, Any]:
        return 200, self._from_store(job_id, lambda figures: figures.figures(job_id))

    def _report(self, job_id: str) -> tuple[int, Any]:
        return 200, self._from_store(job_id, lambda figures: figures.report(job_id))

    def _from_store(self, job_id: str, read: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """A job's figures or report, read from the store after the agent wrote what it
        buffers (:class:`joulestat.reports.figures.FiguresFromStore`): the numbers
        ``joulestat report`` gives now. Reading a job is open like ``GET /v1/jobs/{id}``;
        its labels come redacted, as in every report."""
        from sqlalchemy.exc import SQLAlchemyError

        from joulestat.store.jobs import UnknownJobError

        figures = self.server.figures
        if figures is None:
            raise _HttpError(HTTPStatus.NOT_IMPLEMENTED,
                             "this API has no store to build figures from")
        try:
            return read(figures)
        except UnknownJobError:
            if _known(self.server.registry, job_id):
                raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE,
                                 f"job {job_id!r} is not in the store yet; try again",
                                 [("Retry-After", str(STORE_RETRY_AFTER_S))]) from None
            raise JobNotFound(f"no job with id {job_id!r}") from None
        except SQLAlchemyError as exc:
            log.debug("job API: figures of %s: %s", job_id, exc)
            raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE,
                             "the store does not answer; try again",
                             [("Retry-After", str(STORE_RETRY_AFTER_S))]) from None

    def _given_tokens(self) -> list[str]:
        """The job tokens the request carries: ``X-Joulestat-Job-Token`` holds one, or
        several separated by commas (a job's own and that of the job whose processes it
        takes over, :meth:`_check_claim`)."""
        given = self.headers.get(JOB_TOKEN_HEADER)
        if given is None:
            return []
        return [part.strip() for part in given.split(",") if part.strip()]

    def _holds(self, job: Job) -> bool:
        """Whether the request carries ``job``'s token. Each given token is compared,
        as a digest, in constant time: the time taken says nothing of a token's length
        or content. A discovered job's token is never held: it has no registrant."""
        if job.origin.startswith("discovered"):
            return False
        expected = hashlib.sha256(self.server.job_token(job.id).encode()).digest()
        found = False
        for token in self._given_tokens():
            digest = hashlib.sha256(token.encode("latin-1", "replace")).digest()
            found |= hmac.compare_digest(digest, expected)
        return found

    def _owned(self, job: Job, doing: str) -> None:
        """Only the job's registrant (who holds its ``job_token``) may ``doing`` it:
        another tenant of the node must not end, count into or relabel it. A
        discovered job has no registrant: discovery alone keeps it."""
        if job.origin.startswith("discovered"):
            raise JobNotYours(f"job {job.id!r} was discovered ({job.origin}) and has no "
                              f"registrant: the API cannot {doing} it")
        if not self._given_tokens():
            raise JobNotYours(f"job {job.id!r}: {doing} it needs the job_token its "
                              f"registration answered, in the {JOB_TOKEN_HEADER} header")
        if not self._holds(job):
            raise JobNotYours(f"job {job.id!r}: {JOB_TOKEN_HEADER} is not this job's token")

    def _check_claim(self, pids: Any, job_id: str | None) -> None:
        """A registration may claim neither pid 1, nor the agent, nor a process of
        another running job unless it carries that job's token too (the registrant of
        both moving a process from one to the other, as a ``track(job_id=...)`` inside
        another job does); and a caller whose uid the API can see claims only its own
        processes unless it is root (agent/host/peers.py)."""
        registry = self.server.registry
        wanted = validate_pids(pids)
        holders = {pid: job for job in registry.jobs(running_only=True)
                   if job.id != job_id for pid in job.pids if pid in wanted}
        held = {job.id for job in holders.values() if self._holds(job)}
        taken = {pid: job.id for pid, job in holders.items() if job.id not in held}
        pid_set = check_claimable_pids(pids, self.server.agent_pid, taken)
        if not pid_set:
            return
        # A pid with no process yet is claimed by nobody: claiming it would take the
        # energy of whoever's process is given that pid later (issue 47: 10,001 future
        # pids registered by one user made another's `joulestat run` refused).
        missing = sorted(pid for pid in pid_set if not self.server.peers.exists(pid))
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise JobError(f"pids: no process {shown} on this node; a job claims running "
                           "processes only (register them once they have started)")
        caller = self.server.peers.caller_uid(self.client_address, self.server_sockname())
        if caller is None or caller == 0:
            return
        for pid in sorted(pid_set):
            owner = self.server.peers.process_uid(pid)
            if owner is not None and owner != caller:
                raise JobNotYours(f"pids: process {pid} belongs to uid {owner}, not to the "
                                  f"caller (uid {caller}); only root claims others' processes")

    def server_sockname(self) -> tuple[Any, ...]:
        return tuple(self.connection.getsockname())

    def _register(self) -> tuple[int, Any]:
        data = self._read_object(JOB_FIELDS)
        job_id = data.get("job_id")
        if job_id is not None:
            validate_job_id(job_id)
        origin = data.get("origin", "api")
        if origin not in API_ORIGINS:
            raise _HttpError(400, f"origin: expected one of {', '.join(API_ORIGINS)}")
        registry = self.server.registry
        # Checked before the lock: the serving URL's name may take a lookup to resolve.
        agent_labels = _with_serving(data, self.server.serving_rule)
        with self.server.register_lock:  # so exactly one of two racing registrations gets 201
            existed = job_id is not None and _known(registry, job_id)
            if job_id is not None and not existed and self._store_waiting():
                # It may be a job of before the start: registering it now would make it
                # anyone's (no token is asked of a new job) and restart its figures.
                raise self._not_known_yet(f"job {job_id!r} is not known")
            if existed:
                self._owned(registry.get(job_id), "re-register or relabel")
            self._check_claim(data.get("pids"), job_id)
            job = registry.register(data["name"], data["kind"], data.get("pids"),
                                    data.get("labels"), job_id, origin=origin,
                                    instance_type=data.get("instance_type"),
                                    agent_labels=agent_labels)
            answer = {**_answer(job), "job_token": self.server.job_token(job.id)}
            if self.server.persist is not None and (
                    not existed or data.get("pids") or data.get("labels")):
                # On disk before the answer, or the answer says it is not (yet): the
                # client registers again (same job_id) if the agent restarts without it.
                # A re-registration that adds processes is saved too: `joulestat run`
                # registers its command's pid so, and a crash before the next flush
                # lost it (issue 47).
                answer["durable"] = self._persist(job)
        return (200 if existed else 201), answer

    def _persist(self, job: Job) -> bool:
        """Write ``job`` to the store now (False: it could not). The store is handed a
        snapshot, taken under the registry's lock (a tick or discovery may change the
        job meanwhile), and the lock let go before the write."""
        assert self.server.persist is not None
        with self.server.registry.lock:
            record = job.record()
        return bool(self.server.persist(record))

    def _units(self, job_id: str) -> tuple[int, Any]:
        data = self._read_object(UNIT_FIELDS)
        self._owned(self.server.registry.get(job_id), "count into")
        return 200, _answer(self.server.registry.count(job_id, data["unit"], data["count"]))

    def _end(self, job_id: str) -> tuple[int, Any]:
        data = self._read_object(END_FIELDS, required=False)
        registry, at_s = self.server.registry, None
        if not _known(registry, job_id):
            # Ended and stored before a restart: ending it again changes nothing (as for
            # an ended job the registry holds), and its end is on disk.
            stored = self._ended_in_store(job_id)
            self._owned(stored, "end")
            return 200, {**_answer(stored), "durable": True}
        self._owned(registry.get(job_id), "end")
        if data.get("ended_at") is not None:
            at_s = validate_end_time(data["ended_at"], registry.get(job_id).started_s,
                                     time.time())
        answer = _answer(registry.end(job_id, at_s=at_s, cpu_s=data.get("cpu_s")))
        if self.server.persist is not None:
            # An acknowledged end is on disk before the answer (issue 47: an agent
            # killed 6 ms after answering 200 brought the job back running); "durable"
            # false: it could not be, and `joulestat run` sends the end again should
            # it see the job running after a restart.
            answer["durable"] = self._persist(registry.get(job_id))
        if self.server.final_tick is not None:
            try:
                self.server.final_tick()
            except Exception:  # the end stands; the next scheduled tick stores it
                log.exception("job API: the tick after job %s's end failed", job_id)
        return 200, answer

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, huge headers) as JSON 4xx too."""
        self.close_connection = True
        if code == HTTPStatus.NOT_IMPLEMENTED:  # a method with no do_*: 405 like the others
            self._dispatch()
            return
        code = HTTPStatus.BAD_REQUEST if code >= 500 else code  # 505: bad input all the same
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._send_json(code, {"error": message or phrase})

    def _send_json(
        self, status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        body = jsonout.dumps(payload).encode() + b"\n"
        self.request_version = "HTTP/1.0"  # even to HTTP/0.9 or garbage: headers say why
        self.connection.settimeout(self.timeout)
        self.send_response(status)
        for name, value in (("Content-Type", "application/json"),
                            ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
                            ("X-Content-Type-Options", "nosniff"), ("Connection", "close"),
                            *headers):
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("job API %s: " + format, self.client_address[0], *args)


# -- The local HTTP API through which jobs become known to the agent -------------------

class _Server:
    """What the handlers read as ``self.server``: the registry and the API's settings."""

    def __init__(self, api: ApiServer) -> None:
        self.registry, self.node = api.registry, api.node
        self.interval_s, self.mode = api.interval_s, api.mode
        self.persist = api.persist
        self.request_timeout_s = api.request_timeout_s
        self.token_digest = hashlib.sha256(api.token.encode()).digest() if api.token else None
        self.register_lock = threading.Lock()
        self.job_token, self.peers = api.job_token, api.peers
        self.agent_pid = api.agent_pid
        self.store_state = api.store_state
        self.figures, self.ended_job = api.figures, api.ended_job
        self.final_tick = api.final_tick
        self.serving_rule = api.serving_rule


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The job API's port, from the options of the same names: where it listens
    (``api_port`` 0: nowhere) and the bearer token it requires (None: none, loopback
    only)."""

    api_port: int
    api_host: str
    api_token: str | None


class ApiServer:
    """The job API on ``host:port``; ``start()`` serves it from daemon threads.

    Admission (connection cap, deadlines, the 429s) is the gate's; a refused client
    gets its 429 once its request has arrived, then the gate reads what it still sends
    for LINGER_S, so the close does not reset the answer away.
    """

    def __init__(
        self,
        registry: JobRegistry,
        host: str,
        port: int,
        token: str | None = None,
        node: str = "",
        *,
        interval_s: float | None = None,
        mode: str = "agent",
        persist: Callable[[JobRecord], bool] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        job_secret: bytes | None = None,
        procfs_root: Path | str = "/proc",
        agent_pid: int | None | ThisProcess = ThisProcess.PID,
        store_state: Callable[[], str] | None = None,
        figures: FiguresFromStore | None = None,
        serving_rule: ServingAddressRule | None = None,
        ended_job: Callable[[str], Job | None] | None = None,
        final_tick: Callable[[], object] | None = None,
    ) -> None:
        self.registry, self.host, self.requested_port = registry, host, port
        # Where a registration's serving_metrics URL may point (the agent fetches it):
        # by default this node only (joulestat.host.serving_address).
        self.serving_rule = serving_rule or ServingAddressRule(procfs_root=procfs_root)
        # The process no job may claim (the one measuring: a job holding it would be
        # charged the agent's own draw). By default the process serving this API, as
        # the daemon and embedded mode are; a test that embeds the API in the very
        # process its track() registers passes None (no such process) or another pid.
        self.agent_pid = os.getpid() if isinstance(agent_pid, ThisProcess) else agent_pid
        # What job tokens derive from (:func:`job_token`); the agent passes one kept on
        # disk (:func:`joulestat.api.job_tokens.load_job_secret`), so tokens outlive a restart.
        self._job_secret = job_secret or secrets.token_bytes(JOB_SECRET_BYTES)
        # Who is calling and whose processes they claim, from procfs (a parameter, so
        # tests give a fake one).
        self.peers = PeerLookup(Path(procfs_root))
        self.token, self.node = token or None, node
        # Told to clients in /v1/health: how long a job's final tick can take, and
        # whether this is the node's agent or a `joulestat run` measuring in-process.
        self.interval_s, self.mode = interval_s, mode
        # Writes a new job to the store before the API answers 201 (False: could not);
        # without it a job registered just before a crash would be gone after it.
        self.persist = persist
        # The node agent's store as /v1/health tells it: "up", "away" (an outage) or
        # "waiting" (not answered since start-up: jobs of before the start unknown yet).
        self.store_state = store_state
        # GET /v1/jobs/{id}/figures and /report: a job's figures from the store, as
        # `joulestat report` gives them (None: this API answers 501).
        self.figures = figures
        # A job that ended on this node, read from the store (None: not there, or the
        # store cannot say), for the ids the registry does not hold: see
        # _Handler._ended_in_store.
        self.ended_job = ended_job
        # Takes a tick now, after a job's end (None: the next scheduled tick does): the
        # ended job's last tick is attributed and stored at once, so `joulestat run`,
        # which waits for it, is not held up to an interval after its command exited.
        # Safe against a crash right after it because a restarted agent answers for a
        # job ended before its checkpoint from the store (ended_job).
        self.final_tick = final_tick
        self.max_in_flight, self.request_timeout_s = max_in_flight, request_timeout_s
        self.max_connections = max_connections
        self._gate: HttpGate | None = None

    def job_token(self, job_id: str) -> str:
        """The credential the registrant of ``job_id`` was given (and an in-process
        registrant, such as embedded mode's own job, passes to its children)."""
        return job_token(self._job_secret, job_id)

    @property
    def port(self) -> int:
        """The bound port once started (the one picked when asked for port 0)."""
        return self._gate.port if self._gate else self.requested_port

    @property
    def busy_rejections(self) -> int:
        """Requests answered 429 because ``max_in_flight`` were queued or being served."""
        return self._gate.busy_rejections if self._gate else 0

    def start(self) -> None:
        """Bind and serve; ValueError (before binding) when exposed without a token."""
        check_exposure(self.host, self.token)
        limits = Limits(max_connections=self.max_connections, max_in_flight=self.max_in_flight,
                        workers=WORKERS, max_body_bytes=MAX_BODY_BYTES,
                        deadline_s=self.request_timeout_s,
                        send_timeout_s=self.request_timeout_s, linger_s=LINGER_S)
        self._gate = HttpGate("job API", self.host, self.requested_port, _Handler,
                              _Server(self), limits, _BUSY_RESPONSE)
        self._gate.start()
        log.info("job API listening on %s:%d%s", self.host, self.port,
                 " (token required)" if self.token else "")

    def close(self) -> None:
        if self._gate is not None:
            self._gate.close()

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
