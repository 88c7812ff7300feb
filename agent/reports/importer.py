"""``joulestat import``: joulestat JSON reports and CodeCarbon ``emissions.csv`` files into
a store, each file all or nothing.

Why: a job measured on machines with separate stores (or by CodeCarbon) can be read
with the same tools as the rest once it is in one store. A JSON report carries every
node's exact per-component dynamic and idle joules, units and held time, so a job
exported and imported again reports the same energy, CO2e, cost and units. Its
per-node series (``energy_series``, ``unit_series``: the report's bins with dynamic and
idle joules apart) become one row per bin, so the imported job keeps its profile and a
report of it gives the same power series back; a series that does not add up to the
node's totals is set aside for that component (the totals win, as one row over the
node's time, as for reports made before the series existed). Entries for the same job id, in one
file or across files and imports, merge into one multi-node job. A node still running
when the report was made is imported as held until ``generated_s``, the time the
report's figures were computed for.

A report's ``job.agent_labels`` (what joulestat recorded about how it measured the job:
``cpu_source``, ``idle_policy``) are imported apart from its labels; every report this
joulestat reads has them, so a report without them is refused, naming the field.

Schema 1 is refused with a message of its own: it was written during development,
before the first release (0.1.0), and named every accelerator ``gpu``. Reading it took a
renaming pass over every figure, series and source, and its labels held what are agent
labels now; neither is worth carrying for files no release wrote, and a store holding a
``gpu`` component would report it apart from ``accelerator``. Any other version this
joulestat does not know is refused, naming the versions it reads.

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

from joulestat.attribution.agent_labels import (
    AGENT_LABEL_KEYS,
    merge_agent_labels,
    validate_agent_labels,
)
from joulestat.core.plausible import Implausible, check_epoch, check_node_energy
from joulestat.core.redact import REDACTED
from joulestat.core.validation import (
    JobError,
    control_character,
    validate_job_id,
    validate_kind,
    validate_labels,
    validate_name,
    validate_units,
)
from joulestat.reports.codecarbon_import import (
    CodeCarbonError,
    looks_like_codecarbon,
    parse_codecarbon,
)
from joulestat.reports.model import REPORT_FORMAT, SCHEMA_VERSION
from joulestat.store.import_writer import (
    EnergyBin,
    ImportConflict,
    ImportedJob,
    ImportedNode,
    write_imported_jobs,
)

SOURCE = "import:joulestat"
_PREFIX = SOURCE + "/"
# The report schemas this joulestat reads; schema 3 added bounds (recomputed on import
# from the sources the rows keep).
READ_VERSIONS = (2, SCHEMA_VERSION)
# Schema 1: joulestat's development format before the first release, refused by name.
DEVELOPMENT_SCHEMA = 1
_DEVELOPMENT = "joulestat's development before its first release (0.1.0)"
_EXPORT_AGAIN = "export the job again with this joulestat (joulestat report JOB --format json)"


class ImportFileError(ValueError):
    """A file that cannot be imported; the message names the file and where in it."""


@dataclass
class FileResult:
    """What one file did: its jobs, the node parts written, those already stored
    exactly so (``unchanged``: a repeated import), and parts skipped with the reason."""

    path: Path
    kind: str  # "joulestat" or "codecarbon"
    jobs: list[str] = field(default_factory=list)
    nodes: int = 0
    skipped: list[str] = field(default_factory=list)
    unchanged: int = 0


@dataclass(frozen=True, slots=True)
class Overrides:
    """``joulestat import --name/--kind/--label``: set on every job of the files (a
    CodeCarbon CSV knows no kind, and its project name need not be the job's name)."""

    name: str | None = None
    kind: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def apply(self, job: ImportedJob) -> ImportedJob:
        return replace(job, name=self.name or job.name, kind=self.kind or job.kind,
                       labels={**job.labels, **self.labels})


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
    if not isinstance(value, str):
        raise _Bad(where, f"expected text, got {json.dumps(value)}")
    found = control_character(value)
    if found is not None:
        raise _Bad(where, f"expected text without control characters, got {found} in "
                          f"{json.dumps(value[:80])}")
    return value


def _epoch(value: Any, where: str) -> float:
    """A timestamp, held to :mod:`joulestat.core.plausible`'s limits."""
    number = _number(value, where, None)
    try:
        return check_epoch(number)
    except Implausible as exc:
        raise _Bad(where, str(exc)) from None


def _plausible_energy(energy_j: float, duration_s: float, where: str) -> float:
    try:
        return check_node_energy(energy_j, duration_s)
    except Implausible as exc:
        raise _Bad(where, str(exc)) from None


def _source(originals: Iterable[str]) -> str:
    """``import:joulestat/<original sources>``; a source already imported through
    joulestat is not wrapped twice, so re-exporting and re-importing is stable."""
    atoms: set[str] = set()
    for original in originals:
        text = original[len(_PREFIX):] if original.startswith(_PREFIX) else original
        atoms.update(a for a in text.split(",") if a)
    return f"{_PREFIX}{','.join(sorted(atoms))}" if atoms else SOURCE


def _node(entry: Any, where: str, generated_s: float, version: str) -> ImportedNode:
    """One node's part."""
    name = _text(_get(entry, "node", where), f"{where}.node").strip()
    if not name:
        raise _Bad(f"{where}.node", "must not be empty")
    started_s = _epoch(_get(entry, "started_s", where), f"{where}.started_s")
    ended = _get(entry, "ended_s", where)
    ended_s = generated_s if ended is None else _epoch(ended, f"{where}.ended_s")
    if ended_s < started_s:
        raise _Bad(f"{where}.ended_s", "ends before started_s")
    components = _get(entry, "components", where)
    if not isinstance(components, dict):
        raise _Bad(f"{where}.components", "expected an object of components")
    dynamic: dict[str, float] = {}
    idle: dict[str, float] = {}
    for component, figures in components.items():
        at = f"{where}.components.{component}"
        named = _text(component, at)
        for figure, into in (("dynamic_j", dynamic), ("idle_j", idle)):
            into[named] = _plausible_energy(
                _number(_get(figures, figure, at), f"{at}.{figure}"), ended_s - started_s,
                f"{at}.{figure}")
    _plausible_energy(sum(dynamic.values()) + sum(idle.values()), ended_s - started_s,
                      f"{where}.components (all together)")
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
    series = _energy_series(entry.get("energy_series", []), f"{where}.energy_series",
                            dynamic, idle)
    unit_series = _unit_series(entry.get("unit_series", []), f"{where}.unit_series", counts)
    sources = entry.get("sources", {})
    if not isinstance(sources, dict) or not all(
            isinstance(v, list) and all(isinstance(s, str) for s in v) for v in sources.values()):
        raise _Bad(f"{where}.sources", "expected an object of lists of text")
    return ImportedNode(
        node=name,
        instance_type=_text(_get(entry, "instance_type", where), f"{where}.instance_type"),
        region=_text(_get(entry, "region", where), f"{where}.region"),
        started_s=started_s, ended_s=ended_s, dynamic_j=dynamic, idle_j=idle, units=counts,
        source=SOURCE, sources={c: _source(sources.get(c, [])) for c in dynamic},
        agent_version=version, series=series, unit_series=unit_series,
    )


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _energy_series(raw: Any, where: str, dynamic: dict[str, float],
                   idle: dict[str, float]) -> tuple[EnergyBin, ...]:
    """The bins of components whose series adds up to their totals, scaled to them
    exactly (float sums differ in the last digits); other components get none. Bins of
    one component over the same time are summed."""
    if not isinstance(raw, list):
        raise _Bad(where, "expected a list of bins")
    summed: dict[tuple[float, float, str], tuple[float, float]] = {}
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        t0 = _number(_get(item, "t_start_s", at), f"{at}.t_start_s", None)
        t1 = _number(_get(item, "t_end_s", at), f"{at}.t_end_s", None)
        if t1 < t0:
            raise _Bad(f"{at}.t_end_s", "ends before t_start_s")
        component = _text(_get(item, "component", at), f"{at}.component")
        dynamic_j = _number(_get(item, "dynamic_j", at), f"{at}.dynamic_j")
        idle_j = _number(_get(item, "idle_j", at), f"{at}.idle_j")
        known_d, known_i = summed.get((t0, t1, component), (0.0, 0.0))
        summed[(t0, t1, component)] = (known_d + dynamic_j, known_i + idle_j)
    bins = [(t0, t1, c, d, i) for (t0, t1, c), (d, i) in summed.items()]
    kept: list[EnergyBin] = []
    for component in dynamic:
        mine = [b for b in bins if b[2] == component]
        sum_d, sum_i = sum(b[3] for b in mine), sum(b[4] for b in mine)
        if not mine or not (_close(sum_d, dynamic[component]) and _close(sum_i, idle[component])):
            continue
        # Scaled to the totals only where float sums differ beyond their last digits:
        # a re-export of an import must write back the very same rows.
        scale_d = 1.0 if math.isclose(sum_d, dynamic[component], rel_tol=1e-12) else (
            dynamic[component] / sum_d if sum_d else 0.0)
        scale_i = 1.0 if math.isclose(sum_i, idle[component], rel_tol=1e-12) else (
            idle[component] / sum_i if sum_i else 0.0)
        kept += [(t0, t1, c, d * scale_d, i * scale_i) for t0, t1, c, d, i in mine]
    return tuple(sorted(kept))


def _unit_series(raw: Any, where: str, counts: dict[str, float]
                 ) -> tuple[tuple[float, str, float], ...]:
    """``(t_end_s, unit, count)`` of units whose series adds up to their count."""
    if not isinstance(raw, list):
        raise _Bad(where, "expected a list of unit counts")
    points: list[tuple[float, str, float]] = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        try:
            unit, count = validate_units(_get(item, "unit", at), _get(item, "count", at))
        except JobError as exc:
            raise _Bad(at, str(exc)) from None
        points.append((_number(_get(item, "t_end_s", at), f"{at}.t_end_s", None), unit, count))
    return tuple(sorted(p for p in points if p[1] in counts and _close(
        sum(q[2] for q in points if q[1] == p[1]), counts[p[1]])))


def _report_job(entry: Any) -> ImportedJob:
    if not isinstance(entry, dict):
        raise _Bad("", f"expected a report object, got {type(entry).__name__}")
    if entry.get("format") != REPORT_FORMAT:
        raise _Bad("format", f"expected {REPORT_FORMAT!r}, got {json.dumps(entry.get('format'))}")
    schema = entry.get("schema_version")
    versions = (f"this joulestat reads versions {', '.join(map(str, READ_VERSIONS[:-1]))} "
                f"and {READ_VERSIONS[-1]}")
    if schema == DEVELOPMENT_SCHEMA and not isinstance(schema, bool):
        raise _Bad("schema_version", f"{DEVELOPMENT_SCHEMA} is the format of {_DEVELOPMENT}, "
                   f"which named every accelerator 'gpu': no longer read ({versions}); "
                   f"{_EXPORT_AGAIN}")
    if isinstance(schema, bool) or not isinstance(schema, int) or schema not in READ_VERSIONS:
        raise _Bad("schema_version", f"{versions}, got {json.dumps(schema)}")
    job = _get(entry, "job", "")
    try:
        job_id = validate_job_id(_get(job, "id", "job"))
        name = validate_name(_get(job, "name", "job"))
        kind = validate_kind(_get(job, "kind", "job"))
        labels = validate_labels(_get(job, "labels", "job"))
        if "agent_labels" not in job:
            raise _Bad("job.agent_labels", f"missing, as in reports of {_DEVELOPMENT}, "
                       f"which kept them among the labels: no longer read; {_EXPORT_AGAIN}")
        agent_labels = validate_agent_labels(job["agent_labels"], AGENT_LABEL_KEYS)
    except JobError as exc:
        raise _Bad("job", str(exc)) from None
    generated_s = _epoch(_get(entry, "generated_s", ""), "generated_s")
    started_s = _epoch(_get(job, "started_s", "job"), "job.started_s")
    version = _get(entry, "agent_version", "")
    nodes = _get(entry, "nodes", "")
    if not isinstance(nodes, list):
        raise _Bad("nodes", "expected a list of nodes")
    parts = tuple(_node(n, f"nodes[{i}]", generated_s, f"joulestat {version}")
                  for i, n in enumerate(nodes))
    return ImportedJob(job_id, name, kind, labels, "import:joulestat", started_s, parts,
                       placeholder=REDACTED, agent_labels=agent_labels)


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
                                 nodes=tuple(nodes.values()),
                                 agent_labels=merge_agent_labels(known.agent_labels,
                                                                 job.agent_labels))
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


def import_file(engine: Engine, path: Path, overrides: Overrides | None = None) -> FileResult:
    """Validate then write one file in one transaction."""
    kind, jobs = parse_file(path)
    if overrides is not None:
        jobs = [overrides.apply(job) for job in jobs]
    try:
        written = write_imported_jobs(engine, jobs)
    except (ImportConflict, ValueError) as exc:
        raise ImportFileError(f"{path}: {exc}") from None
    return FileResult(path, kind, [j.id for j in jobs], len(written.written), written.skipped,
                      len(written.unchanged))
