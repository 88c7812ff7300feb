"""The local HTTP API through which jobs become known to the agent.

Anything on the node can reach this port, so every input is treated as hostile: bodies
are size-checked before they are read, every field is validated by the registry (the
same rules as every other way in), and every refusal is a 4xx with a JSON message
naming what is wrong. Without a token the API only binds to loopback and refuses
requests that carry a browser ``Origin`` or a non-loopback ``Host`` (a web page the
user visits must not be able to register or end jobs, nor read them through DNS
rebinding). Concurrency is capped: past ``max_in_flight`` connections the accept
thread answers 429 itself instead of starting another thread, and each client has
``request_timeout_s`` in all to send its request, so slow clients cannot pin threads.

Stdlib ``http.server`` only, like the metrics endpoint; one request per connection.
"""

from __future__ import annotations

import hashlib
import logging
import selectors
import socket
import socketserver
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from typing import Any

from agent.jobs.api_handler import (  # noqa: F401  (re-exported: the API's public names)
    _BUSY_RESPONSE,
    BUSY_WAIT_S,
    LINGER_S,
    MAX_BODY_BYTES,
    MAX_IN_FLIGHT,
    MAX_PARKED,
    REQUEST_TIMEOUT_S,
    _Handler,
    check_exposure,
    is_loopback,
)
from agent.jobs.registry import JobRegistry

log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # a burst waits in the kernel's queue instead of being dropped

    def __init__(self, api: ApiServer, family: socket.AddressFamily) -> None:
        self.address_family = family
        self.registry, self.node = api.registry, api.node
        self.request_timeout_s = api.request_timeout_s
        self.token_digest = hashlib.sha256(api.token.encode()).digest() if api.token else None
        self.register_lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(api.max_in_flight)
        super().__init__((api.host.strip("[]"), api.requested_port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer's version looks up the FQDN, which can stall on a node without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("job API client %s went away: %s", client_address, exc)
        else:
            log.exception("job API: unexpected error serving %s", client_address)


class ApiServer:
    """The job API on ``host:port``; ``start()`` serves it from a daemon thread.

    The accept thread owns the cap: a connection gets a handler thread only while one
    of ``max_in_flight`` slots is free. Otherwise it is parked in the accept thread's
    selector until its request arrives (or BUSY_WAIT_S passes) and answered 429 there;
    answering before the request is read would let the close reset the answer away.
    """

    def __init__(
        self,
        registry: JobRegistry,
        host: str,
        port: int,
        token: str | None = None,
        node: str = "",
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.registry, self.host, self.requested_port = registry, host, port
        self.token, self.node = token or None, node
        self.max_in_flight, self.request_timeout_s = max_in_flight, request_timeout_s
        self.busy_rejections = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._parked: dict[socket.socket, float] = {}  # refused connection -> answer by
        self._closing = threading.Event()

    @property
    def port(self) -> int:
        """The bound port once started (the one picked when asked for port 0)."""
        return self._server.server_address[1] if self._server else self.requested_port

    def start(self) -> None:
        """Bind and serve; ValueError (before binding) when exposed without a token."""
        check_exposure(self.host, self.token)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._server = _Server(self, family)
        self._server.socket.setblocking(False)
        self._selector, self._wake = selectors.DefaultSelector(), socket.socketpair()
        self._selector.register(self._server.socket, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake[0], selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._serve, name="joulestat-api", daemon=True)
        self._thread.start()
        log.info("job API listening on %s:%d%s", self.host, self.port,
                 " (token required)" if self.token else "")

    def _serve(self) -> None:
        """Sleeps until a connection, a parked request or close(): no periodic wake-ups."""
        assert self._selector is not None
        while not self._closing.is_set():
            timeout = None
            if self._parked:
                timeout = max(0.0, min(self._parked.values()) - time.monotonic())
            for key, _ in self._selector.select(timeout):
                if key.data == "accept":
                    self._accept_all()
                elif key.data == "parked":
                    self._answer_busy(key.fileobj)  # type: ignore[arg-type]
            now = time.monotonic()
            for sock in [sock for sock, due in self._parked.items() if due <= now]:
                self._answer_busy(sock)
        for sock in list(self._parked):
            self._answer_busy(sock)

    def _accept_all(self) -> None:
        assert self._server is not None and self._selector is not None
        server = self._server
        while not self._closing.is_set():
            try:
                request, address = server.get_request()
            except BlockingIOError:
                return
            except OSError as exc:  # e.g. out of file descriptors: back off, don't spin
                log.warning("job API: accept failed: %s", exc)
                time.sleep(0.1)
                return
            if server.slots.acquire(blocking=False):
                try:
                    server.process_request(request, address)
                except Exception:
                    server.slots.release()
                    server.handle_error(request, address)
                    server.shutdown_request(request)
            elif len(self._parked) < MAX_PARKED:
                request.setblocking(False)
                self._parked[request] = time.monotonic() + BUSY_WAIT_S
                self._selector.register(request, selectors.EVENT_READ, "parked")
            else:
                self._answer_busy(request)

    def _answer_busy(self, sock: socket.socket) -> None:
        if self._parked.pop(sock, None) is not None and self._selector is not None:
            self._selector.unregister(sock)
        try:
            sock.setblocking(False)
            try:
                sock.recv(65536)  # what has arrived; unread data would turn close into a reset
            except BlockingIOError:
                pass
            sock.send(_BUSY_RESPONSE)  # small enough for an empty send buffer
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            sock.close()
            self.busy_rejections += 1

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        if self._wake is not None:
            self._wake[1].send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._server is not None:
            self._server.server_close()
        for closable in (self._selector, *(self._wake or ())):
            if closable is not None:
                closable.close()

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
