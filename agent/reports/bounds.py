"""How far off an energy figure may be: bounds from where each joule came from.

Why: joulestat says of every figure whether it was measured or estimated, but "24.2 kJ,
measured" still left the reader to guess whether that means ±1 % or ±30 %, and two runs
"−7 % energy per sample" apart may differ by less than either figure's own error. So
each joule's source (:mod:`joulestat.reports.sources`: ``rapl``, ``nvml_power``,
``model:ccf-vcpu``, ``fill:rapl`` ...) carries an :class:`Accuracy`, its relative error
with where that figure comes from:

* ``documented``: the vendor's or a published study's stated accuracy of the sensor
  (docs/methodology.md, "Uncertainty", cites each);
* ``measured``: an estimator's error measured by joulestat on public data (the CPU
  models against published load-versus-RAPL points:
  :mod:`joulestat.reports.model_error`), or attribution's own error measured by
  ``benchmarks/accuracy.py``;
* ``assumed``: a stated assumption with no measurement behind it (a filled tick's
  power during a counter fault), said as such.

A source with no known accuracy (an import that never said how it measured, a vendor
that documents none) gets none: its figure's bounds are unknown, and the report says
which sources made them so, rather than claiming a bound. Bounds add up linearly
(worst case): the errors of one sensor are systematic (a miscalibrated counter is off
the same way every tick), so they do not average out over a job's ticks, and adding
them is the honest bound when sources err together. Attribution's error applies to the
energy split by CPU time (the dynamic part); idle power follows a policy, a definition
rather than a measurement.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Engine

from joulestat.core.tick import FILL_PREFIX, Component
from joulestat.reports.model_error import estimator_error
from joulestat.reports.sources import IMPORT_PREFIX, originals
from joulestat.store.nodes import source_models
from joulestat.store.provenance import JobSourceEnergy, jobs_energy_by_source

# The components a report names; any other is reported as "other".
NAMED_COMPONENTS = (Component.CPU, Component.DRAM, Component.ACCELERATOR, Component.NET)


class Basis(StrEnum):
    """Where an accuracy figure comes from."""

    DOCUMENTED = "documented"
    MEASURED = "measured"
    ASSUMED = "assumed"


@dataclass(frozen=True, slots=True)
class Accuracy:
    """A figure's relative error: the truth lies in ``[x (1 + low), x (1 + high)]``.

    ``reference`` names the source of the figure in a few words; docs/methodology.md
    gives the full citation under the same words."""

    low: float
    high: float
    basis: Basis
    reference: str

    def __post_init__(self) -> None:
        if not (-1.0 <= self.low <= 0.0 <= self.high):
            raise ValueError(f"accuracy ({self.reference}): need -1 <= low <= 0 <= high, "
                             f"got {self.low!r}, {self.high!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"low_pct": self.low * 100.0, "high_pct": self.high * 100.0,
                "basis": str(self.basis), "reference": self.reference}


def _symmetric(pct: float, basis: Basis, reference: str) -> Accuracy:
    return Accuracy(-pct / 100.0, pct / 100.0, basis, reference)


# -- Sensors: what their vendors and published studies say -----------------------------

# Intel documents no accuracy for RAPL; from Haswell-EP on the package domain is measured
# through the integrated voltage regulator rather than modelled (Hackenberg et al. 2015),
# and RAPL tracks plug power closely (Khan et al. 2018), but no study gives one bound for
# every CPU: +/-5 % is assumed, and said to be.
RAPL = _symmetric(5.0, Basis.ASSUMED,
                  "no vendor figure; +/-5 % assumed from studies against external meters "
                  "(Hackenberg 2015, Khan 2018)")
# nvidia-smi: power.draw "is accurate to within +/- 5 watts"; NVML: "On Fermi and Kepler
# GPUs the reading is accurate to within +/- 5% of current power draw". Nothing is said
# of the energy counter (Volta+), which integrates the same sensor: the same is assumed.
NVML_POWER = _symmetric(5.0, Basis.DOCUMENTED,
                        "NVML power reading +/-5 % (NVML API; nvidia-smi: +/-5 W)")
NVML_ENERGY = _symmetric(5.0, Basis.ASSUMED,
                         "NVML energy counter: no figure; its power sensor's +/-5 % assumed")
# A100/H100-class boards sample power for about a quarter of the time (Yang, Adamek,
# Armour, SC'24, arXiv 2312.02741): a power reading there has no bound anyone measured.
PART_TIME_MODELS = ("A100", "A800", "H100", "H200", "H800", "GH200")
REPLAYED = Accuracy(0.0, 0.0, Basis.DOCUMENTED, "a replayed trace is its own truth")
# A tick whose counter faulted carries the zone's recent power (devices/counter_faults):
# the truth over those seconds is at least nothing and is assumed at most twice that.
FILLED = Accuracy(-1.0, 1.0, Basis.ASSUMED,
                  "filled tick: between no power and twice the zone's recent power")
# The network model is an order of magnitude by its own derivation (docs/methodology.md).
NETWORK = Accuracy(-0.9, 9.0, Basis.ASSUMED, "network model: an order of magnitude")
# Attribution splits a tick's dynamic energy by CPU time: its largest error measured by
# benchmarks/accuracy.py (0.23 % and 1.5 % at 2:1 and 4:1 over 20 s, 2.5 % over 10 s).
ATTRIBUTION = _symmetric(2.5, Basis.MEASURED,
                         "attribution by CPU time, benchmarks/accuracy.py (docs/results.md)")
# No accuracy is published for AMD Instinct (amdsmi), Intel Gaudi (hlml) or AWS Neuron
# power telemetry, nor for an import that never said how it measured: their figures'
# bounds are unknown.

_SENSORS: dict[str, Accuracy] = {
    "rapl": RAPL,
    "nvml_energy": NVML_ENERGY,
    "nvml_power": NVML_POWER,
    "replay": REPLAYED,
    "model:network": NETWORK,
}


def _estimator(source: str) -> Accuracy | None:
    """An estimator's measured error (``model:ccf-vcpu``), None for one never measured."""
    found = estimator_error(source.removeprefix("model:"))
    if found is None:
        return None
    return Accuracy(found.low, found.high, Basis.MEASURED, found.reference)


def accuracy_of(source: str, models: Sequence[str] = ()) -> Accuracy | None:
    """The accuracy of one sensor-level source (``rapl``, ``model:dram-gib``,
    ``fill:rapl``); ``models`` are the devices' model names where they matter (NVML's
    power reading on A100/H100 boards). None: no known bound."""
    if source.startswith(FILL_PREFIX):
        return FILLED
    if source == "nvml_power" and any(m in model for model in models
                                      for m in PART_TIME_MODELS):
        return None
    if source in _SENSORS:
        return _SENSORS[source]
    if source.startswith("model:"):
        return _estimator(source)
    return None


def chain_accuracy(source: str, models: Sequence[str] = ()) -> Accuracy | None:
    """The accuracy of a stored source chain: an import is its originals'
    (``import:joulestat/rapl`` is RAPL's, ``import:codecarbon`` has none); a minute whose
    source changed (``rapl+fill:rapl``) takes the widest of its parts, since its energy
    cannot be split between them. None when any part has no known bound.

    Remembered per (source, models): it depends on nothing else (the sensors' published
    accuracies, the estimators' errors at the packaged validation points), and a
    fleet's comparison asks it for every job's every part, a few distinct chains in all
    (an estimator's error alone is recomputed from its points: 3.4 s of 31 for 24,840
    jobs, issue 28)."""
    return _chain_accuracy(source, tuple(models))


@functools.lru_cache(maxsize=1024)
def _chain_accuracy(source: str, models: tuple[str, ...]) -> Accuracy | None:
    parts = originals(source)
    if not parts or any(p.startswith(IMPORT_PREFIX) and not originals(p) for p in
                        source.split("+")):
        return None
    found = [accuracy_of(part, models) for part in parts]
    if any(a is None for a in found):
        return None
    known = [a for a in found if a is not None]
    if len(known) == 1:
        return known[0]
    widest_low = min(known, key=lambda a: a.low)
    widest_high = max(known, key=lambda a: a.high)
    return Accuracy(widest_low.low, widest_high.high, widest_high.basis,
                    "; ".join(dict.fromkeys(a.reference for a in known)))


# -- Bounds of a figure ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Bounds:
    """``[low, high]`` around a figure, in the figure's unit."""

    low: float
    high: float

    def __add__(self, other: Bounds) -> Bounds:
        return Bounds(self.low + other.low, self.high + other.high)

    def scaled(self, factor: float) -> Bounds:
        return Bounds(self.low * factor, self.high * factor)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def overlaps(self, other: Bounds) -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_list(self) -> list[float]:
        return [self.low, self.high]


def bounds_or_none(value: Sequence[float] | None) -> Bounds | None:
    """A JSON ``[low, high]`` (or null) back as :class:`Bounds`."""
    return None if value is None else Bounds(float(value[0]), float(value[1]))


def scaled(bounds: Bounds | None, factor: float) -> Bounds | None:
    return None if bounds is None else bounds.scaled(factor)


def proportional(bounds: Bounds | None, energy_j: float, value: float) -> Bounds | None:
    """Bounds of a figure proportional to the energy (CO2e at a given intensity and PUE,
    energy per unit): the energy's relative bounds applied to ``value``."""
    if bounds is None:
        return None
    if energy_j <= 0:
        return Bounds(value, value)
    return Bounds(value * bounds.low / energy_j, value * bounds.high / energy_j)


@dataclass(frozen=True, slots=True)
class SourcePart:
    """Energy of one component from one source (all the job's nodes), and its part
    above idle; ``models`` the devices' model names behind it."""

    component: str
    source: str
    energy_j: float
    dynamic_j: float = 0.0
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EnergyBounds:
    """Bounds per component and in total (None: some of its energy has no known bound),
    the accuracies applied per source, and the sources without one."""

    components: dict[str, Bounds | None]
    total: Bounds | None
    applied: dict[str, Accuracy] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()
    attribution: Accuracy | None = None

    def as_json(self, components: Iterable[str]) -> dict[str, list[float] | None]:
        """``{cpu: [low, high], ..., total: [...]}`` for ``components`` (a component
        with no energy is ``[0, 0]``), null where unknown."""
        out: dict[str, list[float] | None] = {}
        for component in components:
            found = self.components.get(component, Bounds(0.0, 0.0))
            out[component] = None if found is None else found.as_list()
        out["total"] = None if self.total is None else self.total.as_list()
        return out

    def basis_json(self) -> dict[str, Any]:
        """What the bounds rest on: each source's accuracy, attribution's, and the
        sources with no known bound."""
        return {
            "sources": {s: a.as_dict() for s, a in sorted(self.applied.items())},
            "attribution": self.attribution.as_dict() if self.attribution else None,
            "unknown": list(self.unknown),
        }


def energy_bounds(parts: Iterable[SourcePart], *, attributed: bool = True,
                  other: Mapping[str, str] | None = None) -> EnergyBounds:
    """Bounds of a job's energy from its parts by component and source.

    Each part's energy gets its source's accuracy; with ``attributed`` (a job's share,
    not a node's whole energy) its dynamic part gets attribution's too. ``other`` maps
    components without a name of their own onto the one they are reported under
    (``{"gpu0": "other"}``), as :func:`joulestat.reports.model.component_totals` does."""
    by_component: dict[str, Bounds | None] = {}
    applied: dict[str, Accuracy] = {}
    unknown: list[str] = []
    attribution = ATTRIBUTION if attributed else None
    for part in parts:
        component = (other or {}).get(part.component, part.component)
        accuracy = chain_accuracy(part.source, part.models) if part.energy_j > 0 else (
            Accuracy(0.0, 0.0, Basis.DOCUMENTED, "no energy"))
        if accuracy is None:
            unknown.append(part.source)
            by_component[component] = None
            continue
        if part.energy_j > 0:
            applied[part.source] = accuracy
        bound = Bounds(part.energy_j * (1 + accuracy.low), part.energy_j * (1 + accuracy.high))
        if attribution is not None and part.dynamic_j > 0:
            bound = bound + Bounds(part.dynamic_j * attribution.low,
                                   part.dynamic_j * attribution.high)
        bound = Bounds(max(bound.low, 0.0), bound.high)
        if component in by_component and by_component[component] is None:
            continue
        before = by_component.get(component)
        by_component[component] = bound if before is None else before + bound
    total: Bounds | None = Bounds(0.0, 0.0)
    for bound in by_component.values():
        total = None if bound is None or total is None else total + bound
    return EnergyBounds(by_component, total, applied, tuple(dict.fromkeys(unknown)),
                        attribution)


def job_bounds(rows: Iterable[JobSourceEnergy],
               models: Mapping[tuple[str, str], tuple[str, ...]]) -> EnergyBounds:
    """Bounds of one job's energy from its rows by node, component and source
    (:func:`joulestat.store.provenance.jobs_energy_by_source`); ``models``: (node,
    source) -> the devices' models (:func:`joulestat.store.nodes.source_models`).
    Components without a name of their own are reported as ``other``."""
    parts = [SourcePart(r.component, r.source, r.energy_j, r.dynamic_j,
                        models.get((r.node, r.source), ())) for r in rows]
    other = {p.component: Component.OTHER for p in parts
             if p.component not in NAMED_COMPONENTS}
    return energy_bounds(parts, other=other)


def total_bounds(rows: Iterable[JobSourceEnergy],
                 models: Mapping[tuple[str, str], tuple[str, ...]]) -> Bounds | None:
    """``job_bounds(rows, models).total``, without the per-component bounds and the
    record of what they rest on: all a comparison row needs of each of a fleet's jobs
    (:func:`joulestat.reports.compare.figures.totals_figures`), in plain float sums
    instead of a dozen objects per job. The same sums in the same order, so the same
    figure to the last bit (tests/unit/reports/test_bounds.py checks it against
    :func:`job_bounds`)."""
    by_component: dict[str, list[float]] = {}
    attribution = ATTRIBUTION
    for row in rows:
        energy_j = row.energy_j
        if energy_j > 0:
            accuracy = chain_accuracy(row.source, models.get((row.node, row.source), ()))
            if accuracy is None:
                return None  # its component's bound is unknown, so is the total
            low_j, high_j = energy_j * (1 + accuracy.low), energy_j * (1 + accuracy.high)
        else:
            low_j = high_j = energy_j * (1 + 0.0)
        if row.dynamic_j > 0:
            low_j += row.dynamic_j * attribution.low
            high_j += row.dynamic_j * attribution.high
        low_j = max(low_j, 0.0)
        component = (row.component if row.component in NAMED_COMPONENTS
                     else Component.OTHER)
        summed = by_component.get(component)
        if summed is None:
            by_component[component] = [low_j, high_j]
        else:
            summed[0] += low_j
            summed[1] += high_j
    low = high = 0.0
    for component_low, component_high in by_component.values():
        low += component_low
        high += component_high
    return Bounds(low, high)


def stored_total_bounds(engine: Engine, job_ids: Iterable[str]) -> dict[str, Bounds | None]:
    """Each stored job's :func:`total_bounds`, read as :func:`stored_bounds` reads."""
    rows = jobs_energy_by_source(engine, job_ids)
    models = source_models(engine, {r.node for found in rows.values() for r in found})
    return {job_id: total_bounds(found, models) for job_id, found in rows.items()}


def stored_bounds(engine: Engine, job_ids: Iterable[str]) -> dict[str, EnergyBounds]:
    """Each stored job's :func:`job_bounds`, read in two statements for all of them:
    what a report, ``joulestat compare`` and the dashboard bound a job's figures by."""
    rows = jobs_energy_by_source(engine, job_ids)
    models = source_models(engine, {r.node for found in rows.values() for r in found})
    return {job_id: job_bounds(found, models) for job_id, found in rows.items()}
