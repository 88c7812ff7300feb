"""Logging for every long-running command: one format, secrets redacted, and a problem
that persists said once (:class:`LogOnce`) rather than every tick.

Kept apart from :mod:`joulestat.cli.main` so the command modules that set logging up do not
import the CLI that imports them.
"""

from __future__ import annotations

import logging

from joulestat.core.redact import install_log_redaction

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str) -> None:
    """Log at ``level`` (``DEBUG``..``ERROR``) to stderr, with every record redacted."""
    logging.basicConfig(level=getattr(logging, level, logging.INFO), format=LOG_FORMAT)
    install_log_redaction()


class LogOnce:
    """Says a problem once per cause until its subject recovers, then says it recovered.

    A device or file that stays broken would otherwise log every tick (once a second,
    forever); one line when it breaks, one more for each new cause while it stays broken,
    and one when it works again is what an operator needs. ``key`` names the subject (a
    RAPL zone, a GPU, a GPU's process query), ``cause`` what is wrong with it (an error's
    text, or a kind such as ``"unreadable"``): a cause already said for a key is not said
    again until :meth:`recovered` clears the key, after which it is news again.
    """

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING) -> None:
        self._log = logger
        self._level = level
        self._active: dict[str, set[str]] = {}

    def problem(self, key: str, cause: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``cause`` was already said for ``key`` since it last
        recovered; True when it was logged now."""
        causes = self._active.setdefault(key, set())
        if cause in causes:
            return False
        causes.add(cause)
        self._log.log(self._level, msg, *args)
        return True

    def recovered(self, key: str, msg: str | None = None, *args: object) -> bool:
        """Clear ``key``; when it had a problem said, log ``msg % args`` (if given) at INFO.
        True when it had one."""
        if not self._active.pop(key, None):
            return False
        if msg is not None:
            self._log.info(msg, *args)
        return True

    def failing(self, key: str) -> bool:
        """Whether a problem of ``key`` was said and it has not recovered since."""
        return bool(self._active.get(key))
