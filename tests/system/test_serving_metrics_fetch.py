"""joulestat.host.serving_metrics fetching a serving engine's page over HTTP from a
server on a loopback port: URL credentials sent as basic auth, errors that name the URL
but never its password (a 404, a refused connection), and a body too big refused. And
what one fetch may take and where it may go (issue 47): a server dripping its answer or
never giving one ends the fetch at its deadline; a redirect is an error, not followed;
what the server sent is never in an error; the address rule is checked on every fetch.
(Parsing the pages: tests/unit/host/test_serving_metrics.py; the rule's parts:
tests/unit/host/test_serving_address.py.)"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulestat.host import serving_metrics as sm
from joulestat.host.serving_address import ServingAddressRule, node_networks
from joulestat.host.serving_metrics import (
    ServingEngine,
    ServingMetricsError,
    fetch_serving_metrics,
    parse_serving_metrics,
)
from tests.helpers.fake_serving import RawServer, dripping, hanging, sending

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""
    status = 200
    content_length = True
    extra_headers: list[tuple[str, str]] = []
    seen_auth: list[str | None] = []
    seen_host: list[str | None] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).seen_auth.append(self.headers.get("Authorization"))
        type(self).seen_host.append(self.headers.get("Host"))
        self.send_response(self.status)
        for name, value in self.extra_headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if self.content_length:
            self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[type[_Handler], int]]:
    handler = type("Handler", (_Handler,), {"seen_auth": [], "seen_host": []})
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


# --- what one fetch may take, and where it may go (issue 47) ------------------------------


@pytest.mark.parametrize("head_first", [False, True], ids=["headers", "body"])
def test_a_dripping_server_ends_the_fetch_at_its_deadline(head_first: bool) -> None:
    """A byte every 0.3 s keeps any per-read timeout of 1 s from firing; the fetch's
    deadline ends it all the same, headers or body."""
    page = b"vllm:generation_tokens_total 1\n"
    with RawServer(dripping(every_s=0.3, head_first=head_first, page=page)) as server:
        with pytest.raises(ServingMetricsError) as caught:
            fetch_serving_metrics(server.url, timeout_s=1.0)
    assert str(caught.value) == f"{server.url}: no complete answer within 1 s"


def test_a_server_that_never_answers_ends_the_fetch_at_its_deadline() -> None:
    with RawServer(hanging) as server:
        with pytest.raises(ServingMetricsError, match=r"no complete answer within 1 s$"):
            fetch_serving_metrics(server.url, timeout_s=1.0)
        assert server.connections == 1


def test_a_redirect_is_an_error_never_followed(server) -> None:
    """A 302 to another loopback service's page (here a vLLM's) would read its counters
    as the job's: the fetch refuses it and the target is never asked."""
    from tests.helpers.fake_serving import FakeServingEngine, ModelRates

    handler, port = server
    with FakeServingEngine("vllm", {"m": ModelRates()}) as target:
        handler.status = 302
        handler.extra_headers = [("Location", target.url)]
        with pytest.raises(ServingMetricsError) as caught:
            fetch_serving_metrics(f"http://127.0.0.1:{port}/metrics")
        assert target.hits == 0
    assert str(caught.value) == (f"http://127.0.0.1:{port}/metrics: HTTP 302, a redirect: "
                                 "redirects are not followed (give the URL the metrics are "
                                 "served at)")


def test_what_the_server_sent_is_never_in_the_error(server) -> None:
    """Neither a status line that is no HTTP, nor a reason phrase, nor a page."""
    with RawServer(sending(b"MARKER-5e1f status line of nothing\r\n\r\n")) as raw:
        with pytest.raises(ServingMetricsError) as caught:
            fetch_serving_metrics(raw.url)
    assert "MARKER" not in str(caught.value) and "not a valid HTTP answer" in str(caught.value)
    with RawServer(sending(b"HTTP/1.1 500 MARKER-5e1f\r\nContent-Length: 0\r\n\r\n")) as raw:
        with pytest.raises(ServingMetricsError) as caught:
            fetch_serving_metrics(raw.url)
    assert str(caught.value) == f"{raw.url}: HTTP 500 Internal Server Error"


def test_a_name_is_fetched_at_the_address_it_resolved_to(server) -> None:
    """localhost is loopback: allowed; the request still names the URL's host."""
    handler, port = server
    handler.body = fixture("vllm-v0.prom").encode()
    text = fetch_serving_metrics(f"http://localhost:{port}/metrics")
    assert parse_serving_metrics(text).engine is ServingEngine.VLLM
    assert handler.seen_host[-1] == f"localhost:{port}"


def _this_nodes_other_address() -> str:
    """An IPv4 address of this node that is not loopback (the kernel's own list)."""
    for network in node_networks("/proc"):
        if network.version == 4 and network.prefixlen == 32 and not network.is_loopback \
                and not network.is_link_local:
            return str(network.network_address)
    pytest.skip("this node has no IPv4 address but loopback")


def test_the_address_rule_is_checked_at_every_fetch(tmp_path) -> None:
    """An address of this node passes by default; read from another procfs (another
    node's view, where it is not an address of the node), it is refused until the
    allowlist names it. A link-local URL is refused whatever the allowlist says."""
    address = _this_nodes_other_address()
    handler = type("Handler", (_Handler,), {"seen_auth": [], "seen_host": [],
                                           "body": fixture("vllm-v0.prom").encode()})
    httpd = http.server.ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    other_node = tmp_path / "proc"
    (other_node / "net").mkdir(parents=True)
    (other_node / "net" / "fib_trie").write_text("Main:\n  |-- 10.0.0.1\n     /32 host LOCAL\n")
    url = f"http://{address}:{httpd.server_address[1]}/metrics"
    try:
        assert fetch_serving_metrics(url)  # this node's procfs: its own address
        with pytest.raises(ServingMetricsError) as caught:
            fetch_serving_metrics(url, rule=ServingAddressRule(procfs_root=other_node))
        assert str(caught.value).startswith(f"{url}: {address} is not an address of this "
                                            "node")
        allowed = ServingAddressRule((f"{address}/32",), procfs_root=other_node)
        assert parse_serving_metrics(fetch_serving_metrics(url, rule=allowed)).models
        assert len(handler.seen_host) == 2  # the refused fetch never connected
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    anything = ServingAddressRule(("0.0.0.0/0", "::/0"))
    for link_local in ("http://169.254.169.254/latest/meta-data/", "http://[fe80::1]:80/m"):
        with pytest.raises(ServingMetricsError, match="link-local address"):
            fetch_serving_metrics(link_local, rule=anything)
