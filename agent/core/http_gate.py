"""Admission for the agent's HTTP ports: one selector thread reads, a few workers answer.

Why not ``ThreadingHTTPServer``: it starts a thread per connection before a byte has
arrived, so 1,000 idle connections to the metrics port made ~1,000 threads and tens of
MiB never given back, and on the job API an idle connection held an in-flight slot.
Here a connection costs a socket, a small record and what it has sent until its
request is whole:

- one selector thread accepts and reads each request, head (``max_head_bytes``) and
  body (per Content-Length, ``max_body_bytes``), under one deadline per connection
  from accept; it sleeps until an event or the nearest deadline, never polls.
- a whole request, or one that must be refused (head or body too large, chunked, no
  valid length, cut short, deadline passed mid-body), goes to a small fixed pool of
  workers running the port's own handler over the bytes read, so routing, validation
  and error format stay there.
- past ``max_in_flight`` requests queued or in a worker, the selector answers 429.
- at ``max_connections``, a new connection evicts the oldest one already answered,
  else the oldest silent one, else the oldest still sending its head, so a scrape or
  health check gets through a flood of idle connections.
- after an answer our side is shut and what the client still sends is dropped for
  ``linger_s``, so an early answer (413) is not lost to a reset. A client hanging up
  is routine: a debug line, never a traceback.

What a handler sees of a request the gate read: a worker runs the port's ordinary
``BaseHTTPRequestHandler`` over those bytes, and :class:`GatedHandler` is that handler's
base: ``rfile`` is what was read, and past its end it raises what the gate saw instead
of EOF (``TimeoutError``: the deadline passed mid-body, so the handler answers 408;
``LineTooLong``: the head was over the limit, so http.server answers 431, or 414 for the
request line), and ``wfile`` is the socket itself, under the port's send timeout. The
head parsing the gate needs (where the head ends, how long the body is) is next to the
handler rules it has to agree with.
"""

from __future__ import annotations

import errno
import heapq
import http.client
import io
import itertools
import logging
import queue
import re
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

log = logging.getLogger(__name__)


# -- What a handler sees of a request the connection gate (:mod:`joulestat.core.http_gate`) ----

_CONTENT_LENGTH = re.compile(rb"[0-9]{1,18}")
EndError = Callable[[], Exception] | None


def busy_response(content_type: str, body: bytes) -> bytes:
    """A complete 429 answer, small enough to fit an empty socket send buffer."""
    return (b"HTTP/1.0 429 Too Many Requests\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n\r\n"
            % (content_type.encode(), len(body))) + body


class PrefetchedReader(io.BytesIO):
    """What the gate read; past its end, ``end_error()`` is raised instead of EOF."""

    def __init__(self, data: bytes, end_error: EndError) -> None:
        super().__init__(data)
        self._end_error = end_error

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        if self._end_error is not None and (size is None or size < 0 or len(chunk) < size):
            raise self._end_error()
        return chunk

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        short = size is None or size < 0 or len(line) < size
        if self._end_error is not None and short and not line.endswith(b"\n"):
            raise self._end_error()
        return line


@dataclass
class Prefetched:
    """Passed to a handler as its ``request``: the socket and the request's bytes."""

    sock: socket.socket
    data: bytes
    end_error: EndError


class GatedHandler(BaseHTTPRequestHandler):
    """A request handler served by :class:`joulestat.core.http_gate.HttpGate`: ``rfile`` holds the
    request the gate read, ``wfile`` writes to the socket (under the port's send timeout).
    One request per connection, so a worker never waits for a client's next request."""

    def setup(self) -> None:
        prefetched: Prefetched = self.request  # type: ignore[assignment]
        self.request = self.connection = prefetched.sock
        self.rfile = PrefetchedReader(prefetched.data, prefetched.end_error)
        self.wfile = self.connection.makefile("wb")
        # What send_error needs when even the request line could not be read.
        self.command, self.request_version, self.requestline = None, "HTTP/1.0", ""
        self.close_connection = True

    def handle(self) -> None:
        try:
            self.handle_one_request()  # one request per connection
        except http.client.LineTooLong:  # the request line alone filled max_head_bytes
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)


def head_end(buf: bytearray, start: int) -> int:
    """Index just past the empty line that ends the head (CRLF or bare LF), or -1."""
    i = buf.find(b"\n", start)
    while i >= 0:
        if buf[i + 1 : i + 2] == b"\n":
            return i + 2
        if buf[i + 1 : i + 3] == b"\r\n":
            return i + 3
        i = buf.find(b"\n", i + 1)
    return -1


def body_length(head: bytes, max_body: int) -> int | None:
    """Body bytes to read before the request is whole; None: the handler refuses it now
    (chunked, no valid Content-Length, or over the limit), before the body is read."""
    lengths: set[bytes] = set()
    for line in head.split(b"\n")[1:]:
        name, sep, value = line.partition(b":")
        name = name.strip().lower()
        if sep and name == b"transfer-encoding":
            return None
        if sep and name == b"content-length":
            lengths.add(value.strip())
    if not lengths:
        return 0
    value = lengths.pop()
    if lengths or not _CONTENT_LENGTH.fullmatch(value) or int(value) > max_body:
        return None
    return int(value)


# -- Admission for the agent's HTTP ports ----------------------------------------------

_HEAD, _BODY, _WORK, _LINGER, _CLOSED = range(5)
_ACCEPTS_PER_WAKE = 64  # then serve the others' events; the listener stays readable
_ACCEPT_PAUSE_S = 0.1  # out of file descriptors with nothing to evict: retry after this
_WAKE = object()


@dataclass(frozen=True)
class Limits:
    """Every bound one port keeps. Worst-case memory is about max_connections x
    max_head_bytes for heads plus max_body_buffered for bodies being read."""

    max_connections: int = 512  # open at once (and never above a quarter of RLIMIT_NOFILE)
    max_in_flight: int = 64  # complete requests queued for or in a worker; past it: 429
    workers: int = 4
    max_head_bytes: int = 16 << 10
    max_body_bytes: int = 1 << 20
    max_body_buffered: int = 16 << 20  # declared bodies being read, all connections: 429
    deadline_s: float = 5.0  # from accept to the whole request
    send_timeout_s: float = 5.0  # a worker's writes to a client that does not read
    linger_s: float = 1.0


class _Conn:
    __slots__ = ("sock", "addr", "buf", "deadline", "phase", "scan", "need", "reserved",
                 "drained")

    def __init__(self, sock: socket.socket, addr: Any, deadline: float) -> None:
        self.sock, self.addr, self.deadline = sock, addr, deadline
        self.buf, self.phase, self.scan, self.need = bytearray(), _HEAD, 0, 0
        self.reserved = self.drained = 0


def _fd_bounded(wanted: int) -> int:
    """A cap above what the process may open would turn into EMFILE for everything else."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return wanted if soft == resource.RLIM_INFINITY else max(16, min(wanted, soft // 4))


class HttpGate:
    """One port: bound at construction (OSError if it cannot be), served after start()."""

    def __init__(self, name: str, host: str, port: int, handler: type[GatedHandler],
                 server: Any = None, limits: Limits | None = None,
                 busy: bytes | None = None) -> None:
        self.name, self.handler = name, handler
        self.server = self if server is None else server  # what handlers see as .server
        self.limits = limits or Limits()
        self.max_connections = _fd_bounded(self.limits.max_connections)
        self.busy_rejections = self.evictions = 0
        self._busy = busy or busy_response("text/plain", b"busy, retry shortly\n")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host.strip("[]"), port))
            self._listener.listen(1024)  # a burst waits in the kernel's queue
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()  # workers -> selector: "done"
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self._open: set[_Conn] = set()
        # Insertion-ordered, oldest first: who is evicted at the cap, in this order.
        self._lingering: dict[_Conn, None] = {}
        self._silent: dict[_Conn, None] = {}
        self._partial: dict[_Conn, None] = {}
        self._timers: list[tuple[float, int, _Conn]] = []
        self._seq = itertools.count()
        self._in_flight = self._body_reserved = 0
        self._accept_resume: float | None = None
        self._accept_warned = 0.0
        self._jobs: queue.SimpleQueue[tuple[_Conn, bytes, EndError] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[_Conn, bool]] = queue.SimpleQueue()
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        tag = self.name.replace(" ", "-").lower()
        self._thread = threading.Thread(target=self._run, name=f"joulestat-{tag}", daemon=True)
        self._thread.start()
        for n in range(max(1, min(self.limits.workers, self.limits.max_in_flight))):
            threading.Thread(target=self._work, name=f"joulestat-{tag}-{n}", daemon=True).start()

    def close(self) -> None:
        """Stop accepting and free the port; workers finish what they hold and exit."""
        if self._closing:
            return
        self._closing = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for _ in range(max(1, self.limits.workers)):
            self._jobs.put(None)
        for closable in (self._listener, self._selector, self._wake_r, self._wake_w):
            closable.close()

    server_close = close  # the name socketserver's servers use

    # -- the selector thread ---------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._closing:
                for key, _ in self._selector.select(self._timeout()):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._woken()
                    elif key.data.phase == _LINGER:
                        self._drain(key.data)
                    elif key.data.phase in (_HEAD, _BODY):
                        self._readable(key.data)
                self._expire()
        except Exception:  # a bug: say so loudly, the port no longer answers
            log.exception("%s: the connection gate stopped", self.name)
        finally:
            for conn in list(self._open):
                self._close(conn)

    def _timeout(self) -> float | None:
        timers = self._timers
        while timers and (timers[0][2].phase == _CLOSED or timers[0][2].deadline != timers[0][0]):
            heapq.heappop(timers)  # stale: closed, or its deadline moved on
        due = [t for t in (timers[0][0] if timers else None, self._accept_resume)
               if t is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _expire(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            due, _, conn = heapq.heappop(self._timers)
            if conn.phase == _CLOSED or conn.deadline != due:
                continue
            if conn.phase == _BODY:  # a partial body: the handler answers 408
                self._dispatch(conn, lambda: TimeoutError("request not received in time"))
            else:  # no whole head, or done lingering: just close
                log.debug("%s: closing %s at its deadline", self.name, conn.addr)
                self._close(conn)
        if self._accept_resume is not None and self._accept_resume <= now:
            self._accept_resume = None
            self._selector.register(self._listener, selectors.EVENT_READ, None)

    def _set_deadline(self, conn: _Conn, due: float) -> None:
        conn.deadline = due
        heapq.heappush(self._timers, (due, next(self._seq), conn))

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO) or (
                        exc.errno in (errno.EMFILE, errno.ENFILE) and self._evict()):
                    continue  # gone already, or out of descriptors until one was freed
                self._pause_accepting(exc)
                return
            if len(self._open) >= self.max_connections and not self._evict():
                log.debug("%s: %d open, refusing %s", self.name, len(self._open), addr)
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, addr, 0.0)
            self._open.add(conn)
            self._silent[conn] = None
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._set_deadline(conn, time.monotonic() + self.limits.deadline_s)

    def _pause_accepting(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._accept_warned > 60:
            self._accept_warned = now
            log.warning("%s: accept failed (%s); %d connections open", self.name, exc,
                        len(self._open))
        self._selector.unregister(self._listener)
        self._accept_resume = now + _ACCEPT_PAUSE_S

    def _evict(self) -> bool:
        self._woken()  # an answer just sent makes its connection the first to go
        for pool in (self._lingering, self._silent, self._partial):
            if pool:
                conn = next(iter(pool))
                log.debug("%s: %d open, closing %s", self.name, len(self._open), conn.addr)
                self.evictions += 1
                self._close(conn)
                return True
        return False

    def _readable(self, conn: _Conn) -> None:
        want = 65536 if conn.phase == _HEAD else min(65536, conn.need - len(conn.buf))
        try:
            chunk = conn.sock.recv(want)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("%s: %s went away: %s", self.name, conn.addr, exc)
            self._close(conn)
            return
        if not chunk and not conn.buf:
            self._close(conn)
            return
        if not chunk:  # done sending: what it sent is all there is (cut short: 400)
            self._dispatch(conn, None)
            return
        if not conn.buf:
            self._silent.pop(conn, None)
            self._partial[conn] = None
        conn.buf += chunk
        if conn.phase == _BODY:
            if len(conn.buf) >= conn.need:
                self._dispatch(conn, None)
            return
        end = head_end(conn.buf, conn.scan)
        limit = self.limits.max_head_bytes
        if end < 0 or end > limit:
            if len(conn.buf) >= limit:  # the handler answers 431 (or 414)
                del conn.buf[limit:]
                self._dispatch(conn, lambda: http.client.LineTooLong("request head"))
            else:
                conn.scan = max(0, len(conn.buf) - 2)
            return
        length = body_length(bytes(conn.buf[:end]), self.limits.max_body_bytes)
        if length is None or len(conn.buf) >= end + length:
            self._dispatch(conn, None)
        elif self._body_reserved + length > self.limits.max_body_buffered:
            self._answer_busy(conn)
        else:
            self._partial.pop(conn, None)
            conn.phase, conn.need, conn.reserved = _BODY, end + length, length
            self._body_reserved += length

    def _dispatch(self, conn: _Conn, end_error: EndError) -> None:
        if self._in_flight >= self.limits.max_in_flight:
            self._answer_busy(conn)
            return
        self._leave_reading(conn)
        self._selector.unregister(conn.sock)
        data = bytes(conn.buf[: conn.need]) if conn.need else bytes(conn.buf)
        conn.buf = bytearray()
        conn.phase, conn.deadline = _WORK, float("inf")
        self._in_flight += 1
        self._jobs.put((conn, data, end_error))

    def _answer_busy(self, conn: _Conn) -> None:
        self._leave_reading(conn)
        try:
            conn.sock.send(self._busy)
        except OSError as exc:
            log.debug("%s: %s went away: %s", self.name, conn.addr, exc)
            self._close(conn)
            return
        self.busy_rejections += 1
        self._selector.unregister(conn.sock)
        self._linger(conn)

    def _leave_reading(self, conn: _Conn) -> None:
        self._silent.pop(conn, None)
        self._partial.pop(conn, None)
        self._body_reserved -= conn.reserved
        conn.reserved = 0

    def _linger(self, conn: _Conn) -> None:
        """Answered: shut our side, then read and drop what the client still sends."""
        conn.buf = bytearray()
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.phase = _LINGER
        self._lingering[conn] = None
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        self._set_deadline(conn, time.monotonic() + self.limits.linger_s)

    def _drain(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        conn.drained += len(chunk)
        if not chunk or conn.drained > self.limits.max_head_bytes + self.limits.max_body_bytes:
            self._close(conn)

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while True:
            try:
                conn, answered = self._done.get_nowait()
            except queue.Empty:
                return
            self._in_flight -= 1
            if conn.phase == _WORK:  # else closed meanwhile (the port is closing)
                (self._linger if answered else self._close)(conn)

    def _close(self, conn: _Conn) -> None:
        if conn.phase == _CLOSED:
            return
        if conn.phase != _WORK:  # a worker's socket is not registered
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        self._leave_reading(conn)
        self._lingering.pop(conn, None)
        self._open.discard(conn)
        conn.phase, conn.buf = _CLOSED, bytearray()
        conn.sock.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (the selector will wake anyway) or closed
            pass

    # -- the workers -----------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            conn, data, end_error = job
            answered = False
            try:
                conn.sock.settimeout(self.limits.send_timeout_s)
                self.handler(Prefetched(conn.sock, data, end_error),  # type: ignore[arg-type]
                             conn.addr, self.server)
                answered = True
            except OSError as exc:  # hung up, stopped reading, or the port closed
                log.debug("%s: %s went away: %s", self.name, conn.addr, exc)
            except Exception:
                log.exception("%s: unexpected error serving %s", self.name, conn.addr)
            self._done.put((conn, answered))
            self._wake()
