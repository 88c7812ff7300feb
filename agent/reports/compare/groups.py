"""Which row of a comparison a job joins: by job, by setup, by a label's value, by name
or by model, and which row a baseline names.

Split from :mod:`joulestat.reports.compare.table` (the arithmetic of a comparison): a
row's figures do not depend on how its jobs were chosen, and pages and reports name a
job's setup (:func:`setup_name`) without comparing anything. :class:`CompareError` is
here because the choice of rows is where most bad input is found (``by``,
``baseline``); the arithmetic raises it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

from joulestat.core.redact import redact_labels

__all__ = ["BY_CHOICES", "LABEL_BY", "MODEL_BY", "MODEL_ROW", "NAME_BY", "SETUP_SEPARATOR",
           "UNKNOWN_TYPE", "CompareError", "check_by", "find_baseline", "group_of",
           "label_key", "setup_name", "split_by_setup"]


BY_CHOICES = ("job", "instance_type")
NAME_BY = "name"  # a row per job name: its repeated runs pooled
LABEL_BY = "label:"  # by="label:KEY": a row per value of the label KEY
MODEL_BY = "model"  # a row per model served (JobFigures.model)
MODEL_ROW = "model="
UNKNOWN_TYPE = "unknown"
SETUP_SEPARATOR = " · "  # "concurrency=1 · g5.xlarge": a label value on one setup
# The job API's label keys (joulestat.core.validation.LABEL_KEY_RE), without importing jobs.
_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class CompareError(ValueError):
    """Input :func:`~joulestat.reports.compare.table.compare` (or the loader) cannot use.
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


class JobFigures(Protocol):
    """What grouping reads of a compared job
    (:class:`joulestat.reports.compare.table.JobFigures`, whose module imports this one:
    a protocol, so this module needs nothing of that one)."""

    @property
    def job_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def setup(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def model(self) -> str | None: ...


class ComparisonRow(Protocol):
    """What naming a baseline reads of a row
    (:class:`joulestat.reports.compare.table.ComparisonRow`)."""

    @property
    def job(self) -> str | None: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def group(self) -> str: ...


def check_by(by: str) -> None:
    """Raise :class:`CompareError` (argument ``by``) unless ``by`` is a grouping."""
    key = label_key(by)
    if by in (*BY_CHOICES, NAME_BY, MODEL_BY) or (key is not None and _LABEL_KEY.match(key)):
        return
    raise CompareError("by", f"expected one of {', '.join(BY_CHOICES)}, {NAME_BY}, "
                       f"{MODEL_BY} or label:KEY (a label key), got {by!r}")


def split_by_setup(jobs: Iterable[JobFigures], by: str) -> bool:
    """Whether ``by="label:KEY"`` or ``by="name"`` rows must each be one setup: the jobs
    ran on more than one (for ``name``: the runs of one name did; see the module's
    docstring), unless the label names each job's
    setup itself (``joulestat demo``'s ``setup=demo-1vcpu`` on instance type
    ``demo-1vcpu``), when its rows are one setup each already. Never for the other
    groupings."""
    jobs = list(jobs)
    if by == NAME_BY:  # a name whose runs ran on several setups
        setups: dict[str, set[str]] = {}
        for job in jobs:
            setups.setdefault(job.name, set()).add(job.setup)
        return any(len(found) > 1 for found in setups.values())
    key = label_key(by)
    if key is None:
        return False
    return (len({job.setup for job in jobs}) > 1
            and any(job.labels.get(key) != job.setup for job in jobs))


def group_of(job: JobFigures, by: str, per_setup: bool = False) -> str:
    """The row a job joins: its id (``job``), its setup (``instance_type``),
    ``KEY=value`` of its label (``label:KEY``; ``KEY unset`` without it; with
    ``per_setup``, followed by `` · `` and its setup) or ``model=NAME`` (``model``; a
    job given whole, not as :func:`by_model`'s part, is its own row, by id)."""
    if by == "job":
        return job.job_id
    if by == MODEL_BY:
        return job.job_id if job.model is None else f"{MODEL_ROW}{job.model}"
    if by == NAME_BY:
        return f"{job.name}{SETUP_SEPARATOR}{job.setup}" if per_setup else job.name
    key = label_key(by)
    if key is None:
        return job.setup
    if key not in job.labels:
        value = f"{key} unset"
    else:  # a row name is shown
        value = f"{key}={redact_labels({key: job.labels[key]})[key]}"
    return f"{value}{SETUP_SEPARATOR}{job.setup}" if per_setup else value


def find_baseline(rows: list[ComparisonRow], baseline: str, by: str) -> int:
    """The index of the row ``baseline`` names among ``rows`` (a job id or name for
    ``by="job"``, else a row's group, or a label's bare value: ``4`` for
    ``concurrency=4``); raises :class:`CompareError` (argument ``baseline``) naming the
    rows it could have been."""
    if by == "job":
        found = [i for i, r in enumerate(rows) if r.job_id == baseline]
        found = found or [i for i, r in enumerate(rows) if r.job == baseline]
        if len(found) > 1:
            ids = ", ".join(rows[i].job_id or "" for i in found)
            raise CompareError("baseline", f"{len(found)} jobs are named {baseline!r} "
                               f"(ids {ids}): give the job id")
        known = ", ".join(sorted({r.job or "" for r in rows}))
    else:
        found = [i for i, r in enumerate(rows) if r.group.lower() == baseline.lower()]
        prefix = f"{label_key(by)}=" if label_key(by) is not None else (
            MODEL_ROW if by == MODEL_BY else None)
        if not found and prefix is not None:  # "4" for "concurrency=4", "bert" for model=
            found = [i for i, r in enumerate(rows) if r.group == f"{prefix}{baseline}"]
        known = ", ".join(dict.fromkeys(r.group for r in rows))
        if not found and label_key(by) is not None:  # a value whose rows are per setup
            found = _one_setup(rows, [baseline, f"{prefix}{baseline}"], known)
        if not found and by == NAME_BY:  # a name whose rows are per setup
            found = _one_setup(rows, [baseline], known)
    if not found:
        what = "jobs" if by == "job" else "instance types" if by in BY_CHOICES else (
            "models" if by == MODEL_BY else "job names" if by == NAME_BY
            else f"values of label {label_key(by)}")
        raise CompareError("baseline", f"{baseline!r} is none of the compared "
                           f"{what} ({known or 'none'})")
    return found[0]  # per-unit rows come first, so a setup present both ways is per unit


def _one_setup(rows: list[ComparisonRow], names: list[str], known: str) -> list[int]:
    """The row of a label value split by setup (``concurrency=1`` for ``concurrency=1 ·
    g5.xlarge``) when one setup has it; a value on several setups names no row, since
    picking one would pick the hardware for the reader."""
    heads = {name.lower() + SETUP_SEPARATOR for name in names}
    found = [i for i, r in enumerate(rows)
             if any(r.group.lower().startswith(head) for head in heads)]
    groups = list(dict.fromkeys(rows[i].group for i in found))
    if len(groups) > 1:
        raise CompareError("baseline", f"{names[0]!r} is {len(groups)} rows, one per setup "
                           f"({', '.join(groups)}): name one of them (known: {known})")
    return found
