"""A deadline for a whole HTTP exchange, not for each read of it.

Why: a socket timeout bounds one ``recv``, so a server that sends a byte a second holds
a request for ever while never tripping it (issue 47: a dripping serving endpoint held
every other job's scrapes; a dripping OTLP collector held one export 85 s). At the
deadline a timer shuts the connection's socket down, which ends whatever read (status
line, headers, TLS, body) is waiting. Used by the serving-metrics fetch
(:mod:`joulestat.host.serving_metrics`) and the OTLP/HTTP export
(:mod:`joulestat.outputs.otlp`).
"""

from __future__ import annotations

import socket
import threading
import time


class SocketDeadline:
    """Started when made; :meth:`watch` the connection's socket, :meth:`cancel` when the
    exchange is over (always: it stops the timer)."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self._end_s = time.monotonic() + total_s
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None  # a dup: shutdown() reaches the TLS one too
        self.expired = False
        self._timer = threading.Timer(total_s, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left_s(self) -> float:
        return self._end_s - time.monotonic()

    def watch(self, sock: socket.socket) -> socket.socket:
        """``sock``, which the deadline shuts down (at once if it has passed)."""
        with self._lock:
            self._socket = sock.dup()
            if self.expired:
                _shut(self._socket)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._socket is not None:
                _shut(self._socket)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._socket is not None:
                self._socket.close()
                self._socket = None

    def message(self, shown: str) -> str:
        """What to say of an exchange the deadline (or a read's own timeout) ended."""
        self.expired = True
        return f"{shown}: no complete answer within {self.total_s:g} s"


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (yet, or any more): nothing to end


__all__ = ["SocketDeadline"]
