"""The local HTTP API through which jobs become known to the agent.

Anything on the node can reach this port, so every input is treated as hostile: bodies
are size-checked before they are read, every field is validated by the registry (the
same rules as every other way in), and every refusal is a 4xx with a JSON message
naming what is wrong. Without a token the API only binds to loopback and refuses
requests that carry a browser ``Origin`` or a non-loopback ``Host`` (a web page the
user visits must not be able to register or end jobs, nor read them through DNS
rebinding). Connections go through :mod:`joulestat.api.gate`, like the metrics port: an
idle or slow connection holds a socket, never a thread nor an in-flight slot; each
client has ``request_timeout_s`` from accept to send its whole request; past
``max_in_flight`` complete requests waiting for or in a worker the gate answers 429;
past ``max_connections`` open the oldest silent one is closed.

Stdlib ``http.server`` handlers only, like the metrics endpoint; one request per
connection.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable

from joulestat.api.gate import HttpGate, Limits
from joulestat.api.handler import (  # noqa: F401  (re-exported: the API's public names)
    _BUSY_RESPONSE,
    LINGER_S,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_IN_FLIGHT,
    REQUEST_TIMEOUT_S,
    WORKERS,
    _Handler,
    check_exposure,
    is_loopback,
)
from joulestat.attribution.registry import Job, JobRegistry

log = logging.getLogger(__name__)


class _Server:
    """What the handlers read as ``self.server``: the registry and the API's settings."""

    def __init__(self, api: ApiServer) -> None:
        self.registry, self.node = api.registry, api.node
        self.interval_s, self.mode = api.interval_s, api.mode
        self.persist = api.persist
        self.request_timeout_s = api.request_timeout_s
        self.token_digest = hashlib.sha256(api.token.encode()).digest() if api.token else None
        self.register_lock = threading.Lock()


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
        persist: Callable[[Job], bool] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.registry, self.host, self.requested_port = registry, host, port
        self.token, self.node = token or None, node
        # Told to clients in /v1/health: how long a job's final tick can take, and
        # whether this is the node's agent or a `joulestat run` measuring in-process.
        self.interval_s, self.mode = interval_s, mode
        # Writes a new job to the store before the API answers 201 (False: could not);
        # without it a job registered just before a crash would be gone after it.
        self.persist = persist
        self.max_in_flight, self.request_timeout_s = max_in_flight, request_timeout_s
        self.max_connections = max_connections
        self._gate: HttpGate | None = None

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
