"""One place that hides secrets, for every log line, error message, report, CLI output
and dashboard page.

Secrets reach joulestat in two ways: settings (a store URL with a password, an API
token) and job labels, which anyone who can register a job writes. Redacting by label
key alone misses a URL with credentials under a key like ``note``, so values are
checked too: a URL's ``user:password@``, ``Bearer``/``Basic`` credentials, ``password=``
style pairs and well-known token shapes are replaced wherever they appear, whatever
the key. A key that names a secret (``token``, ``password``, ``api_key``, ...) hides
its whole value.

Redacted text keeps its shape (``postgresql://u:***@db/x``), so a reader can still tell
which store or which label it was.

Importing it costs the standard library only (SQLAlchemy loads in :func:`redact_url`):
the in-process client, which must not pull the store's dependencies into a user's
program, redacts its warnings here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # SQLAlchemy loads in redact_url only: the client imports this module
    from sqlalchemy.engine import URL

REDACTED = "[redacted]"
HIDDEN = "***"

SECRET_KEY = re.compile(
    r"token|secret|passw|pwd|api_?key|apikey|credential|auth|private_?key|cookie|session",
    re.IGNORECASE)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host -> scheme://user:***@host
    (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):[^\s@/'\"]*@"), rf"\1:{HIDDEN}@"),
    # Authorization: Bearer abc / Basic abc
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=\-]{6,}"), rf"\1\2{HIDDEN}"),
    # password=abc, api_key: abc, PGPASSWORD=abc (libpq DSNs, env dumps, query strings)
    (re.compile(r"(?i)\b([A-Za-z_]*(?:password|passwd|pwd|secret|token|api_?key))"
                r"(\s*[=:]\s*)(?!\*\*\*)[^\s&;,'\"]+"), rf"\1\2{HIDDEN}"),
    # Well-known token shapes: AWS access keys, GitHub, OpenAI-style, Slack.
    (re.compile(r"\b(?:AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}"
                r"|xox[abprs]-[A-Za-z0-9\-]{10,})\b"), HIDDEN),
)


def redact_text(text: str) -> str:
    """``text`` with every credential-looking part replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def looks_secret(text: str) -> bool:
    return redact_text(text) != text


def redact_url(url: str | URL) -> str:
    """A URL with its password hidden, for messages and logs."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return redact_text(str(url))


def redact_labels(labels: Mapping[str, str], keep: bool = False) -> dict[str, str]:
    """Labels, sorted, with secret-named keys' values and credential-looking parts of
    any value hidden; ``keep`` (``--no-redact``) returns them as they are."""
    if keep:
        return dict(sorted(labels.items()))
    return {k: (REDACTED if SECRET_KEY.search(k) else redact_text(str(v)))
            for k, v in sorted(labels.items())}


class RedactingFilter(logging.Filter):
    """A handler filter: the formatted message of every record, redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken record: let the handler report it as usual
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Redact every record the handlers of ``logger`` (default: root) emit."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
