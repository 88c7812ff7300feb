"""Scripts the system tests run as measured jobs: a loop of CPU-busy work for a
given wall time, the loop's body each test's own (counting units, serving models)."""

from __future__ import annotations

from textwrap import dedent, indent

BUSY = '''import time

def work(seconds):
    """Hold the CPU for ``seconds`` of wall time: busy, never asleep."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass
'''


def looping(body: str, seconds: float, imports: str = "") -> str:
    """A script that runs ``body`` (which may call ``work(s)``) over and over for
    ``seconds`` of wall time, after ``imports``."""
    return (f"{BUSY}{imports}\n\nend = time.time() + {seconds}\nwhile time.time() < end:\n"
            + indent(dedent(body).strip("\n"), "    ") + "\n")
