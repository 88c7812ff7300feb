"""How far joulestat's power models are from published RAPL measurements.

Why: an estimate without its error reads as a measurement. The CPU models
(``tdp-curve``, ``ccf-vcpu``) and the DRAM model (``dram-gib``) are evaluated here, with
the coefficients the agent uses (agent/data/power_models.toml), at the published points
of agent/data/estimator_validation.csv: CPU-package and DRAM power of five bare-metal
EC2 instances at 0, 10, 50 and 100 % load, measured with RAPL by Teads (the file's header
cites them). Nothing is fitted here and nothing is hard-coded: change a coefficient and
its error changes with it. ``benchmarks/estimator_error.py`` prints the table;
:mod:`joulestat.reports.bounds` turns each error into bounds on an estimated figure.

The error of one point is ``model / measured - 1`` (+20 %: the model says 20 % more
than RAPL did). A figure the model gives as ``x`` then lies, as far as these points
show, in ``[x / (1 + worst over), x / (1 + worst under)]``: :attr:`ModelError.low` and
:attr:`ModelError.high` are those bounds relative to ``x``. Five Intel server CPUs are
what is published: AMD, ARM and client parts may be off by more (docs/methodology.md).
``tdp-curve`` is evaluated on the rows whose CPU is in the TDP table; its curve was fitted
to the average of these same instances, so its error is in-sample and flatters it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from joulestat.carbon.datafiles import data_path, read_commented_csv
from joulestat.devices.cpu_tdp import lookup_tdp
from joulestat.devices.power_model import (
    BYTES_PER_GIB,
    METHOD_CCF_VCPU,
    METHOD_TDP_CURVE,
    build_cpu_model,
    dram_power_w,
    load_power_models,
)

VALIDATION_FILE = "estimator_validation.csv"
DRAM_METHOD = "dram-gib"
_COLUMNS = ("instance", "cpu_model", "sockets", "vcpus", "memory_gib", "load", "package_w",
            "dram_w")
REFERENCE = "against Teads' RAPL points of 5 bare-metal EC2 instances (estimator_validation.csv)"


@dataclass(frozen=True, slots=True)
class ValidationPoint:
    """One published measurement: an instance at one CPU load."""

    instance: str
    cpu_model: str
    sockets: int
    vcpus: int
    memory_gib: float
    load: float
    package_w: float
    dram_w: float


@dataclass(frozen=True, slots=True)
class ModelError:
    """One model's error at the published points (``errors``: model / measured - 1,
    point by point), its mean absolute percentage error, and the bounds on a figure it
    gives, relative to that figure (``low`` <= 0 <= ``high`` when the model both over-
    and underestimated)."""

    method: str
    errors: tuple[float, ...]
    instances: tuple[str, ...]
    reference: str = REFERENCE

    @property
    def mape(self) -> float:
        return sum(abs(e) for e in self.errors) / len(self.errors)

    @property
    def low(self) -> float:
        """The truth's lowest, relative to the model's figure: ``1 / (1 + worst over) - 1``."""
        return min(0.0, 1.0 / (1.0 + max(self.errors)) - 1.0)

    @property
    def high(self) -> float:
        return max(0.0, 1.0 / (1.0 + min(self.errors)) - 1.0)


@functools.cache
def validation_points() -> tuple[ValidationPoint, ...]:
    rows = read_commented_csv(data_path(VALIDATION_FILE), _COLUMNS)
    return tuple(ValidationPoint(r["instance"], r["cpu_model"], int(r["sockets"]),
                                 int(r["vcpus"]), float(r["memory_gib"]), float(r["load"]),
                                 float(r["package_w"]), float(r["dram_w"])) for r in rows)


def _predicted_w(method: str, point: ValidationPoint) -> float | None:
    """What joulestat's model says for ``point``; None where it does not apply (a CPU
    outside the TDP table for ``tdp-curve``). ``ccf-vcpu`` with the AWS coefficients,
    as on these AWS instances."""
    models = load_power_models()
    if method == DRAM_METHOD:
        return dram_power_w(round(point.memory_gib * BYTES_PER_GIB), models)
    if method == METHOD_TDP_CURVE:
        match = lookup_tdp(point.cpu_model)
        if match is None:
            return None
        model = build_cpu_model(method, point.vcpus, match.tdp_w, sockets=point.sockets,
                                models=models)
        return model.power_w(point.load)
    if method == METHOD_CCF_VCPU:
        return build_cpu_model(method, point.vcpus, cloud="aws", models=models).power_w(
            point.load)
    return None


@functools.cache
def estimator_error(method: str) -> ModelError | None:
    """``method``'s error at the published points (``ccf-vcpu``, ``tdp-curve``,
    ``dram-gib``); None for a model no published point measures (network, Neuron's
    utilisation model)."""
    errors: list[float] = []
    instances: dict[str, None] = {}
    for point in validation_points():
        predicted = _predicted_w(method, point)
        if predicted is None:
            continue
        measured = point.dram_w if method == DRAM_METHOD else point.package_w
        errors.append(predicted / measured - 1.0)
        instances[point.instance] = None
    if not errors:
        return None
    return ModelError(method, tuple(errors), tuple(instances))
