"""Embodied emissions (SCI's M): the share of a server's manufacturing a job used up.

SCI (Green Software Foundation, ISO/IEC 21031:2024) defines
``M = TE × (TiR / EL) × (RR / ToR)``: total embodied emissions of the hardware, times the
time reserved over its expected life, times the resources reserved over the total. Cloud
Carbon Footprint makes that concrete for cloud instances: TE is the whole server (the
family's largest size), EL is 4 years, and the resource share is vCPUs of the instance
over vCPUs of that largest size. The time reserved is how long the instance was held,
not how long the job computed: a reserved, idle GPU still wears out its share.

This figure is reported apart from operational emissions (energy × intensity) because it
rests on coarse, published-by-formula server footprints, not on anything measured here.
For GPU instances the vCPU share can differ from the GPU share (g5.12xlarge: 48/192 of the
vCPUs but 4/8 of the GPUs); we follow CCF's vCPU rule and say so in the note.
"""

from __future__ import annotations

from dataclasses import dataclass

from joulestat.carbon.catalog import InstanceSpec
from joulestat.carbon.units import kg_to_g, years_to_s
from joulestat.core import units

METHOD = "sci-m:ccf-vcpu-share"


@dataclass(frozen=True, slots=True)
class Embodied:
    """Grams CO2e of embodied emissions (None when unknown), the method and its numbers."""

    g: float | None
    method: str
    note: str


def embodied_g(spec: InstanceSpec | None, reserved_s: float) -> Embodied:
    """M = TE × (reserved_s / lifetime) × (vcpus / family_max_vcpus), in grams."""
    if reserved_s < 0:
        raise ValueError(f"reserved time must be >= 0 s, got {reserved_s!r}")
    if spec is None:
        return Embodied(None, "unknown", "instance type not in the catalog: embodied unknown")
    if spec.embodied_kgco2e is None:
        return Embodied(None, "unknown",
                        f"the catalog has no embodied figure for {spec.instance_type}")
    lifetime_s = years_to_s(spec.lifetime_years)
    time_share = reserved_s / lifetime_s
    resource_share = spec.vcpus / spec.family_max_vcpus
    grams = kg_to_g(spec.embodied_kgco2e) * time_share * resource_share
    note = (f"{units.sig(spec.embodied_kgco2e)} kgCO2e server x ({units.duration(reserved_s)} / "
            f"{spec.lifetime_years:g} years) x ({spec.vcpus} / {spec.family_max_vcpus} vCPUs); "
            f"TE from {spec.embodied_source}")
    if spec.accelerator_count:
        note += "; resource share by vCPU (CCF), not by accelerator"
    return Embodied(grams, METHOD, note)
