"""Who this node is: name, instance type, region, CPU model.

Instance type and region come from, in order: the setting (flag, env, TOML), SageMaker's
``resourceconfig.json`` and ``SM_CURRENT_INSTANCE_TYPE``, then the cloud's metadata
service, else ``local``. The metadata service is only asked when the DMI tables say
which cloud this is (as cloud-init's ds-identify does), so a laptop or an on-prem box
sends no packets to 169.254.169.254, and a cloud VM asks exactly one provider, within
a 300 ms budget.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from joulestat.core.records import NodeInfo

log = logging.getLogger(__name__)

SAGEMAKER_RESOURCE_CONFIG = Path("/opt/ml/input/config/resourceconfig.json")
METADATA_TIMEOUT_S = 0.3
EC2_BASE_URL = "http://169.254.169.254"
GCP_BASE_URL = "http://metadata.google.internal"
AZURE_BASE_URL = "http://169.254.169.254"
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"  # every Azure VM's chassis asset tag


@dataclass(frozen=True, slots=True)
class CloudPlacement:
    instance_type: str | None
    region: str | None
    source: str


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def detect_cloud(sysfs_root: Path) -> str | None:
    """``aws``, ``gcp``, ``azure`` or None, from DMI strings under ``<sysfs>/class/dmi/id``."""
    dmi = sysfs_root / "class" / "dmi" / "id"
    values = {
        name: _read_text(dmi / name)
        for name in ("sys_vendor", "product_name", "bios_vendor", "chassis_asset_tag",
                     "product_version", "board_vendor")
    }
    text = " ".join(values.values()).lower()
    if "amazon" in text:
        return "aws"
    if "google" in text:
        return "gcp"
    if values["chassis_asset_tag"] == AZURE_ASSET_TAG or (
        "microsoft corporation" in text and "virtual machine" in text
    ):
        return "azure"
    return None


def sagemaker_placement(
    env: Mapping[str, str], resource_config: Path = SAGEMAKER_RESOURCE_CONFIG
) -> CloudPlacement | None:
    """Instance type from SageMaker's resource config or its toolkit's environment."""
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    try:
        data = json.loads(resource_config.read_text())
    except FileNotFoundError:
        data = None
    except (OSError, ValueError) as exc:
        log.warning("cannot read SageMaker resource config %s: %s", resource_config, exc)
        data = None
    if isinstance(data, dict) and isinstance(data.get("current_instance_type"), str):
        return CloudPlacement(data["current_instance_type"], region, "sagemaker:resourceconfig")
    if env.get("SM_CURRENT_INSTANCE_TYPE"):
        return CloudPlacement(env["SM_CURRENT_INSTANCE_TYPE"], region, "sagemaker:env")
    return None


def _http(method: str, url: str, headers: dict[str, str], deadline: float) -> str:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("metadata budget spent")
    # Imported here: urllib.request pulls http.client and email (1.5 MiB of the agent's
    # 50 MiB), and a node that names its instance type never asks the metadata service.
    import urllib.request

    request = urllib.request.Request(url, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    with opener.open(request, timeout=remaining) as response:
        return response.read(4096).decode("utf-8", "replace").strip()


def ec2_placement(base_url: str = EC2_BASE_URL, timeout_s: float = METADATA_TIMEOUT_S):
    """IMDSv2: a session token first, then instance type and region."""
    deadline = time.monotonic() + timeout_s
    token = _http("PUT", f"{base_url}/latest/api/token",
                  {"X-aws-ec2-metadata-token-ttl-seconds": "60"}, deadline)
    headers = {"X-aws-ec2-metadata-token": token}
    instance_type = _http("GET", f"{base_url}/latest/meta-data/instance-type", headers, deadline)
    region = _http("GET", f"{base_url}/latest/meta-data/placement/region", headers, deadline)
    return CloudPlacement(instance_type, region, "ec2-imds")


def gcp_placement(base_url: str = GCP_BASE_URL, timeout_s: float = METADATA_TIMEOUT_S):
    """GCP answers with paths (``projects/1/machineTypes/a2-highgpu-1g``): keep the last part."""
    deadline = time.monotonic() + timeout_s
    headers = {"Metadata-Flavor": "Google"}
    prefix = f"{base_url}/computeMetadata/v1/instance"
    machine = _http("GET", f"{prefix}/machine-type", headers, deadline).rsplit("/", 1)[-1]
    zone = _http("GET", f"{prefix}/zone", headers, deadline).rsplit("/", 1)[-1]
    region = zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone  # us-central1-a
    return CloudPlacement(machine, region, "gcp-metadata")


def azure_placement(base_url: str = AZURE_BASE_URL, timeout_s: float = METADATA_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    headers = {"Metadata": "true"}
    query = "api-version=2021-02-01&format=text"
    prefix = f"{base_url}/metadata/instance/compute"
    vm_size = _http("GET", f"{prefix}/vmSize?{query}", headers, deadline)
    location = _http("GET", f"{prefix}/location?{query}", headers, deadline)
    return CloudPlacement(vm_size, location, "azure-imds")


_PROBES = {"aws": ec2_placement, "gcp": gcp_placement, "azure": azure_placement}


def cloud_placement(cloud: str | None) -> CloudPlacement | None:
    if cloud is None:
        return None
    try:
        return _PROBES[cloud]()
    except (OSError, TimeoutError, ValueError) as exc:
        log.info("no answer from the %s metadata service (%s); instance type unknown", cloud, exc)
        return None


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """What the user said of the node, from the options of the same names: its name,
    instance type and region (each None: detected), whether the cloud metadata service
    may be asked, and where sysfs is (DMI says which cloud, if any)."""

    node: str | None
    instance_type: str | None
    region: str | None
    cloud_metadata: bool
    sysfs_root: Path


def detect_node_info(
    settings: NodeSettings,
    cpu_model: str,
    agent_version: str,
    env: Mapping[str, str] | None = None,
    resource_config: Path = SAGEMAKER_RESOURCE_CONFIG,
) -> NodeInfo:
    """Resolve identity from settings first, then SageMaker, then the cloud metadata service."""
    env = os.environ if env is None else env
    instance_type = settings.instance_type
    region = settings.region
    if not instance_type or not region:
        placement = sagemaker_placement(env, resource_config)
        if placement is None and settings.cloud_metadata:
            placement = cloud_placement(detect_cloud(Path(settings.sysfs_root)))
        if placement is not None:
            log.info("instance type and region from %s", placement.source)
            instance_type = instance_type or placement.instance_type
            region = region or placement.region
    warn_unknown_instance_type(instance_type)
    return NodeInfo(
        node=str(settings.node or socket.gethostname()),
        instance_type=str(instance_type or "local"),
        region=str(region or ""),
        cpu_model=cpu_model,
        agent_version=agent_version,
    )


def warn_unknown_instance_type(instance_type: object) -> None:
    """Warn once, at start, when the node's instance type is not in the catalog.

    Such a type is accepted (a new type, a private name): its figures are measured all
    the same, but its price, embodied share and PUE cannot come from the catalog, so
    every cost of it would read "unknown" much later, in a report. A typo is far likelier
    (``c5.larg``), so the closest catalog types are named now. No type (``local``) says
    nothing: that is the normal case off the cloud.
    """
    from joulestat.carbon.catalog import closest_types, is_known_or_unset

    if not instance_type or is_known_or_unset(str(instance_type)):
        return
    text = str(instance_type)
    close = closest_types(text)
    hint = f"did you mean {', '.join(close)}?" if close else "no similar type is listed"
    log.warning("instance type %r is not in the catalog (`joulestat instances` lists the catalog): "
                "%s Its cost will be unknown unless you set --price-per-hour USD or "
                "--prices FILE with a row for it.", text, hint)
