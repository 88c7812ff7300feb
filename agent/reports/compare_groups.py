"""Which row of a comparison a job joins: by job, by setup, or by a label's value.

Kept apart from the arithmetic of :mod:`agent.reports.compare` so that pages and
reports can name a job's setup (:func:`setup_name`) without the rest. ``by="label:KEY"``
answers "what does concurrency 16 cost per request compared with 4?" directly: the rows
are ``concurrency=1``, ``concurrency=4``, ``concurrency=16``, each pooling its jobs as an
instance-type group does. ``by="model"`` rows are the models of multi-model servers
(``model=bert``), from the per-model figures :mod:`agent.reports.compare_models` makes
of each job, its idle part (``idle``) and jobs that named no model (``model unset``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agent.redact import redact_labels

if TYPE_CHECKING:
    from agent.reports.compare import JobFigures

BY_CHOICES = ("job", "instance_type")
LABEL_BY = "label:"  # by="label:KEY": a row per value of the label KEY
MODEL_BY = "model"  # a row per model of multi-model jobs (JobFigures.model)
IDLE_MODEL = ""  # JobFigures.model of a job's idle part: no model was busy
MODEL_ROW, IDLE_ROW, NO_MODEL_ROW = "model=", "idle", "model unset"
UNKNOWN_TYPE = "unknown"
# The job API's label keys (agent.jobs.registry.LABEL_KEY_RE), without importing jobs.
_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class CompareError(ValueError):
    """Input :func:`~agent.reports.compare.compare` (or the loader) cannot use.
    ``argument`` names the parameter (``by``, ``unit``, ``baseline``,
    ``sla_units_per_hour``, ``jobs``) so a command can name its own flag."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


def setup_name(instance_types: Iterable[str]) -> str:
    """A setup's name: its distinct instance types, sorted, joined by ``+`` (an empty type
    reads ``unknown``). Public so every page and report that names a job's setup names it
    as the comparison groups it."""
    return "+".join(sorted({t or UNKNOWN_TYPE for t in instance_types})) or UNKNOWN_TYPE


def label_key(by: str) -> str | None:
    """KEY of ``by="label:KEY"``; None for the other groupings."""
    return by[len(LABEL_BY):] if by.startswith(LABEL_BY) else None


def check_by(by: str) -> None:
    """Raise :class:`CompareError` (argument ``by``) unless ``by`` is a grouping."""
    key = label_key(by)
    if by in BY_CHOICES or by == MODEL_BY or (key is not None and _LABEL_KEY.match(key)):
        return
    raise CompareError("by", f"expected one of {', '.join(BY_CHOICES)}, {MODEL_BY} or "
                       f"label:KEY (a label key), got {by!r}")


def group_of(job: JobFigures, by: str) -> str:
    """The row a job joins: its id (``job``), its setup (``instance_type``),
    ``KEY=value`` of its label (``label:KEY``; ``KEY unset`` without it) or ``model=NAME``
    (``model``; ``idle`` for a job's idle part, ``model unset`` for a job of no model)."""
    if by == "job":
        return job.job_id
    if by == MODEL_BY:
        if job.model is None:
            return NO_MODEL_ROW
        return IDLE_ROW if job.model == IDLE_MODEL else f"{MODEL_ROW}{job.model}"
    key = label_key(by)
    if key is None:
        return job.setup
    if key not in job.labels:
        return f"{key} unset"
    return f"{key}={redact_labels({key: job.labels[key]})[key]}"  # a row name is shown
