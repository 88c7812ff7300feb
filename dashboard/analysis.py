"""What the pages compute from store rows: job tables, load curves, provenance, flags.

Pure functions of query results (no Streamlit, no SQL), so each rule is tested on its
own and reads the same on every page. Comparisons and SLA sizing are not here: the
Compare page runs :func:`joulestat.reports.compare.table.compare`, as ``joulestat compare`` does.

* a job's "setup" is the set of instance types it ran on, named as the comparison
  groups it (``c5.4xlarge+p4d.24xlarge`` for a trainer fed by a loader);
* a load-curve point's rate is units per second of running time (``held_s``: start to
  end, or to now while running), its energy per unit the jobs' attributed energy
  (dynamic + their share of idle) over their units: the rule MLPerf Power applies per
  query;
* the CPU-bottleneck flag is read from power, because the store keeps energy and no
  utilisation: a component's load is where its power sits between the lowest and
  highest minute average the node ever showed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from joulestat.core import units
from joulestat.core.redact import redact_labels
from joulestat.core.tick import Component
from joulestat.reports.compare.groups import setup_name
from joulestat.reports.external import shown_labels
from joulestat.reports.sources import source_class

if TYPE_CHECKING:  # the store's records
    from joulestat.store.jobs import JobSummary, JobTotals
    from joulestat.store.provenance import SourceEnergy
    from joulestat.store.series import SeriesPoint

    # A job as a list shows it (JobTotals) or as the detail page reads it (JobDetail).
    AnyJob = JobTotals | JobSummary
# The Jobs table: the name first (what people look for), the id last and short; each
# figure as text from joulestat.core.units, so a cell reads as the same figure elsewhere.
JOB_COLUMNS = ("name", "kind", "status", "instance types", "energy", "CO2e (operational)",
               "embodied CO2e", "cost", "energy per unit", "units", "started", "duration",
               "nodes", "labels", "id")
# Numbers behind the text, for sorting and filtering; not shown.
SORT_COLUMNS = ("_job_id", "_energy_j", "_co2e_g", "_cost_usd", "_energy_per_unit_j",
                "_started_s")
SHORT_ID = 8
# Overlaps cpu and dram (RAPL psys): reported, never added to a total.
OVERLAPPING = (Component.PLATFORM,)


def provenance_class(source: str) -> str:
    """:func:`joulestat.reports.sources.source_class`: the one reading of a source chain."""
    return source_class(source)


def provenance_totals(rows: Iterable[SourceEnergy]) -> dict[str, float]:
    """Joules per provenance class, overlapping components left out."""
    totals: defaultdict[str, float] = defaultdict(float)
    for row in rows:
        if row.component not in OVERLAPPING:
            totals[source_class(row.source)] += row.energy_j
    return dict(totals)


def setup_of(job: AnyJob) -> str:
    """The instance types a job ran on, one name per type: its comparison group, named by
    :func:`joulestat.reports.compare.groups.setup_name` so every page and the CLI agree."""
    return setup_name(itype for _node, itype in job.nodes)


def short_id(job_id: str) -> str:
    return job_id[:SHORT_ID]


def main_unit(job: AnyJob) -> tuple[str, float]:
    """The unit a job counted most of (its functional unit), and how many; ("", 0) if none."""
    return max(job.units.items(), key=lambda kv: kv[1], default=("", 0.0))


def job_rows(jobs: Iterable[JobTotals], costs: Mapping[str, JobCost],
             now_s: float) -> dict[str, list[object]]:
    """The Jobs table as columns: text figures for the eye (:data:`JOB_COLUMNS`) and the
    numbers behind them for sorting (:data:`SORT_COLUMNS`); ``started`` stays epoch
    seconds, the page puts it in the viewer's clock."""
    columns: dict[str, list[object]] = {name: [] for name in (*JOB_COLUMNS, *SORT_COLUMNS)}
    no_cost = JobCost()
    for job in jobs:
        cost = costs.get(job.id, no_cost)
        unit, count = main_unit(job)
        per_unit_j = job.total_j / count if count else math.nan
        values = (
            job.name, job.kind, job.status, setup_of(job), units.energy(job.total_j),
            units.mass(cost.operational_g), units.mass(cost.embodied_g),
            units.usd(cost.cost_usd),
            units.per(units.energy(per_unit_j), unit) if count else units.UNKNOWN,
            f"{units.count(count)} {unit}" if unit else units.UNKNOWN, job.started_s,
            units.duration(job.held_s(now_s)), ", ".join(n for n, _t in job.nodes),
            ", ".join(f"{k}={v}" for k, v in redact_labels(shown_labels(job.labels)).items()),
            short_id(job.id),
            job.id, job.total_j, math.nan if cost.operational_g is None else cost.operational_g,
            math.nan if cost.cost_usd is None else cost.cost_usd, per_unit_j, job.started_s)
        for name, value in zip(columns, values, strict=True):
            columns[name].append(value)
    return columns


@dataclass(frozen=True, slots=True)
class JobCost:
    """CO2e and cost of one job; None where they cannot be known.

    One definition of CO2e on every page: ``operational_g`` (energy x PUE x grid
    intensity) is what "CO2e" means, known whenever the energy is; embodied is apart,
    and ``total_g`` (operational + embodied) only where a view labels it so.
    """

    operational_g: float | None = None
    embodied_g: float | None = None
    cost_usd: float | None = None

    @property
    def total_g(self) -> float | None:
        if self.operational_g is None or self.embodied_g is None:
            return None
        return self.operational_g + self.embodied_g


class LoadFigures:
    """Energy per unit and rate of a load level's summed jobs (its ``energy_j``,
    ``units`` and ``run_s``), for the points here and the page's rows alike."""

    __slots__ = ()
    energy_j: float
    units: float
    run_s: float

    @property
    def energy_per_unit_j(self) -> float:
        return self.energy_j / self.units if self.units else math.nan

    @property
    def rate_per_s(self) -> float:
        return self.units / self.run_s if self.run_s > 0 else math.nan


@dataclass(frozen=True, slots=True)
class LoadPoint(LoadFigures):
    """Inference jobs of one setup at one concurrency, summed."""

    setup: str
    level: float  # the load level: the value of the chosen label (concurrency)
    jobs: int
    units: float
    energy_j: float
    run_s: float


def load_curve(jobs: Iterable[JobTotals], unit: str, now_s: float,
               label_key: str = "concurrency",
               left_out: Collection[str] = ()) -> tuple[list[LoadPoint], int]:
    """Points per (setup, level) for jobs whose ``label_key`` label is a positive number
    and that counted some ``unit``, except the jobs ``left_out`` (a smoke test is not a
    load level); also how many labelled jobs were left out for a label that is not a
    positive number."""
    sums: defaultdict[tuple[str, float], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    skipped = 0
    for job in jobs:
        label = job.labels.get(label_key)
        if label is None or job.units.get(unit, 0) <= 0 or job.id in left_out:
            continue
        try:
            level = float(label)
        except ValueError:
            skipped += 1
            continue
        if not math.isfinite(level) or level <= 0:
            skipped += 1
            continue
        point = sums[(setup_of(job), level)]
        point[0] += 1
        point[1] += job.units[unit]
        point[2] += job.total_j
        point[3] += job.held_s(now_s)
    points = [LoadPoint(setup, level, int(n), count, energy, seconds)
              for (setup, level), (n, count, energy, seconds) in sorted(sums.items())]
    return points, skipped


def numeric_label_keys(jobs: Iterable[JobTotals]) -> list[str]:
    """Label keys whose values are positive numbers on at least two jobs: the labels
    that can carry a load level, most used first."""
    found: defaultdict[str, set[str]] = defaultdict(set)
    for job in jobs:
        for key, value in job.labels.items():
            try:
                number = float(value)
            except ValueError:
                continue
            if math.isfinite(number) and number > 0:
                found[key].add(job.id)
    return [k for k, ids in sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
            if len(ids) >= 2]


@dataclass(frozen=True, slots=True)
class Bottleneck:
    """The CPU-bottleneck verdict for one node of a job."""

    node: str
    state: str  # cpu-bound | ok | unknown | no-accelerator
    flagged_share: float = 0.0  # of the job's time on the node
    cpu_load: float = math.nan  # mean, 0..1 of the node's observed range
    accelerator_load: float = math.nan
    reason: str = ""


ACCEL_UNDERUSED = 0.35
CPU_SATURATED = 0.8
FLAG_SHARE = 0.25
MIN_RANGE_W = {Component.CPU: 5.0, Component.ACCELERATOR: 10.0}


def cpu_bottleneck(node: str, series: Iterable[SeriesPoint],
                   ranges: Mapping[str, tuple[float, float]]) -> Bottleneck:
    """Flag a node where accelerators idle while the CPU runs near its top, for at least
    a quarter of the time: the pattern of a data-loading or preprocessing bottleneck."""
    accel = [c for c in (Component.ACCELERATOR,) if c in ranges]
    if not accel:
        return Bottleneck(node, "no-accelerator", reason="no accelerator on this node")
    cpu_low, cpu_high = ranges.get(Component.CPU, (0.0, 0.0))
    acc_low = sum(ranges[c][0] for c in accel)
    acc_high = sum(ranges[c][1] for c in accel)
    if (cpu_high - cpu_low < MIN_RANGE_W[Component.CPU]
            or acc_high - acc_low < MIN_RANGE_W[Component.ACCELERATOR]):
        return Bottleneck(node, "unknown", reason="not enough power history on this node "
                          "to know its idle and busy levels")
    buckets: defaultdict[float, dict[str, float]] = defaultdict(dict)
    for point in series:
        if point.covered_s > 0:
            slot = buckets[point.bucket_end_s]
            slot[point.component] = point.power_w
            slot["_s"] = max(slot.get("_s", 0.0), point.covered_s)
    total_s = flagged_s = cpu_sum = acc_sum = 0.0
    for slot in buckets.values():
        if Component.CPU not in slot or not any(c in slot for c in accel):
            continue
        cpu = _clip((slot[Component.CPU] - cpu_low) / (cpu_high - cpu_low))
        acc = _clip((sum(slot.get(c, 0.0) for c in accel) - acc_low) / (acc_high - acc_low))
        seconds = slot["_s"]
        total_s += seconds
        cpu_sum += cpu * seconds
        acc_sum += acc * seconds
        if acc < ACCEL_UNDERUSED and cpu >= CPU_SATURATED:
            flagged_s += seconds
    if total_s <= 0:
        return Bottleneck(node, "unknown", reason="no power readings in the job's time")
    share = flagged_s / total_s
    state = "cpu-bound" if share >= FLAG_SHARE else "ok"
    return Bottleneck(node, state, share, cpu_sum / total_s, acc_sum / total_s)


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))
