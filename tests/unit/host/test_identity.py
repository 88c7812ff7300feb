"""Who the node is: the cloud from DMI, SageMaker's resource config, settings that win
over any probe, and one metadata provider asked where DMI hints at it. (The providers'
metadata services, faked on a loopback port: tests/system/test_cloud_metadata.py.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from joulestat.host import identity
from joulestat.host.identity import (
    NodeSettings,
    detect_cloud,
    detect_node_info,
    sagemaker_placement,
)


def write_dmi(root: Path, **values: str) -> Path:
    dmi = root / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    for name, value in values.items():
        (dmi / name).write_text(value + "\n")
    return root


def test_detect_cloud_from_dmi(tmp_path: Path) -> None:
    assert detect_cloud(write_dmi(tmp_path / "a", sys_vendor="Amazon EC2")) == "aws"
    assert detect_cloud(write_dmi(tmp_path / "g", product_name="Google Compute Engine")) == "gcp"
    assert detect_cloud(
        write_dmi(tmp_path / "z", chassis_asset_tag="7783-7084-3265-9085-8269-3286-77")
    ) == "azure"
    assert detect_cloud(write_dmi(tmp_path / "q", sys_vendor="QEMU")) is None
    assert detect_cloud(tmp_path / "nothing") is None


def test_sagemaker_resource_config(tmp_path: Path) -> None:
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-1",
                                  "current_instance_type": "ml.g5.2xlarge"}))
    placement = sagemaker_placement({"AWS_REGION": "eu-west-1"}, config)
    assert (placement.instance_type, placement.region) == ("ml.g5.2xlarge", "eu-west-1")
    placement = sagemaker_placement({"SM_CURRENT_INSTANCE_TYPE": "ml.trn1.2xlarge"},
                                    tmp_path / "absent.json")
    assert placement.instance_type == "ml.trn1.2xlarge"
    assert sagemaker_placement({}, tmp_path / "absent.json") is None


def test_settings_win_and_default_is_local(tmp_path: Path, monkeypatch) -> None:
    def must_not_probe(cloud):
        raise AssertionError("no metadata request without a DMI hint")

    monkeypatch.setattr(identity, "cloud_placement", lambda cloud: None if cloud is None
                        else must_not_probe(cloud))
    settings = NodeSettings(node=None, instance_type=None, region=None, cloud_metadata=True,
                            sysfs_root=tmp_path)
    info = detect_node_info(settings, "cpu", "0.1", env={}, resource_config=tmp_path / "x")
    assert info.instance_type == "local" and info.region == ""
    settings = replace(settings, instance_type="c6i.large", region="us-east-1", node="n7")
    info = detect_node_info(settings, "cpu", "0.1", env={}, resource_config=tmp_path / "x")
    assert (info.node, info.instance_type, info.region) == ("n7", "c6i.large", "us-east-1")


def test_dmi_hint_leads_to_one_provider(tmp_path: Path, monkeypatch) -> None:
    asked: list[str | None] = []
    monkeypatch.setattr(identity, "cloud_placement",
                        lambda cloud: asked.append(cloud) or identity.CloudPlacement(
                            "g5.xlarge", "us-east-1", "fake"))
    root = write_dmi(tmp_path, sys_vendor="Amazon EC2")
    settings = NodeSettings(node=None, instance_type=None, region=None, cloud_metadata=True,
                            sysfs_root=root)
    info = detect_node_info(settings, "cpu", "0.1", env={}, resource_config=tmp_path / "x")
    assert asked == ["aws"] and info.instance_type == "g5.xlarge"
