"""Electricity Maps live intensity against a fake API on 127.0.0.1 (no network): the
zone asked with the token header, the cache and its TTL, failures as None with one log
line, the timeout, and the footprint's use of the live value. (Which zone a region is:
tests/unit/carbon/test_live.py.)"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from joulestat.carbon.footprint import CarbonSettings, NodePlacement, footprint
from joulestat.carbon.intensity import resolve_intensity
from joulestat.carbon.live import ElectricityMapsClient

TOKEN = "secret-token-123"


class FakeApi:
    """Answers /v3/carbon-intensity/latest per zone; records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, list[str]], str | None]] = []
        self.answers: dict[str, tuple[int, bytes, float]] = {}
        self.release = threading.Event()  # set: held requests answer now

    def set(self, zone: str, status: int = 200, body: object = None, delay_s: float = 0.0):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[zone] = (status, raw, delay_s)


@pytest.fixture()
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeApi, str]]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            fake.requests.append((url.path, query, self.headers.get("auth-token")))
            zone = query.get("zone", [""])[0]
            status, body, delay_s = fake.answers.get(zone, (404, b'{"error":"no zone"}', 0.0))
            if delay_s:
                fake.release.wait(delay_s)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        fake.release.set()  # a held request answers now: server_close() waits for it
        server.shutdown()
        server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _answer(g: float, zone: str = "DE") -> dict:
    return {"zone": zone, "carbonIntensity": g, "datetime": "2026-11-29T16:00:00.000Z",
            "updatedAt": "2026-11-29T16:05:00.000Z", "emissionFactorType": "lifecycle",
            "isEstimated": True, "estimationMethod": "TIME_SLICER_AVERAGE"}


def test_latest_reads_the_zone_with_the_token_header(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.set("DE", body=_answer(312.0))
    client = ElectricityMapsClient(TOKEN, url)
    found = client.latest("DE")
    assert found is not None
    assert (found.g_per_kwh, found.source, found.year, found.location) == (
        312.0, "electricitymaps:DE", 2026, "DE")
    assert "lifecycle, estimated" in found.note
    assert fake.requests == [("/v3/carbon-intensity/latest", {"zone": ["DE"]}, TOKEN)]


def test_cache_hit_within_ttl_and_refresh_after(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.set("FR", body=_answer(40.0, "FR"))
    clock = Clock()
    client = ElectricityMapsClient(TOKEN, url, ttl_s=900, clock=clock)
    assert client.latest("FR").g_per_kwh == 40.0
    fake.set("FR", body=_answer(55.0, "FR"))
    clock.now += 899
    assert client.latest("FR").g_per_kwh == 40.0  # cached
    assert len(fake.requests) == 1 and client.requests == 1
    clock.now += 2
    assert client.latest("FR").g_per_kwh == 55.0  # TTL passed: asked again
    assert len(fake.requests) == 2


@pytest.mark.parametrize("setup", [
    {"status": 500, "body": {"error": "boom"}},
    {"status": 200, "body": b"not json"},
    {"status": 200, "body": {"zone": "PL"}},  # no carbonIntensity
    {"status": 200, "body": {"carbonIntensity": -3}},
    {"status": 200, "body": {"carbonIntensity": "high"}},
])
def test_failures_return_none_with_one_log_line(api: tuple[FakeApi, str], setup: dict,
                                                caplog: pytest.LogCaptureFixture) -> None:
    fake, url = api
    fake.set("PL", **setup)
    clock = Clock()
    client = ElectricityMapsClient(TOKEN, url, clock=clock, failure_cooldown_s=60)
    with caplog.at_level(logging.WARNING, logger="joulestat.carbon.live"):
        assert client.latest("PL") is None
        clock.now += 30
        assert client.latest("PL") is None  # within the cooldown: not asked, not logged
    records = [r for r in caplog.records if r.name == "joulestat.carbon.live"]
    assert len(records) == 1
    assert "PL" in records[0].getMessage() and TOKEN not in caplog.text
    assert len(fake.requests) == 1
    clock.now += 31
    fake.set("PL", body=_answer(600.0, "PL"))
    assert client.latest("PL").g_per_kwh == 600.0  # recovered after the cooldown


def test_timeout_is_at_most_two_seconds_and_enforced(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    assert ElectricityMapsClient(TOKEN, url, timeout_s=30).timeout_s == 2.0
    # The server holds the request 30 s: giving up well before that is the timeout's doing
    # (the bound leaves a loaded machine room; the fixture lets the request go at teardown).
    fake.set("SE", body=_answer(20.0, "SE"), delay_s=30.0)
    client = ElectricityMapsClient(TOKEN, url, timeout_s=0.2)
    started = time.monotonic()
    assert client.latest("SE") is None
    assert time.monotonic() - started < 10.0


def test_unreachable_server_returns_none() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as server:
        port = server.server_address[1]
    client = ElectricityMapsClient(TOKEN, f"http://127.0.0.1:{port}", timeout_s=0.5)
    assert client.latest("DE") is None


def test_footprint_uses_live_value_for_recent_energy_only(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.set("DE", body=_answer(300.0))
    now = 1_800_000_000.0
    series = [(now - 3600.0, "n", 3.6e6), (now - 10.0, "n", 7.2e6)]
    settings = CarbonSettings(electricity_maps_token=TOKEN, electricity_maps_url=url)
    client = ElectricityMapsClient(TOKEN, url, ttl_s=900)
    result = footprint(series, {"n": NodePlacement("m5.large", "eu-central-1", 3600.0)},
                       settings, now_s=now, live_client=client)
    static = resolve_intensity("eu-central-1")
    node = result.nodes[0]
    assert node.live_intensity is not None and node.live_intensity.g_per_kwh == 300.0
    assert node.live_energy_kwh == pytest.approx(2.0)
    assert result.operational_co2e_g == pytest.approx(
        1.0 * 1.135 * static.g_per_kwh + 2.0 * 1.135 * 300.0)
    assert len(fake.requests) == 1


def test_footprint_falls_back_to_static_when_live_fails(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.set("DE", status=503, body={"error": "down"})
    now = 1_800_000_000.0
    settings = CarbonSettings(electricity_maps_token=TOKEN, electricity_maps_url=url)
    client = ElectricityMapsClient(TOKEN, url)
    result = footprint([(now - 5.0, "n", 3.6e6)],
                       {"n": NodePlacement("m5.large", "eu-central-1", 60.0)},
                       settings, now_s=now, live_client=client)
    static = resolve_intensity("eu-central-1")
    assert result.operational_co2e_g == pytest.approx(1.135 * static.g_per_kwh)
    assert result.nodes[0].live_intensity is None
    assert any("Electricity Maps gave no value for DE" in n for n in result.notes)


def test_intensity_override_disables_live(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.set("DE", body=_answer(300.0))
    now = 1_800_000_000.0
    settings = CarbonSettings(carbon_intensity_g_per_kwh=10.0, electricity_maps_token=TOKEN,
                              electricity_maps_url=url)
    result = footprint([(now - 5.0, "n", 3.6e6)],
                       {"n": NodePlacement("m5.large", "eu-central-1", 60.0)},
                       settings, now_s=now, live_client=ElectricityMapsClient(TOKEN, url))
    assert result.operational_co2e_g == pytest.approx(1.135 * 10.0)
    assert fake.requests == []
