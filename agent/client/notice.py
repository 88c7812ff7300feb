"""How the client says something went wrong: once, as a warning, and never by raising.

The client runs inside someone else's program. Whatever fails in it (no agent, a store
it cannot open, an agent that refuses, a bad argument, a bug of ours) must not stop that
program, so it is said as a WARNING on the ``joulestat`` logger and the program goes on
(CodeCarbon and Zeus do the same). A training loop calls ``count()`` thousands of times,
so each cause is said once per process: the first time at WARNING, every later time at
DEBUG. The cause is a key the caller chooses (a call and its argument, an agent URL and
its answer), never the varying value, so a loop of ever-different bad counts is one line.

With no logging configured, Python's last-resort handler prints WARNING records to
stderr as the bare message, so a user sees ``joulestat: ...`` lines and nothing else.
Every message is redacted (:mod:`joulestat.core.redact`): a store URL's password or a
token must not reach the user's output, whose handlers install no redaction of ours.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable

from joulestat.core.logs import LogOnce
from joulestat.core.redact import redact_text

log = logging.getLogger("joulestat.client")

MAX_CAUSES = 1024  # past it every cause is said at DEBUG: the set must not grow unbounded
MAX_SHOWN_CHARS = 80  # of a value shown in a warning: an argument may be a megabyte

# The process's one say-once log: a cause is never "recovered" here, a process says it
# once and goes on (core.logs.LogOnce, the sensors' own, keyed by the cause).
_said = LogOnce(log, logging.WARNING, max_causes=MAX_CAUSES)


def warn_once(cause: Hashable, message: str) -> bool:
    """Log ``message`` at WARNING the first time ``cause`` is seen, at DEBUG after; True
    the first time. Never raises."""
    try:
        # One line: a user greps for it, and a test counts it.
        text = "joulestat: " + " ".join(redact_text(message).split())
        return _said.problem("client", repr(cause), "%s", text)
    except Exception:  # logging itself failed (a broken handler): nothing more to do
        return False


def shown(value: object) -> str:
    """``repr(value)``, cut short, for naming a value in a warning."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS - 3] + "..."


def argument_of(error: Exception) -> str:
    """The argument a validation error names (its messages start ``name: ...``,
    ``labels.team: ...``, ``unit 'x@y': ...``), for the cause of a warning."""
    found = re.match(r"[A-Za-z_]+", str(error))
    return found.group(0) if found else type(error).__name__


def bad_argument(call: str, error: Exception, consequence: str) -> None:
    """A user's call with a bad argument: said once per call and argument, loudly."""
    warn_once(("argument", call.partition("(")[0], argument_of(error)),
              f"{call}: {error}; {consequence}")


def forget() -> None:
    """Forget what was said (tests: each starts with nothing said)."""
    _said.forget()
