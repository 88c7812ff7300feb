"""Logging for every long-running command: one format, secrets redacted, and a problem
that persists said once (:class:`LogOnce`) rather than every tick.

Kept apart from :mod:`joulestat.cli.main` so the command modules that set logging up do not
import the CLI that imports them.
"""

from __future__ import annotations

import logging
import threading

from joulestat.core.redact import install_log_redaction

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str) -> None:
    """Log at ``level`` (``DEBUG``..``ERROR``) to stderr, with every record redacted."""
    logging.basicConfig(level=getattr(logging, level, logging.INFO), format=LOG_FORMAT)
    install_log_redaction()


# What a measuring process says as it starts: which sensors, estimators and accelerators
# it found, where its job API listens. An operator reads it in the agent's log; printed
# on every `joulestat run` measured in-process it buries the summary (5-6 lines a run).
STARTUP_LOGGERS = ("joulestat.devices", "joulestat.runtime.assembly", "joulestat.api.server",
                   "joulestat.store.access")


def quiet_startup_logs() -> None:
    """Log the start-up inventory at DEBUG only, for a command whose stderr is the user's
    and who did not ask for a log level; warnings still show, and the line saying a job
    is measured in-process (not by an agent) stays."""
    for name in STARTUP_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class LogOnce:
    """Says a problem once per cause until its subject recovers, then says it recovered.

    A device or file that stays broken would otherwise log every tick (once a second,
    forever); one line when it breaks, one more for each new cause while it stays broken,
    and one when it works again is what an operator needs. ``key`` names the subject (a
    RAPL zone, a GPU, a GPU's process query), ``cause`` what is wrong with it (an error's
    text, or a kind such as ``"unreadable"``): a cause already said for a key is not said
    again until :meth:`recovered` clears the key, after which it is news again.

    Safe from several threads (the client's flusher beside the user's). ``max_causes``
    bounds what is remembered, for callers whose causes come from outside (a user's
    ever-different bad arguments): past it nothing more is said at ``level``, only at
    DEBUG, rather than a set that grows without end.
    """

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 max_causes: int | None = None) -> None:
        self._log = logger
        self._level = level
        self._max_causes = max_causes
        self._count = 0
        self._active: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def problem(self, key: str, cause: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``cause`` was already said for ``key`` since it last
        recovered (then at DEBUG); True when it was logged now, at the level."""
        with self._lock:
            causes = self._active.setdefault(key, set())
            new = cause not in causes and (self._max_causes is None
                                           or self._count < self._max_causes)
            if new:
                causes.add(cause)
                self._count += 1
        self._log.log(self._level if new else logging.DEBUG, msg, *args)
        return new

    def recovered(self, key: str, msg: str | None = None, *args: object) -> bool:
        """Clear ``key``; when it had a problem said, log ``msg % args`` (if given) at INFO.
        True when it had one."""
        with self._lock:
            had = self._active.pop(key, None)
            if had:
                self._count -= len(had)
        if not had:
            return False
        if msg is not None:
            self._log.info(msg, *args)
        return True

    def failing(self, key: str) -> bool:
        """Whether a problem of ``key`` was said and it has not recovered since."""
        with self._lock:
            return bool(self._active.get(key))

    def forget(self) -> None:
        """Forget everything said (a test starting afresh)."""
        with self._lock:
            self._active.clear()
            self._count = 0
