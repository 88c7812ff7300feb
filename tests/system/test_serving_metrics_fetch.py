"""joulestat.host.serving_metrics fetching a serving engine's page over HTTP from a
server on a loopback port: URL credentials sent as basic auth, errors that name the URL
but never its password (a 404, a refused connection), and a body too big refused.
(Parsing the pages: tests/unit/host/test_serving_metrics.py.)"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulestat.host import serving_metrics as sm
from joulestat.host.serving_metrics import (
    ServingEngine,
    ServingMetricsError,
    fetch_serving_metrics,
    parse_serving_metrics,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""
    status = 200
    content_length = True
    seen_auth: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).seen_auth.append(self.headers.get("Authorization"))
        self.send_response(self.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if self.content_length:
            self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[type[_Handler], int]]:
    handler = type("Handler", (_Handler,), {"seen_auth": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_fetch_reads_the_page_and_sends_url_credentials_as_basic_auth(server) -> None:
    handler, port = server
    handler.body = fixture("vllm-v0.prom").encode()
    text = fetch_serving_metrics(f"http://scraper:s3cret@127.0.0.1:{port}/metrics")
    assert parse_serving_metrics(text).engine is ServingEngine.VLLM
    assert handler.seen_auth == ["Basic c2NyYXBlcjpzM2NyZXQ="]  # scraper:s3cret
    fetch_serving_metrics(f"http://127.0.0.1:{port}/metrics")
    assert handler.seen_auth[-1] is None


def test_fetch_404_names_the_url_without_its_password(server) -> None:
    handler, port = server
    handler.status = 404
    handler.body = b"not here"
    with pytest.raises(ServingMetricsError) as caught:
        fetch_serving_metrics(f"http://scraper:s3cret@127.0.0.1:{port}/metrics")
    message = str(caught.value)
    assert f"http://scraper:***@127.0.0.1:{port}/metrics" in message
    assert "HTTP 404" in message and "s3cret" not in message


@pytest.mark.parametrize("declared", [True, False])
def test_fetch_refuses_a_huge_body(server, monkeypatch, declared: bool) -> None:
    handler, port = server
    monkeypatch.setattr(sm, "MAX_RESPONSE_BYTES", 64 << 10)
    handler.body = b"# " + b"x" * (200 << 10) + b"\n"
    handler.content_length = declared
    with pytest.raises(ServingMetricsError, match=rf"127.0.0.1:{port}/metrics: a response .*over"):
        fetch_serving_metrics(f"http://127.0.0.1:{port}/metrics")


def test_fetch_connection_refused_names_the_url() -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ServingMetricsError) as caught:
        fetch_serving_metrics(f"http://u:hunter2@127.0.0.1:{port}/metrics", timeout_s=2.0)
    message = str(caught.value)
    assert f"http://u:***@127.0.0.1:{port}/metrics" in message
    assert "hunter2" not in message and "refused" in message.lower()
    assert not isinstance(caught.value, OSError)
