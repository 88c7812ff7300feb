"""Power usage effectiveness: facility energy per unit of IT energy, per provider.

Measured joules are the server's; the data centre also spends energy on cooling and power
conversion, which the grid supplies too. Cloud Carbon Footprint multiplies IT energy by a
fleet-wide PUE per provider, and so do we. Providers publish their own (changing) figures;
we keep CCF's so that joulestat's numbers can be compared with CCF's. On-prem or unknown
hardware gets 1.0: we cannot know its facility, so we claim no overhead rather than invent
one, and say so.

Source: Cloud Carbon Footprint methodology, "Power Usage Effectiveness",
https://www.cloudcarbonfootprint.org/docs/methodology/#power-usage-effectiveness
(AWS 1.135, GCP 1.1, Azure 1.185; page as of 2023, read 2026-11-29).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from joulestat.carbon.catalog import SAGEMAKER_PREFIX, lookup
from joulestat.carbon.regions import find_region

CCF_METHODOLOGY_URL = "https://www.cloudcarbonfootprint.org/docs/methodology/#power-usage-effectiveness"
PUE_BY_PROVIDER = {"aws": 1.135, "gcp": 1.1, "azure": 1.185}
UNKNOWN_PUE = 1.0

_AZURE_TYPE = re.compile(r"^(standard|basic)_", re.IGNORECASE)
# GCP machine types: <series>-<class>-<n>[g], e.g. n2-standard-8, a2-highgpu-1g, g2-standard-4
_GCP_TYPE = re.compile(
    r"^[a-z][a-z0-9]*-(standard|highmem|highcpu|highgpu|megagpu|ultragpu|ultramem|megamem|"
    r"hypermem|custom|micro|small|medium)(-\d+g?)?$")
# EC2: <family>.<size>, e.g. p4d.24xlarge, c7g.medium, g5.metal
_AWS_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.(nano|micro|small|medium|large|metal|\d*xlarge)"
                       r"(-\d+xl)?$")


@dataclass(frozen=True, slots=True)
class Pue:
    value: float
    source: str
    provider: str | None


def infer_provider(instance_type: str | None, region: str | None) -> str | None:
    """``aws``, ``gcp``, ``azure`` or None: from the catalog, the type's naming scheme,
    then the region table."""
    spec = lookup(instance_type)
    if spec is not None:
        return spec.provider
    name = (instance_type or "").strip()
    lower = name.lower()
    if lower.startswith(SAGEMAKER_PREFIX) or _AWS_TYPE.match(lower):
        return "aws"
    if _AZURE_TYPE.match(name):
        return "azure"
    if _GCP_TYPE.match(lower):
        return "gcp"
    cloud, _ = find_region(region)
    return cloud.provider if cloud is not None else None


def pue_for(instance_type: str | None, region: str | None, override: float | None = None) -> Pue:
    """The PUE to apply: the override, else the provider's CCF default, else 1.0."""
    if override is not None:
        value = float(override)
        if math.isnan(value) or math.isinf(value) or value < 1.0:
            raise ValueError(f"PUE override must be a finite number >= 1.0, got {override!r}")
        return Pue(value, "override", infer_provider(instance_type, region))
    provider = infer_provider(instance_type, region)
    if provider is None:
        return Pue(UNKNOWN_PUE, "default:unknown-facility (no overhead assumed)", None)
    return Pue(PUE_BY_PROVIDER[provider], f"ccf:{provider} ({CCF_METHODOLOGY_URL})", provider)
