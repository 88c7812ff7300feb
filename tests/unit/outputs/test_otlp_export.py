"""The OTLP exporter (agent/outputs/otlp.py): names and attributes by the OpenTelemetry
hardware conventions, the encoding read back from the wire, the same figures a scrape
shows, the tick thread never waiting on a collector, one warning per outage, and the
settings that start it. The transports against a receiver on a port are
tests/system/test_otlp_transports.py; the real agent's export is
tests/system/test_otlp_export.py.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.core.errors import ConfigError
from joulestat.core.tick import Component, Tick, TickEntry
from joulestat.outputs.otlp import (
    METRICS,
    ExportError,
    ExportState,
    OtlpExporter,
    OtlpProtocol,
    OtlpSettings,
    check_settings,
    encode,
    grpc_target,
    http_url,
    hw_type,
    node_series,
    parse_endpoint,
    parse_headers,
)
from joulestat.outputs.prometheus import JobMetrics, NodeMetrics, make_registry
from joulestat.pipeline.sink import TickRecord
from joulestat.runtime.settings import resolve
from tests.helpers.otlp_receiver import decode
from tests.helpers.otlp_state import NODE, START_S, export_state


def settings(endpoint: str = "http://127.0.0.1:4318", interval_s: float = 0.05,
             protocol: OtlpProtocol = OtlpProtocol.HTTP_PROTOBUF,
             headers: tuple[tuple[str, str], ...] = ()) -> OtlpSettings:
    return OtlpSettings(endpoint, protocol, headers, interval_s, 300.0, 500)


HOLD_S = 10.0  # how long a held collector takes to answer


class Recording:
    """A transport that keeps what it is sent, and can fail or hold on demand."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.fail = False
        self.hold = threading.Event()
        self.hold.set()
        self.arrived = threading.Condition()

    def send(self, request: Any) -> int:
        self.hold.wait(HOLD_S)
        if self.fail:
            raise ExportError("connection refused")
        with self.arrived:
            self.sent.append(request)
            self.arrived.notify_all()
        return request.ByteSize()

    def wait(self, count: int, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        with self.arrived:
            while len(self.sent) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{len(self.sent)} of {count} exports arrived"
                self.arrived.wait(left)

    def close(self) -> None:
        pass


# -- names and attributes -----------------------------------------------------------------

def test_components_map_onto_the_conventions_hw_types() -> None:
    assert hw_type(Component.CPU, "package-0") == "cpu"
    assert hw_type(Component.DRAM, "package-0") == "memory"
    assert hw_type(Component.ACCELERATOR, "gpu0") == "gpu"
    assert hw_type(Component.ACCELERATOR, "amdgpu1") == "gpu"
    # No GPU: the convention's list has nothing closer, and custom values are allowed.
    assert hw_type(Component.ACCELERATOR, "neuron0") == "accelerator"
    assert hw_type(Component.ACCELERATOR, "gaudi3") == "accelerator"
    assert hw_type(Component.NET, "eth0") == "network"
    assert hw_type(Component.OTHER, "x") == "other"


def test_node_series_are_named_by_the_convention_and_keep_their_source() -> None:
    energy, power, attributes = node_series(("cpu", "package-0", "fill:rapl"))
    assert (energy.name, energy.unit, power.name, power.unit) == ("hw.energy", "J",
                                                                  "hw.power", "W")
    assert dict(attributes) == {"hw.id": "cpu/package-0", "hw.name": "package-0",
                                "hw.type": "cpu", "joulestat.component": "cpu",
                                "joulestat.source": "fill:rapl"}
    # A package's cpu and dram domains share the device name, never the hw.id.
    _, _, dram = node_series(("dram", "package-0", "rapl"))
    assert dict(dram)["hw.id"] != dict(attributes)["hw.id"]
    assert dict(dram)["hw.type"] == "memory"
    # psys overlaps cpu and dram: the whole-host names, which nothing sums with parts.
    energy, power, attributes = node_series(("platform", "psys", "rapl"))
    assert (energy.name, power.name) == ("hw.host.energy", "hw.host.power")
    assert "hw.type" not in dict(attributes)


def test_every_metric_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "opentelemetry.md").read_text()
    for metric in METRICS:
        assert f"`{metric.name}`" in doc, metric.name


# -- the encoding, decoded back ------------------------------------------------------------

def test_the_request_decodes_to_the_figures_with_their_temporality_and_times() -> None:
    state, _metrics, _ = export_state()
    request = encode(state, (("service.name", "joulestat-agent"), ("host.name", "n1")),
                     START_S, "0.1.0")
    export = decode(type(request).FromString(request.SerializeToString()), {},
                    request.ByteSize())
    assert export.resource == {"service.name": "joulestat-agent", "host.name": "n1"}
    cpu = export.one("hw.energy", **{"hw.id": "cpu/package-0"})
    assert (cpu.value, cpu.kind, cpu.monotonic, cpu.cumulative) == (120.1, "sum", True, True)
    assert cpu.start_ns == int(START_S * 1e9) and cpu.time_ns == int((START_S + 3) * 1e9)
    power = export.one("hw.power", **{"hw.id": "accelerator/gpu0"})
    assert (power.kind, power.value, power.attributes["hw.type"]) == ("gauge", 300.7 / 2,
                                                                       "gpu")
    assert export.one("hw.power", **{"hw.id": "dram/package-0"}).value == 0.0  # declared
    job_cpu = export.one("joulestat.job.energy", **{"joulestat.component": "cpu"})
    assert job_cpu.value == 12.75 and job_cpu.attributes["job.name"] == "bert"
    assert job_cpu.attributes["job.kind"] == "training" and job_cpu.cumulative
    units = export.one("joulestat.job.work_units")
    assert (units.value, units.attributes["joulestat.work_unit"]) == (32.0, "sample")
    assert export.ticks() == 1
    units_of = {p.name: p.unit for p in export.points}
    assert units_of["joulestat.job.energy"] == "J" and units_of["hw.power"] == "W"


def test_an_export_carries_exactly_what_a_scrape_shows() -> None:
    state, metrics, accounting = export_state()
    text = generate_latest(make_registry(metrics, JobMetrics(accounting.snapshot, 300, 500)))
    scraped = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text.decode())
               for s in family.samples}
    request = encode(state, (), START_S, "0.1.0")
    export = decode(request, {}, 0)
    for point in export.find("hw.energy") + export.find("hw.power"):
        component, device = point.attributes["hw.id"].split("/")
        name = ("joulestat_node_energy_joules_total" if point.name == "hw.energy"
                else "joulestat_node_power_watts")
        labels = (("component", component), ("device", device),
                  ("source", point.attributes["joulestat.source"]))
        assert scraped[(name, labels)] == point.value, (name, labels)
    for point in export.find("joulestat.job.energy"):
        a = point.attributes
        labels = tuple(sorted({"job_id": a["job.id"], "job_name": a["job.name"],
                               "kind": a["job.kind"],
                               "component": a["joulestat.component"]}.items()))
        assert scraped[("joulestat_job_energy_joules_total", labels)] == point.value


# -- the sink -----------------------------------------------------------------------------

def _exporter(transport: Recording, interval_s: float = 0.05, clock: Any = time.monotonic
              ) -> tuple[OtlpExporter, NodeMetrics]:
    metrics = NodeMetrics(NODE)
    registry = JobRegistry()
    accounting = JobAccounting(registry, Path("/nonexistent/proc"), IdleBaselines())
    exporter = OtlpExporter(settings(interval_s=interval_s), NODE, metrics.values,
                            accounting.snapshot, transport=transport, clock=clock,
                            start_s=START_S)
    return exporter, metrics


def _tick(n: int) -> TickRecord:
    return TickRecord(Tick(START_S + n - 1, START_S + n,
                           (TickEntry("cpu", "package-0", "rapl", 50.0 + n),)))


def test_exports_follow_the_interval_and_a_stop_sends_the_last_tick() -> None:
    now = [0.0]
    transport = Recording()
    exporter, metrics = _exporter(transport, interval_s=10.0, clock=lambda: now[0])
    for n in range(1, 26):  # a tick a second
        now[0] = float(n)
        record = _tick(n)
        metrics.on_tick(record)
        exporter.on_tick(record)
        if n in (1, 10, 20):  # due (the schedule runs from the exporter's start, at 0):
            transport.wait(n // 10 + 1)  # let it arrive before a newer copy replaces it
    exporter.close()  # and 25, the last
    ticks = [decode(r, {}, 0).ticks() for r in transport.sent]
    assert ticks == [1, 10, 20, 25]
    last = decode(transport.sent[-1], {}, 0)
    assert last.one("hw.energy").value == sum(50.0 + n for n in range(1, 26))
    assert last.one("hw.energy").time_ns == int((START_S + 25) * 1e9)


def test_a_slow_collector_never_holds_a_tick_and_the_newest_copy_wins() -> None:
    transport = Recording()
    transport.hold.clear()  # the collector answers nothing until told
    exporter, metrics = _exporter(transport, interval_s=0.05)
    started = time.perf_counter()
    for n in range(1, 6):
        record = _tick(n)
        metrics.on_tick(record)
        exporter._due_s = 0.0  # due at every tick, whatever the machine's speed
        exporter.on_tick(record)
    took_s = time.perf_counter() - started
    # A tick that waited on the collector would have waited its whole hold (10 s) and
    # more: held, it answers nothing, and the copies were sent while it held.
    assert not transport.hold.is_set() and took_s < HOLD_S, took_s
    transport.hold.set()
    exporter.close()
    ticks = [decode(r, {}, 0).ticks() for r in transport.sent]
    # The first copy was in flight; of the rest only the newest was sent (cumulative).
    assert ticks[-1] == 5 and len(ticks) <= 3, ticks


def test_an_outage_is_one_warning_and_its_end_one_info(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    transport = Recording()
    exporter, metrics = _exporter(transport)
    state = ExportState(START_S, 1, {}, {}, ())
    transport.fail = True
    with caplog.at_level(logging.DEBUG, logger="joulestat.outputs.otlp"):
        assert not any(exporter.export(state) for _ in range(3))
        transport.fail = False
        assert exporter.export(state) and exporter.export(state)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and "connection refused" in warnings[0].getMessage()
    assert len(infos) == 1 and "answers again" in infos[0].getMessage()
    assert (exporter.failures, exporter.exported) == (3, 2)


# -- settings -----------------------------------------------------------------------------

def test_endpoints_paths_and_grpc_targets() -> None:
    assert http_url("http://collector:4318") == "http://collector:4318/v1/metrics"
    assert http_url("http://collector:4318/") == "http://collector:4318/v1/metrics"
    assert http_url("https://otlp.example/otlp/v1/metrics") == \
        "https://otlp.example/otlp/v1/metrics"
    assert grpc_target("http://collector") == ("collector:4317", False)
    assert grpc_target("https://[::1]:5317") == ("[::1]:5317", True)
    for bad in ("collector:4317", "ftp://x", "http://", "http://x:99999"):
        with pytest.raises(ValueError):
            parse_endpoint(bad)


def test_headers_parse_as_otel_exporter_otlp_headers_and_never_echo_a_value() -> None:
    assert parse_headers("api-key=abc%3D%3D, X-Team = ml ") == (("api-key", "abc=="),
                                                                 ("X-Team", "ml"))
    assert parse_headers("") == ()
    with pytest.raises(ValueError) as caught:
        parse_headers("api-key")
    with pytest.raises(ValueError):
        parse_headers("bad key=1")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ConfigError, match="--otlp-headers: entry 2 has no '='"):
        resolve({"otlp_headers": "a=1,s3cret"}, ["otlp_headers"], env={})


def test_settings_resolve_from_flags_and_env() -> None:
    from joulestat.runtime.assembly import PipelineSettings

    env = {"JOULESTAT_OTLP_ENDPOINT": "http://otel:4318", "JOULESTAT_OTLP_PROTOCOL": "GRPC",
           "JOULESTAT_OTLP_INTERVAL": "2.5"}
    names = ["otlp_endpoint", "otlp_protocol", "otlp_headers", "otlp_interval"]
    otlp = PipelineSettings.of(resolve({}, names, env=env)).otlp
    assert otlp is not None
    assert (otlp.otlp_endpoint, otlp.otlp_protocol, otlp.otlp_interval_s) == (
        "http://otel:4318", OtlpProtocol.GRPC, 2.5)
    assert PipelineSettings.of(resolve({}, names, env={})).otlp.otlp_endpoint is None
    with pytest.raises(ConfigError, match="--otlp-protocol"):
        resolve({"otlp_protocol": "http/json"}, names, env={})
    with pytest.raises(ConfigError, match="--otlp-endpoint"):
        resolve({"otlp_endpoint": "otel:4317"}, names, env={})


def test_a_missing_extra_and_a_grpc_path_stop_the_start(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    with pytest.raises(ConfigError, match="gRPC endpoint is host and port"):
        check_settings(settings("http://otel:4317/v1/metrics", protocol=OtlpProtocol.GRPC))
    check_settings(settings("http://otel:4318/v1/metrics"))  # fine over HTTP
    for name in [n for n in sys.modules if n.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigError, match=r"pip install 'joulestat\[otel\]'"):
        check_settings(settings())
