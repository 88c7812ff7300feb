"""Logging for every long-running command: one format, secrets redacted.

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
