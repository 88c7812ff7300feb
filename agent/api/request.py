"""What a handler sees of a request the connection gate (:mod:`joulestat.api.gate`) read.

The gate reads a request whole in its selector thread before any worker thread is
involved; a worker then runs the port's ordinary ``BaseHTTPRequestHandler`` over those
bytes. :class:`GatedHandler` is that handler's base: ``rfile`` is what was read, and
past its end it raises what the gate saw instead of EOF (``TimeoutError``: the
deadline passed mid-body, so the handler answers 408; ``LineTooLong``: the head was
over the limit, so http.server answers 431, or 414 for the request line), and
``wfile`` is the socket itself, under the port's send timeout. The head parsing the
gate needs (where the head ends, how long the body is) lives here too, next to the
handler rules it has to agree with.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

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
    """A request handler served by :class:`joulestat.api.gate.HttpGate`: ``rfile`` holds the
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
