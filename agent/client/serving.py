"""``with job.serving("model-a") as s:``: one model's busy time, measured where it is spent.

A server process serving several models has one energy figure; the job's energy is
split among its models by the seconds each kept the process busy
(:mod:`joulestat.store.model_split`). The block's wall time, from
:func:`time.perf_counter`, is that busy time: it is what the model held the process
for, whether it computed, waited on an accelerator or copied tensors, and it costs two
clock reads, not a thread or a sampler. Concurrent blocks (a threaded server) each count
their own time; the split then divides by their sum where it passes the wall time.

The time is recorded on exit, also when the block raises: a failed inference kept the
process busy all the same. ``s.count(n)`` counts ``n`` units (``inference`` by default)
for the model, as ``job.count(unit, n, model=...)`` does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from joulestat.attribution.model_units import BUSY, model_key
from joulestat.attribution.validation import count_keys

if TYPE_CHECKING:  # joulestat.client.tracking imports this module
    from joulestat.client.tracking import TrackedJob

log = logging.getLogger("joulestat.client.tracking")


@dataclass(frozen=True, slots=True)
class Serving:
    """The handle a ``serving()`` block gets: counts work for its model."""

    job: TrackedJob
    model: str
    unit: str = "inference"

    def count(self, n: float = 1) -> None:
        """``n`` units of work done by this block's model."""
        self.job.count(self.unit, n, model=self.model)


@contextmanager
def serving_block(job: TrackedJob, model: str, unit: str = "inference") -> Iterator[Serving]:
    """The block's wall time added to ``model``'s busy seconds in ``job`` on exit."""
    count_keys(unit, 0, model, 0.0)  # a bad model or unit fails before the block runs
    if not job.active:
        raise RuntimeError(f"job {job.name!r} is not running; serve inside `with track()`")
    start = time.perf_counter()
    try:
        yield Serving(job, model, unit)
    finally:
        busy_s = time.perf_counter() - start
        if job.active:
            job._add(model_key(BUSY, model), busy_s)
        else:  # the job ended inside the block: nowhere to put it, and no cause to raise
            log.warning("joulestat: job %s ended while serving %s; %.3g s of busy time "
                        "not counted", job.name, model, busy_s)
