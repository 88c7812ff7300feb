"""What an LLM server's Prometheus endpoint says it served: tokens, requests, latency.

``joulestat run --serving-metrics URL`` divides a job's energy by the tokens and requests
the server reports, so this module turns one scrape of vLLM, Hugging Face TGI or SGLang
into the same shape: per model, cumulative counters (output tokens, prompt tokens,
requests) and the latency histograms (TTFT, inter-token, end-to-end) as the server
exposes them. Parsing only: the agent polls, subtracts and stores (docs/llm-serving.md
lists every metric read and the source it was checked against).

Why by metric names and not by a setting: the three engines use distinct namespaces
(``vllm:``, ``sglang:``, ``tgi_``), so the scrape itself says which one answered, and a
user cannot pick the wrong one. Names are matched on samples, not on declared types: the
prometheus_client parser strips ``_total`` from counter families and adds it to the
samples of a typed counter (TGI's exporter writes ``tgi_request_success`` bare), and an
untyped or gauge-declared counter keeps its name as written.

Every label but the model's is summed over: vLLM's ``engine`` (data-parallel engine
cores) and ``finished_reason``, SGLang's ``engine_type`` and custom labels. Histograms of
one family share their bucket bounds, so their buckets add exactly.

Counters and histograms reset when the server restarts; :func:`counter_delta` and
:func:`histogram_delta` treat a value that went down as a restart, as Prometheus'
``increase()`` does.
"""

from __future__ import annotations

import base64
import http.client
import math
import socket
import urllib.parse
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from http import HTTPStatus
from types import MappingProxyType
from typing import Any

from prometheus_client.parser import text_fd_to_metric_families

from joulestat.core.histogram import Histogram, Latency
from joulestat.core.redact import redact_text
from joulestat.core.socket_deadline import SocketDeadline
from joulestat.host.serving_address import AddressRefused, ServingAddressRule

# A vLLM scrape with a few models is some 100 KiB, TGI's (a 1024-bucket batch-size
# histogram) a few hundred KiB; anything past this is not a metrics page to read every tick.
MAX_RESPONSE_BYTES = 8 << 20
# The whole of one fetch (connect, headers, body): a poll of one endpoint every tick
# cannot keep one fetch going for longer.
FETCH_TIMEOUT_S = 2.0
# The model name given to TGI's counters: TGI serves one model and labels no metric with
# it (its /info endpoint has model_id; the agent may rename).
DEFAULT_MODEL = "default"
MODEL_LABEL = "model_name"
_INF = math.inf


class ServingEngine(StrEnum):
    VLLM = "vllm"
    TGI = "tgi"
    SGLANG = "sglang"


class ServingMetricsError(ValueError):
    """A scrape that cannot be read: unreachable, too large, or no known engine in it."""


@dataclass(frozen=True, slots=True)
class ModelCounters:
    """Cumulative since the server started. ``None``: this engine (or this version of it)
    does not expose the figure; never a guess."""

    output_tokens: float | None
    prompt_tokens: float | None
    requests: float | None
    latency: Mapping[Latency, Histogram]
    # The engine's load at the scrape: requests in the running batch and waiting in the
    # queue (gauges; None where the engine exposes none): where a steady-state window
    # opens and closes (joulestat.reports.steady_state).
    running: float | None = None
    waiting: float | None = None
    # Per-request prompt and output lengths in tokens, cumulative histograms (None where
    # the engine keeps none): the energy per request's percentiles.
    prompt_lengths: Histogram | None = None
    output_lengths: Histogram | None = None


@dataclass(frozen=True, slots=True)
class ServingSample:
    engine: ServingEngine
    models: Mapping[str, ModelCounters]  # by model name


class _Kind(StrEnum):
    COUNTER = "counter"  # a counter's value
    HISTOGRAM_SUM = "histogram_sum"  # the _sum of a histogram of per-request counts (TGI)


@dataclass(frozen=True, slots=True)
class _Source:
    name: str  # as the engine names it, without _total
    kind: _Kind = _Kind.COUNTER


@dataclass(frozen=True, slots=True)
class _EngineSpec:
    """Where one engine keeps each figure. Latency names are in order of preference
    (the newer name first: vLLM 0.11 exposes both ITL names with the same values)."""

    engine: ServingEngine
    label: str  # for messages
    prefix: str  # the engine's namespace
    model_label: str | None  # None: one model, named DEFAULT_MODEL
    output_tokens: _Source
    prompt_tokens: _Source
    requests: _Source | None
    latency: Mapping[Latency, tuple[str, ...]]
    # True where the exporter creates a metric at its first use (TGI's metrics-rs): a
    # known figure missing from the scrape is then 0 so far, not unexposed.
    lazy: bool = False
    # Gauges of the requests in the running batch and in the queue, and histograms of
    # each request's prompt and output lengths (None: the engine has no such metric).
    running: str | None = None
    waiting: str | None = None
    prompt_lengths: str | None = None
    output_lengths: str | None = None

    def names(self) -> frozenset[str]:
        sources = [self.output_tokens, self.prompt_tokens, self.requests]
        return frozenset([s.name for s in sources if s is not None]
                         + [n for names in self.latency.values() for n in names])


# Checked against each engine's source and documentation: docs/llm-serving.md cites them.
ENGINES: tuple[_EngineSpec, ...] = (
    _EngineSpec(
        ServingEngine.VLLM, "vLLM", "vllm:", MODEL_LABEL,
        output_tokens=_Source("vllm:generation_tokens"),
        prompt_tokens=_Source("vllm:prompt_tokens"),
        requests=_Source("vllm:request_success"),  # by finished_reason: summed
        latency=MappingProxyType({
            Latency.TTFT: ("vllm:time_to_first_token_seconds",),
            Latency.ITL: ("vllm:inter_token_latency_seconds",
                          "vllm:time_per_output_token_seconds"),
            Latency.E2E: ("vllm:e2e_request_latency_seconds",),
        }),
        running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
        prompt_lengths="vllm:request_prompt_tokens",
        output_lengths="vllm:request_generation_tokens"),
    _EngineSpec(
        ServingEngine.SGLANG, "SGLang", "sglang:", MODEL_LABEL,
        output_tokens=_Source("sglang:generation_tokens"),
        prompt_tokens=_Source("sglang:prompt_tokens"),
        requests=_Source("sglang:num_requests"),  # absent before SGLang added it: None
        latency=MappingProxyType({
            Latency.TTFT: ("sglang:time_to_first_token_seconds",),
            Latency.ITL: ("sglang:inter_token_latency_seconds",
                          "sglang:time_per_output_token_seconds"),
            Latency.E2E: ("sglang:e2e_request_latency_seconds",),
        }),
        # python/sglang/srt/metrics/collector.py (SchedulerMetricsCollector)
        running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs"),
    _EngineSpec(
        ServingEngine.TGI, "TGI", "tgi_", None,
        # Per-request histograms of token counts: their _sum is the tokens so far.
        output_tokens=_Source("tgi_request_generated_tokens", _Kind.HISTOGRAM_SUM),
        prompt_tokens=_Source("tgi_request_input_length", _Kind.HISTOGRAM_SUM),
        requests=_Source("tgi_request_success"),
        # TGI has no time-to-first-token metric: TTFT stays absent. Its ITL is each
        # request's mean time per token (one observation per request).
        latency=MappingProxyType({
            Latency.ITL: ("tgi_request_mean_time_per_token_duration",),
            Latency.E2E: ("tgi_request_duration",),
        }),
        lazy=True,
        # router/src/server.rs (metrics::gauge!): the batch being decoded, the queue
        running="tgi_batch_current_size", waiting="tgi_queue_size",
        prompt_lengths="tgi_request_input_length",
        output_lengths="tgi_request_generated_tokens"),
)


@dataclass(frozen=True, slots=True)
class _Series:
    labels: Mapping[str, str]
    value: float


class _Scrape:
    """One exposition text's samples by exact sample name, and the names it declares."""

    def __init__(self, text: str) -> None:
        lines = _Lines(text)
        try:
            families = list(text_fd_to_metric_families(lines))
        except Exception:  # the parser raises ValueError, and others on odd input
            # By line number only: the parser's message quotes the line, and the page is
            # whatever the URL answered (another service's page, a secret).
            raise ServingMetricsError(
                f"not Prometheus text exposition: line {lines.taken} is not a sample, a "
                "comment or blank") from None
        self.family_names = sorted({f.name for f in families})
        self.samples: dict[str, list[_Series]] = defaultdict(list)
        names: set[str] = set()
        for family in families:
            names.add(_strip_total(family.name))
            for sample in family.samples:
                self.samples[sample.name].append(_Series(sample.labels, float(sample.value)))
                names.add(_strip_total(sample.name))
        self.names = frozenset(names)

    def counter(self, name: str) -> list[_Series]:
        # A typed counter's samples end in _total (the parser adds it to TGI's bare
        # name); an untyped or gauge-declared one keeps what the server wrote.
        return self.samples.get(f"{name}_total") or self.samples.get(name, [])

    def declares(self, name: str) -> bool:
        return name in self.names or any(
            f"{name}{suffix}" in self.names for suffix in ("_bucket", "_sum", "_count"))


class _Lines:
    """The page's lines, counted as the parser takes them: where it stops is the line it
    found wrong."""

    def __init__(self, text: str) -> None:
        self._lines = iter(text.splitlines(keepends=True))
        self.taken = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.taken += 1
        return line


def _strip_total(name: str) -> str:
    return name[:-len("_total")] if name.endswith("_total") else name


def _model_of(spec: _EngineSpec, labels: Mapping[str, str]) -> str:
    if spec.model_label is None:
        return DEFAULT_MODEL
    return labels.get(spec.model_label) or DEFAULT_MODEL


def _recognise(scrape: _Scrape) -> _EngineSpec:
    found = []
    for spec in ENGINES:
        in_namespace = any(name.startswith(spec.prefix) for name in scrape.names)
        known = any(scrape.declares(name) for name in spec.names())
        if known or (in_namespace and spec.lazy):
            found.append(spec)
        elif in_namespace:
            raise ServingMetricsError(
                f"{spec.label} metrics but none of those joulestat reads "
                f"({', '.join(sorted(spec.names()))}): a version that renamed them?")
    if len(found) > 1:
        raise ServingMetricsError(
            "metrics of more than one engine (" + ", ".join(s.label for s in found)
            + "): point joulestat at one server's endpoint")
    if not found:  # counted, not named: the page may be anything the URL answered
        raise ServingMetricsError(
            f"no vLLM, TGI or SGLang metrics: found {len(scrape.family_names)} families, "
            "none known")
    return found[0]


def _sum_by_model(spec: _EngineSpec, series: Iterable[_Series]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for item in series:
        totals[_model_of(spec, item.labels)] += item.value
    return dict(totals)


def _le(name: str, text: str) -> float:
    try:
        return float(text)  # float() reads "+Inf"
    except ValueError:
        raise ServingMetricsError(f"{name}: a bucket whose le is not a number") from None


def _histograms(spec: _EngineSpec, scrape: _Scrape, name: str) -> dict[str, Histogram]:
    """The histogram ``name`` per model, summed over every other label."""
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    bounds_of_series: dict[tuple[str, frozenset[tuple[str, str]]], set[float]] = \
        defaultdict(set)
    for item in scrape.samples.get(f"{name}_bucket", []):
        if "le" not in item.labels:
            continue
        model = _model_of(spec, item.labels)
        le = _le(name, item.labels["le"])
        buckets[model][le] += item.value
        rest = frozenset((k, v) for k, v in item.labels.items() if k != "le")
        bounds_of_series[(model, rest)].add(le)
    bounds_by_model: dict[str, set[frozenset[float]]] = defaultdict(set)
    for (model, _rest), bounds in bounds_of_series.items():
        bounds_by_model[model].add(frozenset(bounds))
    for shapes in bounds_by_model.values():
        if len(shapes) > 1:
            raise ServingMetricsError(  # the model's name is the page's: not repeated
                f"{name}: one model's series with different bucket bounds")
    sums = _sum_by_model(spec, scrape.samples.get(f"{name}_sum", []))
    counts = _sum_by_model(spec, scrape.samples.get(f"{name}_count", []))
    result = {}
    for model, by_le in buckets.items():
        ordered = sorted(by_le.items())
        if ordered[-1][0] != _INF:  # a server that left out +Inf: its count is the total
            ordered.append((_INF, counts.get(model, ordered[-1][1])))
        count = counts.get(model, ordered[-1][1])
        result[model] = Histogram(tuple(ordered), sums.get(model, 0.0), count)
    return result


def _figure(spec: _EngineSpec, scrape: _Scrape, source: _Source | None,
            models: Iterable[str]) -> dict[str, float | None]:
    if source is None:
        return dict.fromkeys(models)
    if source.kind is _Kind.COUNTER:
        values = _sum_by_model(spec, scrape.counter(source.name))
    else:
        values = _sum_by_model(spec, scrape.samples.get(f"{source.name}_sum", []))
    # Declared but no sample for a model (a labelled prometheus_client counter before
    # its first increment), or a lazily created one not there yet: nothing counted yet.
    missing = 0.0 if (spec.lazy or scrape.declares(source.name)) else None
    return {model: values.get(model, missing) for model in models}


def parse_serving_metrics(text: str) -> ServingSample:
    """One scrape of a serving engine's /metrics, per model.

    A model appears once any figure read here has a sample for it; TGI's one model is
    :data:`DEFAULT_MODEL`. Raises :class:`ServingMetricsError` when the text is not
    exposition text or holds no known engine's metrics (the message says what it found).
    """
    scrape = _Scrape(text)
    spec = _recognise(scrape)
    latency: dict[str, dict[Latency, Histogram]] = defaultdict(dict)
    for kind, names in spec.latency.items():
        for name in reversed(names):  # the preferred (newer) name overwrites
            for model, histogram in _histograms(spec, scrape, name).items():
                latency[model][kind] = histogram
    sources = (spec.output_tokens, spec.prompt_tokens, spec.requests)
    models: set[str] = set(latency)
    for source in sources:
        if source is None:
            continue
        series = (scrape.counter(source.name) if source.kind is _Kind.COUNTER
                  else scrape.samples.get(f"{source.name}_sum", []))
        models.update(_model_of(spec, item.labels) for item in series)
    if spec.lazy and not models:
        models.add(DEFAULT_MODEL)  # TGI up, nothing served yet: zeros
    output, prompt, requests = (_figure(spec, scrape, s, models) for s in sources)
    running, waiting = (_gauge(spec, scrape, name, models)
                        for name in (spec.running, spec.waiting))
    prompt_lengths, output_lengths = (
        _histograms(spec, scrape, name) if name else {}
        for name in (spec.prompt_lengths, spec.output_lengths))
    return ServingSample(spec.engine, MappingProxyType({
        model: ModelCounters(output[model], prompt[model], requests[model],
                             MappingProxyType(dict(latency.get(model, {}))),
                             running[model], waiting[model],
                             prompt_lengths.get(model), output_lengths.get(model))
        for model in sorted(models)}))


def _gauge(spec: _EngineSpec, scrape: _Scrape, name: str | None,
           models: Iterable[str]) -> dict[str, float | None]:
    """A gauge per model, summed over every other label (vLLM's data-parallel engines);
    None for a model without a sample: not exposed (or not yet, for TGI's lazy ones)."""
    if name is None:
        return dict.fromkeys(models)
    values = _sum_by_model(spec, scrape.samples.get(name, []))
    return {model: values.get(model) for model in models}


def fetch_serving_metrics(url: str, timeout_s: float = FETCH_TIMEOUT_S, *,
                          rule: ServingAddressRule | None = None) -> str:
    """The text of ``url`` (an http(s) metrics endpoint), for :func:`parse_serving_metrics`.

    Credentials in the URL (``http://user:pass@host/metrics``) go as HTTP basic auth.
    The host is resolved and each address checked against ``rule`` (this node only, by
    default: :mod:`joulestat.host.serving_address`), and the connection goes to an
    address that passed. The whole fetch (connect, headers, body) ends within
    ``timeout_s``, however slowly the server sends; a redirect is an error, never
    followed (it could lead anywhere the rule forbids). Raises
    :class:`ServingMetricsError` naming the URL, its password hidden, and the cause
    (never what the server sent): the agent logs it and tries again next tick.
    """
    shown = redact_text(url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServingMetricsError(f"{shown}: not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ServingMetricsError(f"{shown}: not a valid port") from None
    deadline = SocketDeadline(timeout_s)
    try:
        try:
            addresses = (rule or ServingAddressRule()).resolve(parts.hostname, port)
        except AddressRefused as exc:
            raise ServingMetricsError(f"{shown}: {exc}") from None
        return _get(shown, parts, port, addresses, deadline)
    finally:
        deadline.cancel()


def _get(shown: str, parts: urllib.parse.SplitResult, port: int,
         addresses: list[tuple[int, tuple[Any, ...]]], deadline: SocketDeadline) -> str:
    """GET ``parts`` from the first of ``addresses`` that connects, by http.client (which
    follows nothing), within ``deadline``."""
    headers = {"Accept": "text/plain;version=0.0.4", "User-Agent": "joulestat"}
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    assert parts.hostname is not None
    host = parts.hostname
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    # Host: and TLS (SNI, the certificate's name) say the URL's host; the socket goes to
    # the address the rule passed, not to a second lookup that might answer otherwise.
    connection = kind(host, port, timeout=deadline.total_s)
    connection._create_connection = (  # type: ignore[attr-defined]
        lambda _address, _timeout, _source: deadline.watch(_connect(addresses, deadline)))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        status = response.status
        if 300 <= status < 400:
            raise ServingMetricsError(
                f"{shown}: HTTP {status}, a redirect: redirects are not followed (give the "
                "URL the metrics are served at)")
        if status != 200:
            raise ServingMetricsError(f"{shown}: HTTP {status} {_phrase(status)}".rstrip())
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > MAX_RESPONSE_BYTES:
            raise ServingMetricsError(
                f"{shown}: a response of {int(length)} bytes, over the "
                f"{MAX_RESPONSE_BYTES} joulestat reads")
        body = response.read(MAX_RESPONSE_BYTES + 1)
    except ServingMetricsError:
        if deadline.expired:
            raise ServingMetricsError(deadline.message(shown)) from None
        raise
    except (TimeoutError, http.client.HTTPException, OSError) as exc:
        if deadline.expired or isinstance(exc, TimeoutError):
            raise ServingMetricsError(deadline.message(shown)) from None
        if isinstance(exc, http.client.HTTPException):
            # Their text can be what the server sent (a bad status line): never shown.
            raise ServingMetricsError(
                f"{shown}: not a valid HTTP answer ({type(exc).__name__})") from None
        raise ServingMetricsError(f"{shown}: {redact_text(str(exc))}") from None
    finally:
        connection.close()
    if deadline.expired:  # the deadline cut the body short: what came is not the page
        raise ServingMetricsError(deadline.message(shown))
    if len(body) > MAX_RESPONSE_BYTES:
        raise ServingMetricsError(
            f"{shown}: a response over the {MAX_RESPONSE_BYTES} bytes joulestat reads")
    return body.decode("utf-8", errors="replace")


def _phrase(status: int) -> str:
    """The standard phrase of ``status``; the server's own reason text is not shown."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def _connect(addresses: list[tuple[int, tuple[Any, ...]]], deadline: SocketDeadline
             ) -> socket.socket:
    """A TCP connection to the first of ``addresses`` that takes one before the deadline."""
    error: OSError = TimeoutError()
    for family, address in addresses:
        left = deadline.left_s()
        if left <= 0:
            raise TimeoutError()
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(left)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        # Each read waits at most this long; the whole fetch, the deadline's watchdog.
        sock.settimeout(max(deadline.left_s(), 0.001))
        return sock
    raise error


def counter_delta(now: float, then: float | None) -> float:
    """What a counter gained since ``then``.

    ``now < then``: the server restarted and counted ``now`` since, as Prometheus'
    ``increase()`` reads a reset. ``then`` None: the first scrape, no baseline: 0. A
    series that appears on a later scrape started from 0 at the server's start: pass
    ``then=0.0`` for it, or its first counts are lost.
    """
    if then is None:
        return 0.0
    if now < then:
        return now
    return now - then


__all__ = [
    "DEFAULT_MODEL", "ENGINES", "FETCH_TIMEOUT_S", "MAX_RESPONSE_BYTES",
    "ModelCounters", "ServingEngine", "ServingMetricsError", "ServingSample",
    "counter_delta", "fetch_serving_metrics", "parse_serving_metrics",
]
