"""Power-model coefficients (agent/data/power_models.toml) and the pure functions on them.

Two CPU methods, chosen by :func:`choose_cpu_method`:

``tdp-curve``  bare metal whose CPU is in CodeCarbon's TDP table:
               ``sockets x TDP x ratio(load)``, ratio a Boavizta-shaped log curve.
``ccf-vcpu``   a VM (cpuinfo ``hypervisor`` flag), or a CPU missing from the table:
               ``threads x (min_w + load x (max_w - min_w))`` with Cloud Carbon
               Footprint's per-vCPU figures.

Why not TDP on a VM: TDP describes a whole package. A 2-vCPU slice of a 240 W, 96-thread
Xeon host would be charged 0.12 x 240 = 29 W idle and 245 W busy by the TDP curve,
far beyond its ~5 W share; the per-vCPU model scales with what the guest was sold.

Loads are ratios in 0..1 (the busy fraction of /proc/stat deltas); the CLI converts
from percent. Nothing here reads hardware: callers pass the facts in, tests pass numbers.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METHOD_TDP_CURVE = "tdp-curve"
METHOD_CCF_VCPU = "ccf-vcpu"
CPU_METHODS = (METHOD_TDP_CURVE, METHOD_CCF_VCPU)

BYTES_PER_GB = 10**9
BYTES_PER_GIB = 2**30


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a coefficient comes from: shown by ``joulestat estimate`` and the docs."""

    source: str
    url: str
    date: str
    retrieved: str


@dataclass(frozen=True, slots=True)
class TdpCurve:
    """Package power as a fraction of TDP: ``a * ln(1 + k * load) + d``, load in 0..1."""

    a: float
    k: float
    d: float
    loads: tuple[float, ...]  # the published points the fit was made to
    tdp_ratios: tuple[float, ...]
    points_citation: Citation
    fit_citation: Citation

    def ratio(self, load: float) -> float:
        return self.a * math.log1p(self.k * load) + self.d


@dataclass(frozen=True, slots=True)
class VcpuCoefficients:
    """Cloud Carbon Footprint's watts per vCPU at 0 % and 100 % utilisation."""

    cloud: str
    min_w: float
    max_w: float
    citation: Citation


@dataclass(frozen=True, slots=True)
class DramCoefficient:
    """Constant DRAM power per installed capacity (no load term: see docs)."""

    w_per_gb: float
    citation: Citation

    @property
    def w_per_gib(self) -> float:
        return self.w_per_gb * BYTES_PER_GIB / BYTES_PER_GB


@dataclass(frozen=True, slots=True)
class PowerModels:
    """Everything in power_models.toml, validated."""

    tdp_curve: TdpCurve
    vcpu: Mapping[str, VcpuCoefficients]
    default_cloud: str
    dram: DramCoefficient

    def vcpu_for(self, cloud: str | None) -> VcpuCoefficients:
        """Coefficients for ``cloud``; unknown or None gets the default cloud's averages."""
        key = (cloud or "").strip().lower()
        return self.vcpu.get(key, self.vcpu[self.default_cloud])


def default_models_path() -> Path:
    """The bundled file: agent/data/power_models.toml (shipped as package data)."""
    return Path(__file__).resolve().parent.parent / "data" / "power_models.toml"


def _number(table: Mapping[str, Any], key: str, where: str) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}.{key}: expected a finite number, got {value!r}")
    return float(value)


def _citation(table: Mapping[str, Any], where: str) -> Citation:
    fields = {}
    for key in ("source", "url", "date", "retrieved"):
        value = table.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}.{key}: every coefficient needs a non-empty {key}")
        fields[key] = value.strip()
    return Citation(**fields)


def _table(data: Mapping[str, Any], dotted: str) -> Mapping[str, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ValueError(f"[{dotted}] is missing")
        node = node[part]
    if not isinstance(node, Mapping):
        raise ValueError(f"[{dotted}] must be a table")
    return node


def parse_power_models(data: Mapping[str, Any], origin: str = "power_models.toml") -> PowerModels:
    """Validate the TOML document; a bad value raises ValueError naming file and key."""
    try:
        return _parse(data)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None


def _parse(data: Mapping[str, Any]) -> PowerModels:
    points = _table(data, "cpu.tdp_curve.points")
    loads = tuple(float(x) for x in points.get("loads", ()))
    ratios = tuple(float(x) for x in points.get("tdp_ratios", ()))
    if len(loads) < 2 or len(loads) != len(ratios):
        raise ValueError("cpu.tdp_curve.points: loads and tdp_ratios need equal length >= 2")
    if loads[0] != 0.0 or loads[-1] != 1.0 or list(loads) != sorted(set(loads)):
        raise ValueError("cpu.tdp_curve.points.loads: must rise strictly from 0.0 to 1.0")
    fit = _table(data, "cpu.tdp_curve.fit")
    curve = TdpCurve(
        a=_number(fit, "a", "cpu.tdp_curve.fit"),
        k=_number(fit, "k", "cpu.tdp_curve.fit"),
        d=_number(fit, "d", "cpu.tdp_curve.fit"),
        loads=loads,
        tdp_ratios=ratios,
        points_citation=_citation(points, "cpu.tdp_curve.points"),
        fit_citation=_citation(fit, "cpu.tdp_curve.fit"),
    )
    if curve.a <= 0 or curve.k <= 0 or curve.d <= 0:
        raise ValueError("cpu.tdp_curve.fit: a, k and d must be positive (a rising curve)")

    ccf = _table(data, "cpu.ccf_vcpu")
    vcpu: dict[str, VcpuCoefficients] = {}
    for cloud, table in ccf.items():
        if not isinstance(table, Mapping):
            continue
        where = f"cpu.ccf_vcpu.{cloud}"
        coeff = VcpuCoefficients(
            cloud=cloud,
            min_w=_number(table, "min_w", where),
            max_w=_number(table, "max_w", where),
            citation=_citation(table, where),
        )
        if not 0 < coeff.min_w < coeff.max_w:
            raise ValueError(f"{where}: need 0 < min_w < max_w")
        vcpu[cloud] = coeff
    default_cloud = ccf.get("default_cloud")
    if default_cloud not in vcpu:
        raise ValueError(
            f"cpu.ccf_vcpu.default_cloud: {default_cloud!r} is not one of {sorted(vcpu)}"
        )

    dram_table = _table(data, "dram")
    dram = DramCoefficient(
        w_per_gb=_number(dram_table, "w_per_gb", "dram"), citation=_citation(dram_table, "dram")
    )
    if dram.w_per_gb <= 0:
        raise ValueError("dram.w_per_gb: must be positive")
    return PowerModels(tdp_curve=curve, vcpu=vcpu, default_cloud=default_cloud, dram=dram)


def load_power_models(path: Path | None = None) -> PowerModels:
    """Read and validate the coefficients (the bundled file unless ``path`` is given)."""
    if path is None:
        return _load_default()
    return _load(Path(path))


@functools.cache
def _load_default() -> PowerModels:
    return _load(default_models_path())


def _load(path: Path) -> PowerModels:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    return parse_power_models(data, origin=str(path))


def _check_load(load: float) -> float:
    if isinstance(load, bool) or not math.isfinite(load) or not 0.0 <= load <= 1.0:
        raise ValueError(f"load must be a ratio between 0 and 1, got {load!r}")
    return float(load)


@dataclass(frozen=True, slots=True)
class CpuPowerModel:
    """One node's CPU estimator, fully determined: method plus the numbers it needs."""

    method: str
    threads: int
    sockets: int
    tdp_w: float | None
    curve: TdpCurve
    vcpu: VcpuCoefficients

    def __post_init__(self) -> None:
        if self.method not in CPU_METHODS:
            raise ValueError(f"method must be one of {', '.join(CPU_METHODS)}, got {self.method!r}")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if self.sockets < 1:
            raise ValueError(f"sockets must be at least 1, got {self.sockets}")
        if self.method == METHOD_TDP_CURVE and (self.tdp_w is None or not self.tdp_w > 0):
            raise ValueError(f"method {METHOD_TDP_CURVE} needs a positive TDP, got {self.tdp_w!r}")

    @property
    def source(self) -> str:
        return f"model:{self.method}"

    def power_w(self, load: float) -> float:
        """Estimated CPU power of the whole node at ``load`` (0..1)."""
        load = _check_load(load)
        if self.method == METHOD_TDP_CURVE:
            assert self.tdp_w is not None  # checked in __post_init__
            return self.sockets * self.tdp_w * self.curve.ratio(load)
        return self.threads * (self.vcpu.min_w + load * (self.vcpu.max_w - self.vcpu.min_w))

    @property
    def idle_power_w(self) -> float:
        """The estimate at 0 % load: what attribution treats as the node's idle CPU power."""
        return self.power_w(0.0)

    def formula(self, load: float) -> str:
        """The computation with every number filled in, for ``joulestat estimate``."""
        watts = self.power_w(load)
        if self.method == METHOD_TDP_CURVE:
            c = self.curve
            return (
                f"{self.sockets} socket(s) x {self.tdp_w:g} W TDP x "
                f"({c.a:g} x ln(1 + {c.k:g} x {load:.4g}) + {c.d:g}) = {watts:.2f} W"
            )
        v = self.vcpu
        return (
            f"{self.threads} vCPU x ({v.min_w:g} + {load:.4g} x ({v.max_w:g} - {v.min_w:g})) W"
            f" = {watts:.2f} W"
        )


def build_cpu_model(
    method: str,
    threads: int,
    tdp_w: float | None = None,
    *,
    sockets: int = 1,
    cloud: str | None = None,
    models: PowerModels | None = None,
) -> CpuPowerModel:
    models = models or load_power_models()
    return CpuPowerModel(
        method=method,
        threads=threads,
        sockets=sockets,
        tdp_w=tdp_w,
        curve=models.tdp_curve,
        vcpu=models.vcpu_for(cloud),
    )


def cpu_power_w(
    method: str,
    load: float,
    threads: int,
    tdp_w: float | None = None,
    *,
    sockets: int = 1,
    cloud: str | None = None,
    models: PowerModels | None = None,
) -> float:
    """Estimated node CPU power in watts; ``threads`` matters only for ``ccf-vcpu``,
    ``tdp_w`` and ``sockets`` only for ``tdp-curve``."""
    model = build_cpu_model(method, threads, tdp_w, sockets=sockets, cloud=cloud, models=models)
    return model.power_w(load)



def dram_power_w(mem_total_bytes: int, models: PowerModels | None = None) -> float:
    """Constant DRAM power for ``mem_total_bytes`` of installed memory."""
    if mem_total_bytes <= 0:
        raise ValueError(f"memory size must be positive, got {mem_total_bytes}")
    models = models or load_power_models()
    return models.dram.w_per_gib * mem_total_bytes / BYTES_PER_GIB


def choose_cpu_method(is_vm: bool, tdp_w: float | None) -> tuple[str, str]:
    """Which method the agent uses, and a sentence saying why (for logs and the CLI)."""
    if is_vm:
        return METHOD_CCF_VCPU, (
            "virtual machine (cpuinfo 'hypervisor' flag): TDP describes the host's whole "
            "package, not this guest's vCPUs, so power is estimated per vCPU"
        )
    if tdp_w is None:
        return METHOD_CCF_VCPU, (
            "bare metal, but the CPU is not in the TDP table: each hardware thread is "
            "treated as one vCPU"
        )
    return METHOD_TDP_CURVE, "bare metal with a known TDP: TDP x load curve per socket"
