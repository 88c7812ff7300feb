"""The records that cross layers: what a node, a device and a job's share of a tick are,
as every layer that holds them reads them.

Declared here, below every layer, so that the store persists and the outputs export
plain records of the core rather than objects of the layers that make them (a sensor's
device, the host's identity, attribution's shares).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceInfo", "NodeInfo", "Share"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One machine as its agent describes itself: its name, instance type and region
    (from the cloud's metadata, the flags or ``unknown``), CPU model and agent version."""

    node: str
    instance_type: str
    region: str
    cpu_model: str
    agent_version: str


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a sensor knows about one device it reports, recorded once per agent start."""

    # A Component from a sensor; the plain string it equals when read back from the store.
    component: str
    device: str
    source: str
    model: str = ""  # e.g. "NVIDIA H100 80GB HBM3", "Intel(R) Xeon(R) Platinum 8375C"
    uuid: str = ""  # stable hardware id where the API has one (NVML UUID)
    index: int | None = None  # the API's own index (NVML index, RAPL package number)
    vendor: str = ""  # "NVIDIA", "AMD", "Intel", "AWS": with model, what a dashboard shows
    # How its energy is split among processes when not by measured use: "mig_slice_estimate"
    attribution: str = ""
    # The board's power limit in W as its vendor API reports it, read once at start (NVML:
    # enforced limit; amdsmi: power_limit; HLML: default limit); None where it has none.
    # A GPU capped below its rating draws less and runs longer: a comparison should show it.
    power_limit_w: float | None = None


@dataclass(frozen=True, slots=True)
class Share:
    """What one job (None: the unattributed remainder) got of one device's energy in a
    tick, above idle and of idle, with the reading's provenance."""

    job: str | None  # None: unattributed (system, idle under `exclude`)
    component: str
    device: str
    source: str
    dynamic_j: float
    idle_j: float

    @property
    def energy_j(self) -> float:
        return self.dynamic_j + self.idle_j
