"""The arithmetic of a comparison, from plain numbers: rows, deltas, groups, SLA sizing.

"6.3x the throughput, 92 % less energy, USD 2 instead of 25 per million inferences, N
instances to serve an SLA": :func:`compare` turns one :class:`JobFigures` per job (what
:func:`joulestat.reports.compare.figures.load_job_figures` reads from the store, or anything a
caller builds) into a :class:`ComparisonTable` (written out in words by
:mod:`joulestat.reports.compare.words`); :func:`rebase` moves a table's baseline and
SLA without the jobs. No SQL, no I/O, no catalog lookups: the CLI, reports and the
dashboard's Compare page all get the same arithmetic.

The rules, each chosen so a comparison is fair to the hardware rather than to the run:

* Throughput is **units per instance-hour**: the units counted over the hours every
  node of the job was held. A two-node job is charged both nodes' hours, so it is
  compared per instance, as a price list is.
* Per unit = the job's attributed energy (dynamic + its share of idle), operational
  CO2e (location-based) and cost, divided by the units it counted. Embodied CO2e is
  kept apart (``embodied_per_unit_g``), as in docs/carbon.md. The energy is given
  twice: in all (``energy_per_unit_j``) and above idle (``dynamic_per_unit_j``), with
  the idle policy it was attributed under (``idle_policy``,
  :mod:`joulestat.reports.idle`): on a VM most of a small job's energy can be idle power,
  and which policy applied decides whether the job carries it.
  ``accelerator_per_unit_j`` is the accelerators' part of that energy; ``accelerators``
  names them (the models the nodes' agents registered, else the catalog's).
* Jobs that did not count the table's unit (a training run next to inference jobs,
  or runs that count nothing) get **per-run** rows: the run's energy, CO2e and cost.
  Deltas compare like with like: per unit against a per-unit baseline, per run against
  a per-run baseline, nothing otherwise.
* ``by="label:KEY"`` pools the jobs by the value of their label KEY
  (``concurrency=4``), the same way; jobs without it form ``KEY unset``. Jobs that ran
  on several setups give a row per value and setup (``concurrency=4 · g5.xlarge``), so
  a delta between two rows is never a change of hardware read as a change of load.
* ``by="model"`` gives a row per model served (``job.serving(model)``), from each job's
  per-model figures (:func:`by_model`); jobs that served no named model are left out
  (and said so), never a row to compare against.
* ``by="instance_type"`` pools the jobs of one setup: sum of units over sum of
  instance-hours. A multi-node job's setup is its distinct instance types joined with
  ``+`` (``c6i.4xlarge+p4d.24xlarge``), so a loader-fed trainer is never mixed into
  the single-type groups; two nodes of one type pool with that type.
* An unknown cost stays None (printed "unknown"), never 0: one unpriced job makes its
  group's cost unknown.
* ``by="name"`` pools the repeated runs of one job name (per name and setup when the
  runs ran on several), the way a setup pools its jobs.

**Is a difference real?** One run of each setup is a sample, not a fact: the same
training run here took 13.2 s, 40.2 s and 85.3 s on three occasions. So every row
carries two kinds of uncertainty on its energy per unit (per run for per-run rows):

* within a run, the **bounds** of its figure (``energy_bounds_per_unit_j``), from each
  job's :attr:`JobFigures.energy_bounds_j` (:mod:`joulestat.reports.bounds`: the
  accuracy of every source of its energy), summed over the row's jobs and divided by its
  units as the figure is; None when some job's bounds are unknown;
* across runs, the **mean and spread** of its runs' own figures (``runs_mean_j``,
  ``runs_spread_j``: the sample standard deviation; None with one run).

The row's **interval** (``interval_j``) is its bounds widened by its spread on both sides
(``[low - spread, high + spread]``; the figure +/- spread when the bounds are unknown;
None with neither): its own error bar. Whether it differs from the baseline is judged on
the ratio of their figures (:func:`energy_difference`, the one rule): what the two rows
share (the same sources on the same instance types) cancels in it, what they do not
widens it to its extremes, and the runs' spread gives a 95 % interval around it
(``energy_change_interval_pct``). One that holds no change is **not distinguishable**
(``energy_distinguishable`` False): the words say so, with the interval. So 1 vs 2
threads on one VM, estimated by one model, are told apart by their runs; two setups
whose figures differ by less than their runs' spread are never called different; and
two setups 3x apart measured by sensors with a few percent of error are.

Which row a job joins (by job, by setup, by a label's value or by model) is
:mod:`joulestat.reports.compare.groups`; pages and reports name a job's setup with its
:func:`~joulestat.reports.compare.groups.setup_name` too. ``by="label:KEY"`` answers "what
does concurrency 16 cost per request compared with 4?" directly: the rows are
``concurrency=1``, ``concurrency=4``, ``concurrency=16``, each pooling its jobs as an
instance-type group does. When the jobs ran on several setups, a label row is one value
on one setup (``concurrency=1 · g5.xlarge``, :func:`split_by_setup`): pooled, a
"concurrency=1" of a c6i and a g5 would read as one setup, and "×7.3 throughput vs
concurrency=1" would compare hardware while claiming to compare load. ``by="model"``
rows are the models served (``model=bert``), from the per-model figures :func:`by_model`
makes of each job.

``compare --by model`` (:func:`by_model`): a job that serves models
(``job.serving("model-a")``, docs/jobs.md) has its energy split among them by busy time
(:mod:`joulestat.store.model_split`). Here each such job becomes one :class:`JobFigures`
per model, which :func:`compare` then pools by model like any group (``by="model"``).
Each model carries its share of the job's WHOLE energy, idle included
(:meth:`~joulestat.store.model_split.ModelSplit.job_fractions`: the time no model was
busy is shared among the models as a node's idle power is shared among its jobs, by what
each used): energy, dynamic energy, CO2e and cost in that proportion, so a model busy
three quarters of the busy time carries three quarters of the bill, and the models add
up to the job. A model's **throughput** is its units over the instance-hours of the jobs
that served it, not over a share of them: what the server did of that model per hour it
was held. So a one-model server reads the same by model as by job (energy, units and
hours all the job's), and a two-model server's rows each say what the server did of one
model while serving both; power and cost per instance-hour (hence SLA sizing) are the
model's share of the server's. Jobs that served no named model are left out
(:attr:`ModelParts.unassigned`; the command and the page say so): a remainder is no
setup to compare against. One proportion for every node of a multi-node job; the split
itself is per node and minute.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from joulestat.carbon.pricing import NodeFigures
from joulestat.carbon.units import S_PER_HOUR
from joulestat.core.histogram import histogram_add
from joulestat.core.redact import redact_labels
from joulestat.core.spread import Spread
from joulestat.reports.compare.difference import Difference, Judged, difference
from joulestat.reports.compare.groups import (
    BY_CHOICES,
    UNKNOWN_TYPE,
    CompareError,
    check_by,
    find_baseline,
    group_of,
    setup_name,
    split_by_setup,
)
from joulestat.reports.compare.latency import row_latency
from joulestat.reports.idle import common_policy
from joulestat.reports.serving_figures import JobSteady, SteadyRow, steady_row
from joulestat.reports.sources import sources_class

__all__ = ["ComparisonRow", "ComparisonTable", "JobFigures", "PER_MILLION", "PER_RUN",
           "PER_UNIT", "Pool", "choose_unit", "choose_unit_of", "compare",
           "energy_difference", "co2e_difference",
           "pct_change", "pool_of", "ratio_of", "rebase", "row_of"]

# -- Compare measured jobs the way published comparisons are written, from plain numb ----

PER_UNIT = "unit"
PER_RUN = "run"
PER_MILLION = 1_000_000.0


@dataclass(frozen=True, slots=True)
class JobFigures:
    """Everything :func:`compare` needs about one job, as plain numbers.

    ``units`` counts per unit name; ``duration_s`` is the job's wall-clock time;
    ``energy_j`` the attributed energy over all nodes, ``dynamic_j`` its part above idle
    (None: unknown); ``idle_policy`` the policy it was attributed under (``share``,
    ``exclude``; None: not recorded, :mod:`joulestat.reports.idle`); ``cost_usd`` and
    ``embodied_co2e_g`` None when unknown (see ``notes``).
    """

    job_id: str
    name: str
    kind: str
    nodes: tuple[NodeFigures, ...]
    units: dict[str, float]
    duration_s: float
    energy_j: float
    operational_co2e_g: float
    embodied_co2e_g: float | None
    cost_usd: float | None
    notes: tuple[str, ...] = field(default=())
    labels: dict[str, str] = field(default_factory=dict)
    started_s: float | None = None
    sources: tuple[str, ...] = ()  # where its nodes' energy comes from (rapl, model:...)
    # by="model": the model this is the part of its job for, else None
    model: str | None = None
    # the part of energy_j on accelerators, and what they are ("1 x AWS Inferentia2")
    accelerator_j: float = 0.0
    accelerators: tuple[str, ...] = ()
    dynamic_j: float | None = None  # the part of energy_j above idle; None: unknown
    idle_policy: str | None = None  # share | exclude; None: not recorded
    # a serving job's latency histograms per kind (ttft, itl, e2e), over its nodes and
    # models (joulestat.reports.compare.latency); empty for any other job
    latency: Mapping[Any, Any] = field(default_factory=dict)
    # [low, high] around energy_j (joulestat.reports.bounds); None: unknown
    energy_bounds_j: tuple[float, float] | None = None
    # a serving job's steady-state window (joulestat.reports.serving_figures); traced:
    # whether it has a serving trace at all (one without a window says so)
    steady: JobSteady | None = None
    traced: bool = False

    def __post_init__(self) -> None:
        # Checked without names first: the dashboard builds ten thousand of these a page.
        values = [self.duration_s, self.energy_j, self.operational_co2e_g,
                  self.embodied_co2e_g, self.cost_usd, self.accelerator_j, self.dynamic_j,
                  *self.units.values()]
        for n in self.nodes:
            values += (n.held_s, n.energy_j, n.cost_usd)
        if all(v is None or (v >= 0 and math.isfinite(v)) for v in values):
            return
        numbers = [("duration_s", self.duration_s), ("energy_j", self.energy_j),
                   ("operational_co2e_g", self.operational_co2e_g),
                   ("embodied_co2e_g", self.embodied_co2e_g), ("cost_usd", self.cost_usd),
                   ("accelerator_j", self.accelerator_j), ("dynamic_j", self.dynamic_j)]
        numbers += [(f"units[{u!r}]", c) for u, c in self.units.items()]
        numbers += [(f"node {n.node!r} {name}", value) for n in self.nodes for name, value in
                    (("held_s", n.held_s), ("energy_j", n.energy_j), ("cost_usd", n.cost_usd))]
        for name, value in numbers:
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"job {self.job_id!r}: {name} must be a finite number >= 0, "
                                 f"got {value!r}")

    @property
    def instance_types(self) -> tuple[str, ...]:
        """Per node, in node order; an empty type reads ``unknown``."""
        return tuple(n.instance_type or UNKNOWN_TYPE for n in self.nodes)

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def instance_hours(self) -> float:
        return sum(n.held_s for n in self.nodes) / S_PER_HOUR

    @property
    def setup(self) -> str:
        """The job's group under ``by="instance_type"``: see :func:`setup_name`."""
        return setup_name(self.instance_types)

    def counted(self, unit: str | None) -> float:
        return self.units.get(unit, 0.0) if unit is not None else 0.0


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One job (``by="job"``) or one setup (``by="instance_type"``).

    ``basis`` is ``unit`` (per-unit figures filled) or ``run`` (the group counted no
    ``unit``: per-unit figures None). Per-run figures are means over ``runs``. Deltas
    are against the table's baseline; ``energy_pct`` −92 means 92 % less. ``dynamic_*``
    is the energy above idle (None when a member's is unknown); ``idle_policy`` the
    policy of its jobs (:func:`joulestat.reports.idle.common_policy`: one policy,
    ``mixed``, or None when not recorded).
    """

    job: str | None
    job_id: str | None
    group: str
    basis: str
    unit: str | None
    job_ids: tuple[str, ...]
    instance_types: tuple[str, ...]
    runs: int
    instance_hours: float
    units: float | None
    energy_j: float
    operational_co2e_g: float
    embodied_co2e_g: float | None
    cost_usd: float | None
    units_per_hour: float | None  # per instance-hour
    energy_per_unit_j: float | None
    co2e_per_unit_g: float | None  # operational
    embodied_per_unit_g: float | None
    cost_per_unit_usd: float | None
    cost_per_million_usd: float | None
    energy_per_run_j: float
    co2e_per_run_g: float
    cost_per_run_usd: float | None
    power_per_instance_w: float | None
    cost_per_instance_hour_usd: float | None
    is_baseline: bool = False
    throughput_x: float | None = None
    energy_pct: float | None = None
    co2e_pct: float | None = None
    cost_pct: float | None = None
    instances_needed: int | None = None
    fleet_power_w: float | None = None
    fleet_cost_per_hour_usd: float | None = None
    # a job row's labels and start, so that runs of one name can be told apart
    labels: tuple[tuple[str, str], ...] = ()
    started_s: float | None = None
    # measured, estimated, unstated, mixed (joulestat.reports.sources); "" when unknown
    energy_class: str = ""
    # the sources behind it (rapl, model:ccf-vcpu...), to say from what it was estimated
    sources: tuple[str, ...] = ()
    # accelerator energy (a part of energy_j), per unit, and the accelerators it ran on
    accelerator_j: float = 0.0
    accelerator_per_unit_j: float | None = None
    accelerators: tuple[str, ...] = ()
    # the energy above idle: in all, per unit and per run; its delta against the baseline
    dynamic_j: float | None = None
    dynamic_per_unit_j: float | None = None
    dynamic_per_run_j: float | None = None
    dynamic_pct: float | None = None
    idle_policy: str | None = None  # share | exclude | mixed; None: not recorded
    # served latency, seconds: {"ttft": {"p50": s, "p99": s}, "itl": ...}; {} without
    latency_s: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # Is a difference real? (the module's docstring): the row's energy per unit (per run
    # for per-run rows) within its runs' bounds, across runs, and the two combined
    energy_bounds_per_unit_j: tuple[float, float] | None = None
    energy_bounds_per_run_j: tuple[float, float] | None = None
    runs_mean_j: float | None = None
    runs_spread_j: float | None = None
    interval_j: tuple[float, float] | None = None
    energy_distinguishable: bool | None = None  # vs the baseline; None: cannot say
    # the change's 95 % interval in percent (energy_difference); None: cannot say
    energy_change_interval_pct: tuple[float, float] | None = None
    # whether the two rows' systematic error is shared (cancels in their ratio)
    energy_error_shared: bool | None = None
    # a serving row's energy per unit inside its runs' valid steady-state windows
    # (joulestat.reports.serving_figures); None for any other row
    steady_state: SteadyRow | None = None

    @property
    def label(self) -> str:
        return self.job if self.job is not None else self.group


@dataclass(frozen=True, slots=True)
class ComparisonTable:
    """Rows per unit first (input order), then per-run rows; ``baseline`` is its label."""

    by: str
    unit: str | None
    baseline: str | None
    sla_units_per_hour: float | None
    rows: tuple[ComparisonRow, ...]

    @property
    def baseline_row(self) -> ComparisonRow | None:
        return next((r for r in self.rows if r.is_baseline), None)

    @property
    def idle_policy(self) -> str | None:
        """The idle policy of every row (``mixed`` when they differ; None: not recorded)."""
        return common_policy(r.idle_policy for r in self.rows)


def ratio_of(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def pct_change(value: float | None, base: float | None) -> float | None:
    ratio = ratio_of(value, base)
    return None if ratio is None else (ratio - 1.0) * 100.0


def _sum_known(values: Iterable[float | None]) -> float | None:
    """A sum only when every part is known: an unknown price is not a zero price."""
    values = list(values)
    return None if any(v is None for v in values) else float(sum(v or 0.0 for v in values))


def _per(value: float | None, count: float) -> float | None:
    return None if value is None or count <= 0 else value / count


def choose_unit(jobs: Sequence[JobFigures], unit: str | None = None) -> str | None:
    """``unit`` if some job counted it; by default the unit the most jobs counted (ties:
    alphabetical), None when no job counted anything."""
    return choose_unit_of(Counter(u for job in jobs for u, c in job.units.items() if c > 0),
                          unit)


def choose_unit_of(counts: Mapping[str, int], unit: str | None = None) -> str | None:
    """:func:`choose_unit` from how many jobs counted each unit (``counts``; a store's
    pooled read counts them in SQL)."""
    if unit is not None:
        if unit not in counts:
            known = ", ".join(sorted(counts)) or "none"
            raise CompareError("unit", f"no job counted unit {unit!r} (counted: {known})")
        return unit
    return min(counts, key=lambda u: (-counts[u], u)) if counts else None


def _interval(figure: float | None, bounds: tuple[float, float] | None,
              spread: float | None) -> tuple[float, float] | None:
    """The row's bounds widened by its spread across runs (see the module docstring)."""
    if figure is None:
        return None
    if bounds is None and spread is None:
        return None
    low, high = bounds if bounds is not None else (figure, figure)
    widen = spread or 0.0
    return max(0.0, low - widen), high + widen


@dataclass(frozen=True, slots=True)
class Pool:
    """What one comparison row is made of: its jobs' figures added up.

    :func:`pool_of` adds up :class:`JobFigures`; the store's pooled reads
    (:func:`joulestat.reports.compare.figures.setup_pools`) add up a fleet's single-node
    jobs in SQL instead, since building a record per job is what a comparison of 10^5
    jobs spent its seconds on (issue 28). :func:`row_of` is the one place a row's figures
    are derived from the sums, whichever way they were added. ``units`` is None for a
    per-run pool. ``spread`` holds the runs' own figures (energy per unit, or per run),
    from which the row's mean and spread are taken (:class:`Spread`, whichever way the
    pool was added up). ``first`` is the first job,
    for a row per job (its name, id, labels and start)."""

    job_ids: tuple[str, ...]
    group: str
    runs: int
    instance_s: float
    instance_types: tuple[str, ...]
    units: float | None
    energy_j: float
    operational_g: float
    embodied_g: float | None
    cost_usd: float | None
    sources: tuple[str, ...]
    accelerator_j: float
    accelerators: tuple[str, ...]
    dynamic_j: float | None
    idle_policies: frozenset[str | None]
    latency: Mapping[Any, Any]
    bounds_j: tuple[float, float] | None  # the jobs' bounds summed; None: one unknown
    spread: Spread
    first: JobFigures | None = None
    steady: tuple[JobSteady | None, ...] = ()  # the traced runs' windows
    traced: int = 0

    def merged(self, other: Pool) -> Pool:
        """The two pools as one (the jobs of ``other`` after these): sums added, an
        unknown cost or embodied figure or bound unknown in the whole."""
        latency: dict[Any, Any] = dict(self.latency)
        for kind, histogram in other.latency.items():
            latency[kind] = histogram_add(latency.get(kind), histogram)
        return Pool(
            job_ids=self.job_ids + other.job_ids, group=self.group, runs=self.runs + other.runs,
            instance_s=self.instance_s + other.instance_s,
            instance_types=tuple(sorted({*self.instance_types, *other.instance_types})),
            units=None if self.units is None else self.units + (other.units or 0.0),
            energy_j=self.energy_j + other.energy_j,
            operational_g=self.operational_g + other.operational_g,
            embodied_g=_sum_known((self.embodied_g, other.embodied_g)),
            cost_usd=_sum_known((self.cost_usd, other.cost_usd)),
            sources=tuple(sorted({*self.sources, *other.sources})),
            accelerator_j=self.accelerator_j + other.accelerator_j,
            accelerators=tuple(dict.fromkeys((*self.accelerators, *other.accelerators))),
            dynamic_j=_sum_known((self.dynamic_j, other.dynamic_j)),
            idle_policies=self.idle_policies | other.idle_policies, latency=latency,
            bounds_j=None if self.bounds_j is None or other.bounds_j is None
            else (self.bounds_j[0] + other.bounds_j[0], self.bounds_j[1] + other.bounds_j[1]),
            spread=self.spread.merged(other.spread),
            first=self.first, steady=self.steady + other.steady,
            traced=self.traced + other.traced)


def pool_of(members: Sequence[JobFigures], unit: str | None, group: str) -> Pool:
    """``members`` added up as the row ``group`` per ``unit`` (None: per run)."""
    if unit is not None:
        values = tuple(job.energy_j / job.counted(unit) for job in members
                       if job.counted(unit) > 0)
    else:
        values = tuple(job.energy_j for job in members)
    bounded = all(job.energy_bounds_j is not None for job in members)
    return Pool(
        job_ids=tuple(job.job_id for job in members), group=group, runs=len(members),
        instance_s=sum(n.held_s for job in members for n in job.nodes),
        instance_types=tuple(sorted({t for job in members for t in job.instance_types})),
        units=sum(job.counted(unit) for job in members) if unit is not None else None,
        energy_j=sum(job.energy_j for job in members),
        operational_g=sum(job.operational_co2e_g for job in members),
        embodied_g=_sum_known(job.embodied_co2e_g for job in members),
        cost_usd=_sum_known(job.cost_usd for job in members),
        sources=tuple(sorted({s for job in members for s in job.sources})),
        accelerator_j=sum(job.accelerator_j for job in members),
        accelerators=tuple(dict.fromkeys(a for job in members for a in job.accelerators)),
        dynamic_j=_sum_known(job.dynamic_j for job in members),
        idle_policies=frozenset(job.idle_policy for job in members),
        latency=_added_latency(job.latency for job in members),
        bounds_j=(sum(job.energy_bounds_j[0] for job in members if job.energy_bounds_j),
                  sum(job.energy_bounds_j[1] for job in members if job.energy_bounds_j))
        if bounded else None,
        spread=Spread.of(values), first=members[0],
        steady=tuple(job.steady for job in members if job.traced),
        traced=sum(1 for job in members if job.traced))


def _added_latency(members: Iterable[Mapping[Any, Any]]) -> dict[Any, Any]:
    merged: dict[Any, Any] = {}
    for latency in members:
        for kind, histogram in latency.items():
            merged[kind] = histogram_add(merged.get(kind), histogram)
    return merged


def _bounds_per(bounds: tuple[float, float] | None, count: float
                ) -> tuple[float, float] | None:
    """A pool's summed bounds divided by ``count`` (units or runs), as the row's figure
    is; None when unknown or nothing to divide by."""
    if count <= 0 or bounds is None:
        return None
    return bounds[0] / count, bounds[1] / count


def _uncertainty(pool: Pool, figure: float | None) -> dict[str, Any]:
    """The row's uncertainty fields (the module's docstring): bounds, runs' spread,
    interval."""
    mean, spread = pool.spread.mean_sd()
    if pool.units is not None:
        bounds = _bounds_per(pool.bounds_j, pool.units or 0.0)
    else:
        bounds = _bounds_per(pool.bounds_j, pool.runs)
    return {
        "energy_bounds_per_unit_j": bounds if pool.units is not None else None,
        "energy_bounds_per_run_j": _bounds_per(pool.bounds_j, pool.runs),
        "runs_mean_j": mean, "runs_spread_j": spread,
        "interval_j": _interval(figure, bounds, spread),
    }


def _row(members: list[JobFigures], unit: str | None, by: str,
         per_setup: bool = False) -> ComparisonRow:
    first = members[0]
    group = first.setup if by in BY_CHOICES else group_of(first, by, per_setup)
    return row_of(pool_of(members, unit, group), unit, by)


def row_of(pool: Pool, unit: str | None, by: str) -> ComparisonRow:
    """The comparison row of ``pool`` per ``unit`` (None: per run), grouped ``by``."""
    basis = PER_UNIT if unit is not None else PER_RUN
    runs = pool.runs
    instance_h = pool.instance_s / S_PER_HOUR
    energy_j, operational_g, embodied_g, cost = (pool.energy_j, pool.operational_g,
                                                 pool.embodied_g, pool.cost_usd)
    units = pool.units if unit is not None else None
    count = units or 0.0
    cost_per_unit = _per(cost, count)
    first = pool.first if by == "job" else None
    accelerator_j, dynamic_j = pool.accelerator_j, pool.dynamic_j
    return ComparisonRow(
        job=first.name if first is not None else None,
        job_id=first.job_id if first is not None else None,
        group=pool.group,
        basis=basis,
        unit=unit,
        job_ids=pool.job_ids,
        instance_types=pool.instance_types,
        runs=runs, instance_hours=instance_h, units=units, energy_j=energy_j,
        operational_co2e_g=operational_g, embodied_co2e_g=embodied_g, cost_usd=cost,
        units_per_hour=_per(units, instance_h) if units else None,
        energy_per_unit_j=_per(energy_j, count),
        co2e_per_unit_g=_per(operational_g, count),
        embodied_per_unit_g=_per(embodied_g, count),
        cost_per_unit_usd=cost_per_unit,
        cost_per_million_usd=None if cost_per_unit is None else cost_per_unit * PER_MILLION,
        energy_per_run_j=energy_j / runs, co2e_per_run_g=operational_g / runs,
        cost_per_run_usd=_per(cost, runs),
        power_per_instance_w=_per(energy_j, pool.instance_s),
        cost_per_instance_hour_usd=_per(cost, instance_h),
        labels=tuple(sorted(redact_labels(first.labels).items())) if first is not None else (),
        started_s=first.started_s if first is not None else None,
        energy_class=sources_class(pool.sources) if pool.sources else "",
        sources=pool.sources,
        accelerator_j=accelerator_j, accelerator_per_unit_j=_per(accelerator_j, count),
        accelerators=pool.accelerators,
        dynamic_j=dynamic_j, dynamic_per_unit_j=_per(dynamic_j, count),
        dynamic_per_run_j=_per(dynamic_j, runs),
        idle_policy=common_policy(pool.idle_policies),
        latency_s=row_latency([pool.latency]),
        steady_state=steady_row(pool.steady, unit, pool.traced),
        **_uncertainty(pool, _per(energy_j, count) if unit is not None else energy_j / runs),
    )


def _groups(jobs: Sequence[JobFigures], unit: str | None, by: str, per_setup: bool
            ) -> list[tuple[list[JobFigures], str | None]]:
    """Member lists with the unit they are compared per (None: per run), per-unit first."""
    per_unit: dict[str, list[JobFigures]] = {}
    per_run: dict[str, list[JobFigures]] = {}
    for job in jobs:
        key = group_of(job, by, per_setup)
        (per_unit if job.counted(unit) > 0 else per_run).setdefault(key, []).append(job)
    return [(m, unit) for m in per_unit.values()] + [(m, None) for m in per_run.values()]


def _sized(row: ComparisonRow, sla_units_per_hour: float) -> ComparisonRow:
    """Instances needed for the SLA, rounded up; fleet power and cost at this row's
    average power and cost per instance-hour."""
    if not row.units_per_hour:
        return row
    instances = max(1, math.ceil(round(sla_units_per_hour / row.units_per_hour, 9)))
    return replace(
        row, instances_needed=instances,
        fleet_power_w=None if row.power_per_instance_w is None
        else instances * row.power_per_instance_w,
        fleet_cost_per_hour_usd=None if row.cost_per_instance_hour_usd is None
        else instances * row.cost_per_instance_hour_usd,
    )


def _judged(row: ComparisonRow) -> Judged:
    """What :mod:`~joulestat.reports.compare.difference` judges of a row: its energy
    per unit (per run for per-run rows) with its bounds, its runs' spread, and where
    its energy comes from."""
    per_unit = row.basis == PER_UNIT
    return Judged(row.energy_per_unit_j if per_unit else row.energy_per_run_j,
                  row.energy_bounds_per_unit_j if per_unit else row.energy_bounds_per_run_j,
                  row.runs, row.runs_mean_j, row.runs_spread_j, row.sources,
                  row.instance_types)


def energy_difference(row: ComparisonRow, base: ComparisonRow) -> Difference | None:
    """``row``'s energy against ``base``'s by the one rule
    (:func:`joulestat.reports.compare.difference.difference`); None when they are not
    comparable (different bases, a figure unknown or 0)."""
    if row.basis != base.basis:
        return None
    return difference(_judged(row), _judged(base))


def co2e_difference(row: ComparisonRow, base: ComparisonRow) -> Difference | None:
    """The CO2e's: the energy's difference at each row's CO2e per joule (intensity x
    PUE), a known factor, so a real difference of grid stays one while a difference of
    energy within the rows' uncertainty does not."""
    energy = energy_difference(row, base)
    mine, theirs = _co2e_per_j(row), _co2e_per_j(base)
    if energy is None or mine is None or not theirs:
        return None
    return energy.scaled(mine / theirs)


def _co2e_per_j(row: ComparisonRow) -> float | None:
    per_unit = row.basis == PER_UNIT
    energy = row.energy_per_unit_j if per_unit else row.energy_per_run_j
    co2e = row.co2e_per_unit_g if per_unit else row.co2e_per_run_g
    return None if not energy or co2e is None else co2e / energy


def _against(row: ComparisonRow, base: ComparisonRow) -> ComparisonRow:
    if row.basis != base.basis:
        return row
    difference = energy_difference(row, base)
    row = replace(row, energy_distinguishable=None if difference is None else difference.real,
                  energy_change_interval_pct=None if difference is None
                  else difference.pct_interval,
                  energy_error_shared=None if difference is None else difference.shared)
    if row.basis == PER_UNIT:
        return replace(
            row, throughput_x=ratio_of(row.units_per_hour, base.units_per_hour),
            energy_pct=pct_change(row.energy_per_unit_j, base.energy_per_unit_j),
            dynamic_pct=pct_change(row.dynamic_per_unit_j, base.dynamic_per_unit_j),
            co2e_pct=pct_change(row.co2e_per_unit_g, base.co2e_per_unit_g),
            cost_pct=pct_change(row.cost_per_unit_usd, base.cost_per_unit_usd))
    return replace(row, energy_pct=pct_change(row.energy_per_run_j, base.energy_per_run_j),
                   dynamic_pct=pct_change(row.dynamic_per_run_j, base.dynamic_per_run_j),
                   co2e_pct=pct_change(row.co2e_per_run_g, base.co2e_per_run_g),
                   cost_pct=pct_change(row.cost_per_run_usd, base.cost_per_run_usd))


def _check_sla(sla_units_per_hour: float | None) -> None:
    if sla_units_per_hour is not None and not (
            math.isfinite(sla_units_per_hour) and sla_units_per_hour > 0):
        raise CompareError("sla_units_per_hour", "must be a number of units per hour above 0, "
                           f"got {sla_units_per_hour!r}")


def compare(
    jobs: Sequence[JobFigures],
    by: str = "job",
    unit: str | None = None,
    baseline: str | None = None,
    sla_units_per_hour: float | None = None,
) -> ComparisonTable:
    """Compare ``jobs`` per ``unit`` (default: the unit most jobs counted).

    ``by``: ``job`` (a row per job), ``instance_type`` (a row per setup, jobs pooled),
    ``label:KEY`` (a row per value of the job label KEY, jobs pooled; per value and
    setup when the jobs ran on several) or ``model`` (a row per model, of
    :func:`joulestat.reports.compare.by_model.by_model`'s figures).
    ``baseline``: a job id or name, or a setup name; default the first row.
    ``sla_units_per_hour``: size a fleet per row for this many units per hour.
    Raises :class:`CompareError` naming the argument that is wrong.
    """
    check_by(by)
    _check_sla(sla_units_per_hour)
    chosen = choose_unit(jobs, unit)
    per_setup = split_by_setup(jobs, by)
    rows = tuple(_row(members, row_unit, by, per_setup)
                 for members, row_unit in _groups(jobs, chosen, by, per_setup))
    return rebase(ComparisonTable(by, chosen, None, None, rows), baseline, sla_units_per_hour)


_RELATIVE = dict.fromkeys(("throughput_x", "energy_pct", "dynamic_pct", "co2e_pct", "cost_pct",
                           "instances_needed", "fleet_power_w", "fleet_cost_per_hour_usd",
                           "energy_distinguishable", "energy_change_interval_pct",
                           "energy_error_shared"))


def rebase(table: ComparisonTable, baseline: str | None = None,
           sla_units_per_hour: float | None = None) -> ComparisonTable:
    """``table`` against ``baseline`` (as in :func:`compare`; default the first row) and
    sized for ``sla_units_per_hour``: what ``compare()`` gives for the same jobs with these
    arguments, from the rows alone, so a page where the viewer picks the baseline and the
    SLA need not keep ten thousand jobs. Raises :class:`CompareError` as compare() does."""
    _check_sla(sla_units_per_hour)
    rows = [replace(r, is_baseline=False, **_RELATIVE) for r in table.rows]
    if not rows:
        if baseline is not None:
            raise CompareError("baseline", f"{baseline!r}: there are no jobs to compare")
        return replace(table, baseline=None, sla_units_per_hour=sla_units_per_hour)
    index = 0 if baseline is None else find_baseline(rows, baseline, table.by)
    base = rows[index]
    rows = [_against(r, base) for r in rows]
    rows[index] = replace(rows[index], is_baseline=True, energy_distinguishable=None,
                          energy_change_interval_pct=None, energy_error_shared=None)
    if sla_units_per_hour is not None:
        rows = [_sized(r, sla_units_per_hour) for r in rows]
    return replace(table, baseline=base.label, sla_units_per_hour=sla_units_per_hour,
                   rows=tuple(rows))
