"""Estimator sensors for nodes without energy counters (most cloud VMs).

They satisfy the same :class:`~joulestat.devices.sensor.Sensor` contract as RAPL or NVML:
cumulative joules per (component, device) since open. Being power models, they
integrate internally: each ``read(now_s)`` turns the /proc/stat busy ratio over the
interval since the previous read into watts and multiplies by the real elapsed
``now_s`` difference, so a late tick is charged for the time that really passed.

Device name: both sensors report device ``node``. An estimate covers every socket and
vCPU (or every DIMM) of the node at once; it is not a RAPL ``package-0``, and a name of
its own keeps anyone from summing it with, or mistaking it for, a measured package.

Provenance is ``model:<method>``: ``model:tdp-curve`` or ``model:ccf-vcpu`` for the CPU,
``model:dram-gib`` for memory, so reports can say which figures were estimated.

Restart on the same boot: the CPU sensor's checkpoint holds the /proc/stat counters of its
last read, so the first read after ``restore`` takes the load over the whole gap from the
kernel's jiffies (its average load) and integrates the model's power at that load over the
gap's real length. The DRAM sensor needs only its total and last time: constant power times
the gap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.records import DeviceInfo
from joulestat.core.tick import Component
from joulestat.devices.cpu_tdp import TdpMatch, lookup_tdp
from joulestat.devices.power_model import (
    BYTES_PER_GIB,
    CpuPowerModel,
    PowerModels,
    build_cpu_model,
    choose_cpu_method,
    dram_power_w,
    load_power_models,
)
from joulestat.devices.sensor import (
    BadState,
    Capabilities,
    Reading,
    Sensor,
    SensorError,
    SeriesKey,
    get_float,
    get_int,
    get_map,
)
from joulestat.host.kernel_file import KernelFile
from joulestat.host.procfs import (
    CpuTimes,
    is_virtual_machine,
    parse_cpu_times,
    read_cpu_model,
    read_cpu_sockets,
    read_cpu_times,
    read_mem_total_bytes,
)

log = logging.getLogger(__name__)

# The CpuTimes fields a checkpoint carries (all ints: jiffies, and the thread count).
_TIMES_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
                 "threads")

DEVICE_NODE = "node"
DRAM_SOURCE = "model:dram-gib"


class CpuModelSensor(Sensor):
    """Node CPU energy from the busy ratio of /proc/stat and a :class:`CpuPowerModel`.

    The first ``read`` only records the baseline and reports 0 J. Each later read
    computes load = Δbusy / Δtotal jiffies and adds ``power_w(load) × Δnow_s``. If no
    jiffy elapsed (an interval shorter than one USER_HZ tick) or the counters went
    backwards, the previous interval's load is reused rather than guessing 0 or 100 %.
    """

    name = "model-cpu"
    capabilities = Capabilities(estimate=True, known_idle=True)

    def __init__(
        self,
        procfs_root: Path,
        model: CpuPowerModel,
        cpu_name: str = "unknown",
        reason: str = "",
    ) -> None:
        self._procfs_root = Path(procfs_root)
        self._stat = KernelFile(self._procfs_root / "stat")
        self.model = model
        self.cpu_name = cpu_name
        self.reason = reason  # why this method was chosen, for the agent's start-up log
        self._energy_j = 0.0
        self._prev: CpuTimes | None = None
        self._prev_s = 0.0
        self._last_load = 0.0

    @property
    def source(self) -> str:
        return self.model.source

    @property
    def last_times(self) -> CpuTimes | None:
        """The /proc/stat counters of the last read, shared with job accounting so the
        file is parsed once per tick."""
        return self._prev

    @property
    def idle_power_w(self) -> float:
        """Estimated CPU power at 0 % load; attribution keeps this share unattributed."""
        return self.model.idle_power_w

    def known_idle_w(self) -> dict[SeriesKey, float]:
        """The model at 0 % load, for the node's one CPU series."""
        return {(Component.CPU, DEVICE_NODE): float(self.idle_power_w)}

    @property
    def last_load(self) -> float:
        """Busy ratio (0..1) of the most recent interval."""
        return self._last_load

    def describe(self) -> list[DeviceInfo]:
        return [
            DeviceInfo(component=Component.CPU, device=DEVICE_NODE, source=self.source,
                       model=self.cpu_name)
        ]

    def read(self, now_s: float) -> list[Reading]:
        try:
            times = parse_cpu_times(self._stat.read_text(), self._stat.path)
        except ValueError as exc:
            raise SensorError(str(exc)) from exc
        if self._prev is None:
            self._prev, self._prev_s = times, now_s
            return [self._reading()]
        elapsed_s = now_s - self._prev_s
        if elapsed_s <= 0:
            log.debug("cpu estimator: no time elapsed (%.6f s); energy unchanged", elapsed_s)
            return [self._reading()]
        d_total = times.total_jiffies - self._prev.total_jiffies
        d_busy = times.busy_jiffies - self._prev.busy_jiffies
        if d_total > 0 and d_busy >= 0:
            self._last_load = min(1.0, d_busy / d_total)
        elif d_total < 0 or d_busy < 0:
            log.warning(
                "cpu estimator: /proc/stat counters went backwards (Δtotal=%d, Δbusy=%d); "
                "reusing the previous load %.3f", d_total, d_busy, self._last_load,
            )
        self._energy_j += self.model.power_w(self._last_load) * elapsed_s
        self._prev, self._prev_s = times, now_s
        return [self._reading()]

    def _reading(self) -> Reading:
        return Reading(component=Component.CPU, device=DEVICE_NODE, energy_j=self._energy_j,
                       source=self.source)

    def checkpoint(self) -> dict:
        """The last /proc/stat counters (when read), their time, the total and last load."""
        state: dict[str, object] = {"prev_s": self._prev_s, "energy_j": self._energy_j,
                                    "last_load": self._last_load}
        prev = self._prev
        if prev is not None:
            state["times"] = {
                "user": prev.user, "nice": prev.nice, "system": prev.system,
                "idle": prev.idle, "iowait": prev.iowait, "irq": prev.irq,
                "softirq": prev.softirq, "steal": prev.steal, "threads": prev.threads,
            }
        return state

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint; a malformed one is ignored with a warning.

        Without saved counters (the old sensor never read) only the total is restored
        and the next read is a baseline, as for a fresh sensor.
        """
        try:
            if not isinstance(state, dict):
                raise BadState(f"not an object: {type(state).__name__}")
            energy_j = get_float(state, "energy_j")
            prev_s = get_float(state, "prev_s")
            last_load = get_float(state, "last_load")
            if last_load > 1.0:
                raise BadState(f"'last_load' above 1: {last_load!r}")
            prev: CpuTimes | None = None
            if "times" in state:
                times = get_map(state, "times")
                prev = CpuTimes(**{f: get_int(times, f) for f in _TIMES_FIELDS})
        except BadState as exc:
            log.warning("cpu estimator checkpoint ignored: %s", exc)
            return
        self._energy_j, self._last_load = energy_j, last_load
        if prev is not None:
            self._prev, self._prev_s = prev, prev_s

    def close(self) -> None:
        self._stat.close()


class DramModelSensor(Sensor):
    """Node DRAM energy: a constant W/GiB × MemTotal, integrated over elapsed time.

    There is no load term: DRAM power depends on bandwidth, which procfs does not
    expose, and most of a server's DRAM power is refresh and background power that
    scales with capacity. All of it is therefore idle power. MemTotal is read once at
    open; memory hot-plug or ballooning is not followed.
    """

    name = "model-dram"
    capabilities = Capabilities(estimate=True, known_idle=True)

    def __init__(self, procfs_root: Path, models: PowerModels | None = None) -> None:
        self.mem_total_bytes = read_mem_total_bytes(Path(procfs_root))
        self.power_w = dram_power_w(self.mem_total_bytes, models)
        self._energy_j = 0.0
        self._prev_s: float | None = None

    @property
    def source(self) -> str:
        return DRAM_SOURCE

    @property
    def idle_power_w(self) -> float:
        """The whole DRAM estimate: constant, so all of it is idle power."""
        return self.power_w

    def known_idle_w(self) -> dict[SeriesKey, float]:
        """All of the estimate, for the node's one DRAM series."""
        return {(Component.DRAM, DEVICE_NODE): float(self.idle_power_w)}

    def describe(self) -> list[DeviceInfo]:
        gib = self.mem_total_bytes / BYTES_PER_GIB
        return [
            DeviceInfo(component=Component.DRAM, device=DEVICE_NODE, source=self.source,
                       model=f"{gib:.2f} GiB MemTotal")
        ]

    def read(self, now_s: float) -> list[Reading]:
        if self._prev_s is None:
            self._prev_s = now_s  # first read: baseline only
        elif now_s > self._prev_s:
            self._energy_j += self.power_w * (now_s - self._prev_s)
            self._prev_s = now_s
        return [Reading(component=Component.DRAM, device=DEVICE_NODE, energy_j=self._energy_j,
                        source=self.source)]

    def checkpoint(self) -> dict:
        """The total and the time it was reached (absent before the first read)."""
        if self._prev_s is None:
            return {"energy_j": self._energy_j}
        return {"energy_j": self._energy_j, "prev_s": self._prev_s}

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint: the next read adds constant power times the gap."""
        try:
            if not isinstance(state, dict):
                raise BadState(f"not an object: {type(state).__name__}")
            energy_j = get_float(state, "energy_j")
            prev_s = get_float(state, "prev_s") if "prev_s" in state else None
        except BadState as exc:
            log.warning("dram estimator checkpoint ignored: %s", exc)
            return
        self._energy_j = energy_j
        if prev_s is not None:
            self._prev_s = prev_s

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """What the CPU estimator was built from: shown by the agent log and the CLI."""

    cpu_name: str
    is_vm: bool
    threads: int
    sockets: int
    tdp: TdpMatch | None


def read_cpu_facts(procfs_root: Path, cpu_model_override: str | None = None,
                   lookup: bool | None = None) -> CpuFacts:
    """This node's CPU name, VM flag, threads, sockets and table TDP.

    ``lookup=None`` looks the TDP up only on bare metal: on a VM it is never used, so
    the table is not even read.
    """
    root = Path(procfs_root)
    cpu_name = cpu_model_override or read_cpu_model(root)
    is_vm = is_virtual_machine(root)
    do_lookup = (not is_vm) if lookup is None else lookup
    return CpuFacts(
        cpu_name=cpu_name,
        is_vm=is_vm,
        threads=read_cpu_times(root).threads,
        sockets=read_cpu_sockets(root),
        tdp=lookup_tdp(cpu_name) if do_lookup else None,
    )


def open_cpu_estimator(
    procfs_root: Path,
    cpu_model_override: str | None = None,
    cloud: str | None = None,
    models: PowerModels | None = None,
) -> CpuModelSensor:
    """Build the CPU estimator for this node (method chosen by ``choose_cpu_method``)."""
    root = Path(procfs_root)
    try:
        facts = read_cpu_facts(root, cpu_model_override)
    except (OSError, ValueError) as exc:
        raise SensorError(f"cannot build the CPU estimator: {exc}") from exc
    method, reason = choose_cpu_method(facts.is_vm, facts.tdp.tdp_w if facts.tdp else None)
    model = build_cpu_model(
        method, facts.threads, facts.tdp.tdp_w if facts.tdp else None,
        sockets=facts.sockets, cloud=cloud, models=models or load_power_models(),
    )
    log.info(
        "cpu estimator: %r, %d threads, %d socket(s), method %s (%s); idle %.2f W, busy %.2f W",
        facts.cpu_name, facts.threads, facts.sockets, method, reason,
        model.idle_power_w, model.power_w(1.0),
    )
    return CpuModelSensor(root, model, cpu_name=facts.cpu_name, reason=reason)


def open_dram_estimator(procfs_root: Path, models: PowerModels | None = None) -> DramModelSensor:
    """Build the DRAM estimator from MemTotal."""
    try:
        sensor = DramModelSensor(Path(procfs_root), models)
    except (OSError, ValueError) as exc:
        raise SensorError(f"cannot build the DRAM estimator: {exc}") from exc
    log.info("dram estimator: %d bytes MemTotal, %.2f W", sensor.mem_total_bytes, sensor.power_w)
    return sensor


def open_estimators(
    procfs_root: Path,
    cpu_model_override: str | None = None,
    cloud: str | None = None,
) -> list[Sensor]:
    """The CPU and DRAM estimators for a node with no usable counters.

    A CPU estimator that cannot be built raises :class:`SensorError` (without
    /proc/stat there is nothing to estimate from); a DRAM estimator that cannot be
    built is logged and left out, so CPU estimates still flow.
    """
    models = load_power_models()
    sensors: list[Sensor] = [open_cpu_estimator(procfs_root, cpu_model_override, cloud, models)]
    try:
        sensors.append(open_dram_estimator(procfs_root, models))
    except SensorError as exc:
        log.warning("%s; continuing without a DRAM estimate", exc)
    return sensors
