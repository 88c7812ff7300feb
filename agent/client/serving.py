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

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from joulestat.client.notice import bad_argument, shown, warn_once
from joulestat.core.model_units import BUSY, model_key
from joulestat.core.validation import JobError, count_keys


class TrackedJob(Protocol):
    """What a ``serving()`` block uses of the job it serves in
    (:class:`joulestat.client.tracking.TrackedJob`, which builds the blocks: a protocol,
    so that this module needs nothing of that one)."""

    name: str

    @property
    def active(self) -> bool: ...

    def count(self, unit: str, count: float = 1, *, model: str | None = None) -> None: ...

    def _add(self, key: str, amount: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Serving:
    """The handle a ``serving()`` block gets: counts work for its model. ``job`` is None
    when the block records nothing (no job, or a bad model or unit, said once)."""

    job: TrackedJob | None
    model: str
    unit: str = "inference"

    def count(self, n: float = 1) -> None:
        """``n`` units of work done by this block's model."""
        if self.job is not None:
            self.job.count(self.unit, n, model=self.model)


@contextmanager
def serving_block(job: TrackedJob | None, model: str, unit: str = "inference"
                  ) -> Iterator[Serving]:
    """The block's wall time added to ``model``'s busy seconds in ``job`` on exit.

    The block always runs: with no running job, or a bad ``model`` or ``unit``, it
    records nothing, and says so once. What the block itself raises goes on up."""
    target = job
    try:
        count_keys(unit, 0, model, 0.0)
    except JobError as exc:
        bad_argument(f"serving({shown(model)}, {shown(unit)})", exc,
                     "the block runs, its busy time is not counted")
        target = None
    except Exception as exc:  # a bug of ours: the block runs all the same
        warn_once(("serving", "internal", type(exc).__name__),
                  f"serving({shown(model)}) failed: {exc!r}; its busy time is not counted")
        target = None
    if target is not None and not target.active:
        warn_once(("serving", "not running"),
                  f"serving({shown(model)}) in job {target.name!r}, which is not running: "
                  "the block runs, its busy time is not counted (serve inside `with track()`)")
        target = None
    start = time.perf_counter()
    try:
        yield Serving(target, model, unit)
    finally:
        if target is not None:
            _add_busy(target, model, time.perf_counter() - start)


def _add_busy(job: TrackedJob, model: str, busy_s: float) -> None:
    try:
        if job.active:
            job._add(model_key(BUSY, model), busy_s)
        else:  # the job ended inside the block: nowhere to put it
            warn_once(("serving", "ended"), f"job {job.name!r} ended while serving {model}; "
                      f"{busy_s:.3g} s of busy time not counted")
    except Exception as exc:  # a bug of ours must not replace what the block raised
        warn_once(("serving", "internal", type(exc).__name__),
                  f"counting busy time of {model} failed: {exc!r}")
