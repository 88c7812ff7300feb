"""Reads that build tens of thousands of objects, with the cyclic garbage collector paused.

Listing 10,000 jobs builds some 200,000 small objects (rows, dicts, dataclasses), none
of them in a reference cycle. Every 700 allocations CPython runs a collection over the
young objects, and now and then over the whole heap of a Streamlit server (a million
objects or more): on the benchmark store that was a third of the Compare page's
server time (0.17 s of 0.51 s for the read and the comparison). Pausing the collector
for the read and resuming it afterwards changes no result; reference counting still
frees everything at once, and the next collection sees the survivors once.

The collector is process-wide and Streamlit serves sessions on threads, so pauses are
counted: it resumes when the last running bulk read ends, and never if something else
had turned it off before.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_running = 0
_resume = False


def gc_paused(read: Callable[P, R]) -> Callable[P, R]:
    """Run ``read`` with the cyclic garbage collector paused (see the module's docstring)."""

    @functools.wraps(read)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        global _running, _resume
        with _lock:
            if _running == 0:
                _resume = gc.isenabled()
                gc.disable()
            _running += 1
        try:
            return read(*args, **kwargs)
        finally:
            with _lock:
                _running -= 1
                if _running == 0 and _resume:
                    gc.enable()

    return paused
