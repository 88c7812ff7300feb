"""The cloud metadata services as the agent asks them, each faked on a loopback port:
EC2's IMDSv2 (a token first), GCP's and Azure's headers and paths, what of each answer
is kept, and a slow service given up on within the budget. (Who the node is without a
probe: tests/unit/host/test_identity.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from joulestat.host.identity import azure_placement, ec2_placement, gcp_placement


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
