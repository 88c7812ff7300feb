"""CodeCarbon ``emissions.csv`` rows -> imported jobs.

Why read CodeCarbon's files: teams already have them, and putting those runs in the
same store lets the dashboard, reports and ``compare`` put them beside joulestat's
measurements. The file is read as text; codecarbon itself is never imported.

Mapping, per row (one tracker run):

* job id ``codecarbon:<run_id>``, name ``codecarbon:<project_name>`` (not the bare
  project name: a joulestat run of the same work is often named like the project, and
  ``compare --jobs NAME`` takes every run of a name), kind ``other``; ``joulestat import
  --name/--kind/--label`` set them. Labels: ``project_name``, ``experiment_id``,
  ``codecarbon_version``, ``cpu_model``, ``gpu_model``, ``tracking_mode`` (those
  present), and CodeCarbon's own result, verbatim from the CSV:
  ``codecarbon_emissions_kg`` (its CO2e) and ``codecarbon_energy_kwh``
  (``energy_consumed``, with its PUE). Labels travel with the job into reports and
  exports, so CodeCarbon's figure stays beside joulestat's recomputation
  (:mod:`joulestat.reports.external`). Rows of the same ``run_id`` are cumulative
  snapshots of one run (CodeCarbon appends one at each flush and at stop): the last
  one wins.
* one node ``codecarbon:<run_id>`` held from ``timestamp - duration`` to
  ``timestamp`` (CodeCarbon writes the stop time as local time without a zone; a
  naive timestamp is read as this machine's local time), instance type ``local``
  (``unknown`` on a cloud: CodeCarbon does not record the type, so cost is unknown).
* region: ``cloud_region`` on a cloud, else the US state / Canadian province named in
  ``region`` when joulestat has data for it, else ``country_iso_code``; nothing
  known -> the world average, and the report says so.
* energy: ``cpu_energy`` -> cpu, ``gpu_energy`` -> accelerator (joulestat's one
  component for every accelerator), ``ram_energy`` -> dram, kWh x 3.6e6 = J.
  CodeCarbon multiplies its energy by its ``pue`` setting; joulestat stores energy at
  the server and applies its own PUE in reports, so the energy is divided by ``pue``
  first (1.0 by default, which changes nothing). CodeCarbon does not split idle from
  dynamic power: everything is stored as dynamic.
* sources say what CodeCarbon measured with, as far as its CSV tells: GPU energy is
  NVML's energy counter (``import:codecarbon/nvml_energy``), RAM energy always its
  model of installed memory (``import:codecarbon/model:codecarbon-ram``); CPU energy
  is ``import:codecarbon`` alone, because the CSV does not say whether CodeCarbon read
  RAPL or fell back to TDP x CPU load, so it is never called measured
  (:mod:`joulestat.reports.sources`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from datetime import datetime

from joulestat.carbon.codecarbon_data import default_grid_data
from joulestat.carbon.intensity import CANADA_PROVINCES
from joulestat.carbon.units import J_PER_KWH
from joulestat.core.plausible import Implausible, check_epoch, check_node_energy
from joulestat.core.tick import Component
from joulestat.core.validation import JOB_ID_RE, JobError, validate_labels, validate_name
from joulestat.store.import_writer import ImportedJob, ImportedNode

SOURCE = "import:codecarbon"
REQUIRED = ("timestamp", "duration", "cpu_energy", "gpu_energy", "ram_energy")
COMPONENTS = (("cpu_energy", Component.CPU), ("gpu_energy", Component.ACCELERATOR),
              ("ram_energy", Component.DRAM))
# What CodeCarbon measured each component with, where its CSV says so (module doc).
SOURCES = {Component.CPU: SOURCE, Component.ACCELERATOR: f"{SOURCE}/nvml_energy",
           Component.DRAM: f"{SOURCE}/model:codecarbon-ram"}
LABEL_COLUMNS = ("project_name", "experiment_id", "codecarbon_version", "cpu_model",
                 "gpu_model", "tracking_mode")
# CodeCarbon's own result, kept verbatim as labels (CSV column -> label key)
RESULT_LABELS = (("emissions", "codecarbon_emissions_kg"),
                 ("energy_consumed", "codecarbon_energy_kwh"))
NAME_PREFIX = "codecarbon:"


class CodeCarbonError(ValueError):
    """A row (or the header) that cannot be imported; ``line`` is 1-based in the file."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def looks_like_codecarbon(text: str) -> bool:
    """Whether ``text``'s first line is a CodeCarbon emissions header."""
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    names = {name.strip() for name in header.split(",")}
    return {"timestamp", "cpu_energy", "duration"} <= names


def _number(row: dict[str, str], column: str, line: int, minimum: float = 0.0,
            default: float | None = None) -> float:
    raw = (row.get(column) or "").strip()
    if raw == "" and default is not None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise CodeCarbonError(line, f"{column}: expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise CodeCarbonError(line, f"{column}: expected a finite number >= {minimum:g}, "
                              f"got {raw!r}")
    return value


def _end_s(row: dict[str, str], line: int) -> float:
    raw = (row.get("timestamp") or "").strip()
    try:
        stamp = datetime.fromisoformat(raw)
    except ValueError:
        raise CodeCarbonError(line, f"timestamp: expected an ISO 8601 time, got {raw!r}"
                              ) from None
    if stamp.tzinfo is None:
        stamp = stamp.astimezone()  # CodeCarbon writes local time without a zone
    try:
        return check_epoch(stamp.timestamp())
    except Implausible as exc:
        raise CodeCarbonError(line, f"timestamp: {raw!r}: {exc}") from None


def _region(row: dict[str, str]) -> str:
    cloud = (row.get("cloud_region") or "").strip()
    if (row.get("on_cloud") or "").strip().upper() == "Y" and cloud:
        return cloud
    country = (row.get("country_iso_code") or "").strip().upper()
    place = (row.get("region") or "").strip().lower()
    if country == "USA" and place:
        for code, state in default_grid_data().us_states.items():
            if state.name.lower() == place:
                return f"US-{code}"
    if country == "CAN" and place:
        for code, province in CANADA_PROVINCES.items():
            if province == place:
                return f"CA-{code}"
    return country


def _run_id(row: dict[str, str]) -> str:
    run_id = (row.get("run_id") or "").strip()
    if run_id and JOB_ID_RE.match(f"codecarbon:{run_id}"):
        return run_id
    # No usable run id (old files): a stable id from what identifies the run, so that
    # importing the file again finds the same job.
    key = "|".join((row.get(c) or "") for c in ("timestamp", "project_name",
                                                  "experiment_id", "run_id"))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _job(row: dict[str, str], line: int) -> ImportedJob:
    end_s = _end_s(row, line)
    duration_s = _number(row, "duration", line)
    pue = _number(row, "pue", line, minimum=1.0, default=1.0)
    energy_j = {component: _number(row, column, line) * J_PER_KWH / pue
                for column, component in COMPONENTS}
    for column, component in COMPONENTS:
        try:
            check_node_energy(energy_j[component], duration_s)
        except Implausible as exc:
            raise CodeCarbonError(line, f"{column}: {exc}") from None
    try:
        check_node_energy(sum(energy_j.values()), duration_s)
    except Implausible as exc:
        raise CodeCarbonError(line, f"cpu_energy, gpu_energy and ram_energy over duration "
                              f"{duration_s:g} s: {exc}") from None
    try:
        check_epoch(end_s - duration_s)
    except Implausible as exc:
        raise CodeCarbonError(line, f"duration: starts at {exc}") from None
    # joulestat job names carry no path separators; CodeCarbon project names may
    raw_name = (row.get("project_name") or "").strip() or "unnamed"
    result = {key: (row.get(column) or "").strip() for column, key in RESULT_LABELS}
    for column, key in RESULT_LABELS:
        if result[key]:
            _number(row, column, line)
    try:
        name = validate_name(NAME_PREFIX + raw_name.replace("/", "-").replace("\\", "-"))
        labels = validate_labels({
            **{column: row[column].strip() for column in LABEL_COLUMNS
               if (row.get(column) or "").strip()},
            **{key: value for key, value in result.items() if value}})
    except JobError as exc:
        raise CodeCarbonError(line, f"project_name or labels: {exc}") from None
    run_id = _run_id(row)
    on_cloud = (row.get("on_cloud") or "").strip().upper() == "Y"
    version = (row.get("codecarbon_version") or "").strip()
    node = ImportedNode(
        node=f"codecarbon:{run_id}", instance_type="unknown" if on_cloud else "local",
        region=_region(row), started_s=end_s - duration_s, ended_s=end_s,
        dynamic_j={c: j for c, j in energy_j.items() if j > 0}, idle_j={}, units={},
        source=SOURCE, sources={c: SOURCES[c] for c, j in energy_j.items() if j > 0},
        agent_version=f"codecarbon {version}".strip(),
        cpu_model=(row.get("cpu_model") or "").strip(),
    )
    return ImportedJob(id=f"codecarbon:{run_id}", name=name, kind="other", labels=labels,
                       origin="import:codecarbon", started_s=end_s - duration_s,
                       nodes=(node,))


def parse_codecarbon(text: str) -> list[ImportedJob]:
    """Every run in an ``emissions.csv``; :class:`CodeCarbonError` at the first bad row."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline=""))
    header = [name.strip() for name in reader.fieldnames or []]
    missing = [column for column in REQUIRED if column not in header]
    if missing:
        raise CodeCarbonError(1, f"not a CodeCarbon emissions file: no column(s) "
                              f"{', '.join(missing)}")
    reader.fieldnames = header
    jobs: dict[str, ImportedJob] = {}
    for row in reader:
        line = reader.line_num
        if None in row:
            raise CodeCarbonError(line, f"{len(header) + len(row[None])} fields, the header "
                                  f"has {len(header)}")
        if not any((value or "").strip() for value in row.values()):
            continue
        job = _job(row, line)
        jobs[job.id] = job  # a later snapshot of the same run replaces the earlier one
    return list(jobs.values())
