from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from joulestat.host import identity
from joulestat.host.identity import (
    NodeSettings,
    azure_placement,
    detect_cloud,
    detect_node_info,
    ec2_placement,
    gcp_placement,
    sagemaker_placement,
)


@contextmanager
def metadata_server(
    routes: dict[tuple[str, str], tuple[dict, str]], delay_s: float = 0.0
) -> Iterator[str]:
    """A loopback stand-in for a metadata service: (method, path) -> (needed headers, body).
    Each request is held ``delay_s`` first, or until the server closes."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            release.wait(delay_s)
            route = routes.get((self.command, self.path))
            if route is None or any(self.headers.get(k) != v for k, v in route[0].items()):
                self.send_response(401)
                self.end_headers()
                return
            body = route[1].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        release.set()  # held requests answer now: server_close() waits for them
        server.shutdown()
        server.server_close()


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


def test_ec2_imdsv2() -> None:
    token = {"X-aws-ec2-metadata-token": "tok"}
    routes = {
        ("PUT", "/latest/api/token"): ({"X-aws-ec2-metadata-token-ttl-seconds": "60"}, "tok"),
        ("GET", "/latest/meta-data/instance-type"): (token, "inf2.xlarge"),
        ("GET", "/latest/meta-data/placement/region"): (token, "us-west-2"),
    }
    with metadata_server(routes) as url:
        placement = ec2_placement(url)
    assert (placement.instance_type, placement.region) == ("inf2.xlarge", "us-west-2")


def test_gcp_keeps_last_path_segment() -> None:
    flavor = {"Metadata-Flavor": "Google"}
    routes = {
        ("GET", "/computeMetadata/v1/instance/machine-type"):
            (flavor, "projects/123/machineTypes/a2-highgpu-1g"),
        ("GET", "/computeMetadata/v1/instance/zone"): (flavor, "projects/123/zones/us-central1-a"),
    }
    with metadata_server(routes) as url:
        placement = gcp_placement(url)
    assert (placement.instance_type, placement.region) == ("a2-highgpu-1g", "us-central1")


def test_azure() -> None:
    query = "?api-version=2021-02-01&format=text"
    routes = {
        ("GET", f"/metadata/instance/compute/vmSize{query}"): ({"Metadata": "true"},
                                                              "Standard_NC24ads_A100_v4"),
        ("GET", f"/metadata/instance/compute/location{query}"): ({"Metadata": "true"}, "eastus"),
    }
    with metadata_server(routes) as url:
        placement = azure_placement(url)
    assert (placement.instance_type, placement.region) == ("Standard_NC24ads_A100_v4", "eastus")


def test_slow_metadata_service_gives_up_within_budget() -> None:
    # Each request is held 30 s: giving up well before that is the budget's doing (the
    # bound leaves a loaded machine room).
    with metadata_server({}, delay_s=30.0) as url:
        started = time.monotonic()
        with pytest.raises(OSError):
            ec2_placement(url, timeout_s=0.3)
        assert time.monotonic() - started < 10.0


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
