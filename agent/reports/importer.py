"""``joulestat import``: joulestat JSON reports and CodeCarbon ``emissions.csv`` files into
a store, each file all or nothing.

Why: a job measured on machines with separate stores (or by CodeCarbon) can be read
with the same tools as the rest once it is in one store. A JSON report carries every
node's exact per-component dynamic and idle joules, units and held time, so a job
exported and imported again reports the same energy, CO2e, cost and units; what it
does not carry is the tick-by-tick profile (imported parts are one aggregate row per
component, see :mod:`agent.store.import_writer`). Entries for the same job id, in one
file or across files and imports, merge into one multi-node job. A node still running
when the report was made is imported as held until ``generated_s``, the time the
report's figures were computed for.

A file is validated completely before anything is written, then written in one
transaction: a bad file imports nothing and its error names the file and the line
(CSV) or the entry and field (JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from agent.jobs.registry import (
    JobError,
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
    validate_units,
)
from agent.redact import REDACTED
from agent.reports.codecarbon_import import (
    CodeCarbonError,
    looks_like_codecarbon,
    parse_codecarbon,
)
from agent.reports.model import REPORT_FORMAT, SCHEMA_VERSION
from agent.store.import_writer import (
    ImportConflict,
    ImportedJob,
    ImportedNode,
    write_imported_jobs,
)

SOURCE = "import:joulestat"
_PREFIX = SOURCE + "/"


class ImportFileError(ValueError):
    """A file that cannot be imported; the message names the file and where in it."""


@dataclass
class FileResult:
    path: Path
    kind: str  # "joulestat" or "codecarbon"
    jobs: list[str] = field(default_factory=list)
    nodes: int = 0
    skipped: list[str] = field(default_factory=list)


class _Bad(ValueError):
    """A field of a JSON entry; ``where`` is its path, e.g. ``nodes[0].started_s``."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")


def _get(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise _Bad(where, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise _Bad(f"{where}.{key}" if where else key, "missing")
    return obj[key]


def _number(value: Any, where: str, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(where, f"expected a number, got {json.dumps(value)}")
    number = float(value)
    if not math.isfinite(number) or (minimum is not None and number < minimum):
        raise _Bad(where, f"expected a finite number >= {minimum:g}, got {value!r}")
    return number


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or any(ord(ch) < 32 for ch in value):
        raise _Bad(where, f"expected text without control characters, got {json.dumps(value)}")
    return value


def _source(originals: Iterable[str]) -> str:
    """``import:joulestat/<original sources>``; a source already imported through
    joulestat is not wrapped twice, so re-exporting and re-importing is stable."""
    atoms: set[str] = set()
    for original in originals:
        text = original[len(_PREFIX):] if original.startswith(_PREFIX) else original
        atoms.update(a for a in text.split(",") if a)
    return f"{_PREFIX}{','.join(sorted(atoms))}" if atoms else SOURCE


def _node(entry: Any, where: str, generated_s: float, version: str) -> ImportedNode:
    name = _text(_get(entry, "node", where), f"{where}.node").strip()
    if not name:
        raise _Bad(f"{where}.node", "must not be empty")
    started_s = _number(_get(entry, "started_s", where), f"{where}.started_s", None)
    ended = _get(entry, "ended_s", where)
    ended_s = generated_s if ended is None else _number(ended, f"{where}.ended_s", None)
    if ended_s < started_s:
        raise _Bad(f"{where}.ended_s", "ends before started_s")
    components = _get(entry, "components", where)
    if not isinstance(components, dict):
        raise _Bad(f"{where}.components", "expected an object of components")
    dynamic, idle = {}, {}
    for component, figures in components.items():
        at = f"{where}.components.{component}"
        _text(component, at)
        dynamic[component] = _number(_get(figures, "dynamic_j", at), f"{at}.dynamic_j")
        idle[component] = _number(_get(figures, "idle_j", at), f"{at}.idle_j")
    units = _get(entry, "work_units", where)
    if not isinstance(units, dict):
        raise _Bad(f"{where}.work_units", "expected an object of unit counts")
    counts = {}
    for unit, count in units.items():
        try:
            name_, amount = validate_units(unit, count)
        except JobError as exc:
            raise _Bad(f"{where}.work_units.{unit}", str(exc)) from None
        counts[name_] = amount
    sources = entry.get("sources", {})
    if not isinstance(sources, dict) or not all(
            isinstance(v, list) and all(isinstance(s, str) for s in v) for v in sources.values()):
        raise _Bad(f"{where}.sources", "expected an object of lists of text")
    return ImportedNode(
        node=name,
        instance_type=_text(_get(entry, "instance_type", where), f"{where}.instance_type"),
        region=_text(_get(entry, "region", where), f"{where}.region"),
        started_s=started_s, ended_s=ended_s, dynamic_j=dynamic, idle_j=idle, units=counts,
        source=SOURCE, sources={c: _source(sources.get(c, [])) for c in components},
        agent_version=version,
    )


def _report_job(entry: Any) -> ImportedJob:
    if not isinstance(entry, dict):
        raise _Bad("", f"expected a report object, got {type(entry).__name__}")
    if entry.get("format") != REPORT_FORMAT:
        raise _Bad("format", f"expected {REPORT_FORMAT!r}, got {json.dumps(entry.get('format'))}")
    if entry.get("schema_version") != SCHEMA_VERSION:
        raise _Bad("schema_version", f"this joulestat reads version {SCHEMA_VERSION}, got "
                   f"{json.dumps(entry.get('schema_version'))}")
    job = _get(entry, "job", "")
    try:
        job_id = validate_job_id(_get(job, "id", "job"))
        name = validate_name(_get(job, "name", "job"))
        kind = validate_kind(_get(job, "kind", "job"))
        labels = validate_labels(_get(job, "labels", "job"))
    except JobError as exc:
        raise _Bad("job", str(exc)) from None
    generated_s = _number(_get(entry, "generated_s", ""), "generated_s", None)
    started_s = _number(_get(job, "started_s", "job"), "job.started_s", None)
    version = _get(entry, "agent_version", "")
    nodes = _get(entry, "nodes", "")
    if not isinstance(nodes, list):
        raise _Bad("nodes", "expected a list of nodes")
    parts = tuple(_node(n, f"nodes[{i}]", generated_s, f"joulestat {version}")
                  for i, n in enumerate(nodes))
    return ImportedJob(job_id, name, kind, labels, "import:joulestat", started_s, parts,
                       placeholder=REDACTED)


def _merge(jobs: list[tuple[int, ImportedJob]]) -> list[ImportedJob]:
    """Entries of one job id become one job: nodes joined (a later entry's node
    replaces an earlier one of the same name), labels merged, earliest start."""
    merged: dict[str, ImportedJob] = {}
    for index, job in jobs:
        known = merged.get(job.id)
        if known is None:
            merged[job.id] = job
            continue
        if (known.name, known.kind) != (job.name, job.kind):
            raise _Bad(f"entry {index}: job", f"job {job.id!r} is {known.kind} job "
                       f"{known.name!r} in an earlier entry, {job.kind} job {job.name!r} here")
        nodes = {n.node: n for n in known.nodes}
        nodes.update({n.node: n for n in job.nodes})
        labels = {**known.labels, **{k: v for k, v in job.labels.items()
                                     if not (v == REDACTED and k in known.labels)}}
        merged[job.id] = replace(known, labels=labels,
                                 started_s=min(known.started_s, job.started_s),
                                 nodes=tuple(nodes.values()))
    return list(merged.values())


def parse_reports(text: str, path: Path) -> list[ImportedJob]:
    """The jobs of a JSON report file (one report, or a list as ``report --all`` writes)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImportFileError(f"{path}: line {exc.lineno} column {exc.colno}: not valid "
                              f"JSON ({exc.msg})") from None
    entries = data if isinstance(data, list) else [data]
    jobs = []
    for index, entry in enumerate(entries):
        try:
            jobs.append((index, _report_job(entry)))
        except _Bad as exc:
            raise ImportFileError(f"{path}: entry {index}: {exc}") from None
    try:
        return _merge(jobs)
    except _Bad as exc:
        raise ImportFileError(f"{path}: {exc}") from None


def parse_file(path: Path) -> tuple[str, list[ImportedJob]]:
    """(kind, jobs) of one file, validated; :class:`ImportFileError` naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportFileError(f"{path}: cannot read: {exc}") from None
    if text.lstrip("\ufeff \t\r\n")[:1] in ("{", "["):
        return "joulestat", parse_reports(text, path)
    if looks_like_codecarbon(text):
        try:
            return "codecarbon", parse_codecarbon(text)
        except CodeCarbonError as exc:
            raise ImportFileError(f"{path}: line {exc.line}: {exc}") from None
    raise ImportFileError(f"{path}: line 1: neither a joulestat JSON report nor a CodeCarbon "
                          "emissions.csv (no timestamp, duration, cpu_energy header)")


def import_file(engine: Engine, path: Path) -> FileResult:
    """Validate then write one file in one transaction."""
    kind, jobs = parse_file(path)
    try:
        written = write_imported_jobs(engine, jobs)
    except (ImportConflict, ValueError) as exc:
        raise ImportFileError(f"{path}: {exc}") from None
    return FileResult(path, kind, [j.id for j in jobs], len(written.written), written.skipped)
