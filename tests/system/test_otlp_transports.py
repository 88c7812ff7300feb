"""The OTLP exporter's two transports against the test receiver on a loopback port
(tests/helpers/otlp_receiver.py): OTLP/HTTP and gRPC deliver the request with their
headers, and a collector that is down is an export error. (The exporter without a port:
tests/unit/outputs/test_otlp_export.py; the real agent's export:
tests/system/test_otlp_export.py.)"""

from __future__ import annotations

import pytest

from joulestat.outputs.otlp import ExportError, GrpcTransport, HttpTransport, encode
from tests.helpers.otlp_receiver import grpc_receiver, http_receiver
from tests.helpers.otlp_state import START_S, export_state


def test_http_and_grpc_transports_deliver_with_their_headers() -> None:
    state, _, _ = export_state()
    request = encode(state, (("service.name", "joulestat-agent"),), START_S, "0.1.0")
    headers = (("Authorization", "Bearer s3cret"), ("X-Scope", "energy"))
    with http_receiver() as (url, received):
        HttpTransport(url, headers).send(request)
        export = received.wait_for(lambda exports: exports and exports[0])
        assert export.headers["authorization"] == "Bearer s3cret"
        assert export.headers["content-type"] == "application/x-protobuf"
        assert export.size_bytes == request.ByteSize()
    with grpc_receiver() as (url, received):
        transport = GrpcTransport(url, headers, interval_s=1.0)
        try:
            transport.send(request)
        finally:
            transport.close()
        export = received.wait_for(lambda exports: exports and exports[0])
        assert export.headers["x-scope"] == "energy"
    assert export.one("joulestat.job.energy", **{"joulestat.component": "cpu"}).value == 12.75


def test_a_collector_that_is_down_is_an_export_error() -> None:
    with http_receiver() as (url, _):
        pass  # closed: nothing listens there now
    with pytest.raises(ExportError):
        HttpTransport(url, (), timeout_s=2).send(encode(export_state()[0], (), START_S, "x"))


def test_a_collector_that_drips_its_answer_is_cut_at_the_export_deadline() -> None:
    """Issue 47: a collector answering a byte every half second held one export 85 s
    (the timeout was per read). The export now ends at its deadline, whatever drips."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)  # the request (small: one read takes it)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" * 20:
                if stop.wait(0.5):
                    return
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/metrics"
    try:
        with pytest.raises(ExportError, match="no complete answer within 1 s"):
            HttpTransport(url, (), timeout_s=1.0).send(encode(export_state()[0], (), START_S, "x"))
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()
