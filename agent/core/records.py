"""The records that cross layers: what a node, a device, a job's share of a tick and a
job as one node sees it are, as every layer that holds them reads them.

Declared here, below every layer, so that the store persists and the outputs export
plain records of the core rather than objects of the layers that make them (a sensor's
device, the host's identity, attribution's shares and its live jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from joulestat.core.serving_trace import ServingTrace

__all__ = ["DeviceInfo", "JobRecord", "NodeInfo", "Share", "StoredJob"]


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


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the store keeps of one job as one node sees it, at one moment.

    A snapshot, not the job: attribution's registry keeps each job as a live object
    that ticks and API requests change under its lock, and the store thread writes
    later, so it is handed this copy, made when the job changed (registered, ended,
    relabelled), never per tick. The registry makes it
    (:meth:`joulestat.attribution.registry.Job.record`); tests and benchmarks build it
    directly. Its mappings are the record's own copies, not to be mutated.
    """

    id: str
    name: str
    kind: str
    labels: Mapping[str, str]
    pids: frozenset[int]
    started_s: float
    origin: str = "api"  # api, run, client, embedded, discovered:<scheduler>
    ended_s: float | None = None
    # The instance type the job runs as on this node; None: the node's own.
    instance_type: str | None = None
    # How joulestat measured it (cpu_source, idle_policy), apart from the user's labels.
    agent_labels: Mapping[str, str] = field(default_factory=dict)
    # A serving job's latency histograms on this node, per model and kind (JSON-able).
    latency: Mapping[str, Any] = field(default_factory=dict)
    # A serving job's load over time on this node (joulestat.core.serving_trace).
    serving_trace: ServingTrace | None = None

    @property
    def status(self) -> str:
        return "running" if self.ended_s is None else "ended"


@dataclass(frozen=True, slots=True)
class StoredJob:
    """A running job as the store gives it back to its node's restarted agent: its
    record and what that node recorded for it (energy per component, above idle and of
    idle, and the units it counted), so the registry goes on from those totals
    (:meth:`joulestat.attribution.registry.Job.from_stored`)."""

    record: JobRecord
    dynamic_j: Mapping[str, float]
    idle_j: Mapping[str, float]
    units: Mapping[str, float]

    @property
    def energy_j(self) -> float:
        return sum(self.dynamic_j.values()) + sum(self.idle_j.values())
