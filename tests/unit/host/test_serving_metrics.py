"""joulestat.host.serving_metrics: each engine's scrape (fixtures written from the engines'
source, tests/fixtures/serving/), counter deltas across restarts, and the URLs a fetch
refuses. Histogram deltas and PromQL's histogram_quantile: tests/unit/core/test_histogram.py;
fetching over HTTP, with errors that name the URL, never its password:
tests/system/test_serving_metrics_fetch.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from joulestat.core.histogram import (
    Histogram,
    Latency,
)
from joulestat.host.serving_metrics import (
    DEFAULT_MODEL,
    ServingEngine,
    ServingMetricsError,
    counter_delta,
    fetch_serving_metrics,
    parse_serving_metrics,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "serving"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
INF = math.inf


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def bucket(histogram: Histogram, le: float) -> float:
    return dict(histogram.buckets)[le]


def test_vllm_v1_sums_engines_and_finish_reasons_per_model() -> None:
    sample = parse_serving_metrics(fixture("vllm.prom"))
    assert sample.engine is ServingEngine.VLLM
    assert sorted(sample.models) == [QWEN, LLAMA]
    llama = sample.models[LLAMA]
    # engine 0 and engine 1 (data parallel); request_success over stop/length/abort
    assert (llama.output_tokens, llama.prompt_tokens, llama.requests) == (2275.0, 4530.0, 10.0)
    assert set(llama.latency) == {Latency.TTFT, Latency.ITL, Latency.E2E}
    ttft = llama.latency[Latency.TTFT]
    assert ttft.count == 9.0 and ttft.sum == pytest.approx(2.58)
    assert ttft.buckets[0] == (0.001, 0.0) and ttft.buckets[-1] == (INF, 9.0)
    assert bucket(ttft, 0.04) == 2.0 and bucket(ttft, 0.1) == 5.0 and bucket(ttft, 1.0) == 8.0
    assert [le for le, _ in ttft.buckets] == sorted(le for le, _ in ttft.buckets)
    assert llama.latency[Latency.ITL].count == 30.0
    assert llama.latency[Latency.E2E].sum == pytest.approx(28.7)
    qwen = sample.models[QWEN]
    assert (qwen.output_tokens, qwen.prompt_tokens, qwen.requests) == (96.0, 230.0, 2.0)


def test_vllm_v0_reads_the_older_inter_token_name() -> None:
    sample = parse_serving_metrics(fixture("vllm-v0.prom"))
    assert sample.engine is ServingEngine.VLLM
    (model, counters), = sample.models.items()
    assert model == "mistralai/Mistral-7B-Instruct-v0.3"
    assert (counters.output_tokens, counters.prompt_tokens, counters.requests) == (412.0, 880.0,
                                                                                   4.0)
    itl = counters.latency[Latency.ITL]
    assert itl.count == 10.0 and itl.sum == pytest.approx(0.44) and bucket(itl, 0.025) == 6.0


def test_vllm_prefers_the_newer_inter_token_name_when_both_differ() -> None:
    text = """\
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.1",model_name="m"} 1.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 1.0
vllm:time_per_output_token_seconds_count{model_name="m"} 1.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.05
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 3.0
vllm:inter_token_latency_seconds_count{model_name="m"} 3.0
vllm:inter_token_latency_seconds_sum{model_name="m"} 0.4
"""
    counters = parse_serving_metrics(text).models["m"]
    assert counters.latency[Latency.ITL] == Histogram(((0.1, 2.0), (INF, 3.0)), 0.4, 3.0)
    # no counter families in this text at all: unexposed, not zero
    assert (counters.output_tokens, counters.prompt_tokens, counters.requests) == (None,) * 3


def test_tgi_one_default_model_tokens_from_histogram_sums_and_no_ttft() -> None:
    sample = parse_serving_metrics(fixture("tgi.prom"))
    assert sample.engine is ServingEngine.TGI
    assert list(sample.models) == [DEFAULT_MODEL]
    tgi = sample.models[DEFAULT_MODEL]
    # generated tokens of 12 successful requests; input length of 13 validated ones
    assert (tgi.output_tokens, tgi.prompt_tokens, tgi.requests) == (1163.0, 1277.0, 12.0)
    assert set(tgi.latency) == {Latency.ITL, Latency.E2E}  # TGI has no TTFT metric
    e2e = tgi.latency[Latency.E2E]
    assert e2e.count == 12.0 and e2e.sum == pytest.approx(40.8)
    assert len(e2e.buckets) == 36 and e2e.buckets[0][0] == pytest.approx(0.00015)


def test_tgi_before_its_first_request_reads_zeros() -> None:
    """metrics-rs creates a metric at its first use: a TGI that served nothing yet."""
    sample = parse_serving_metrics("# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n")
    assert sample.engine is ServingEngine.TGI
    counters = sample.models[DEFAULT_MODEL]
    assert (counters.output_tokens, counters.prompt_tokens, counters.requests) == (0.0,) * 3
    assert dict(counters.latency) == {}


def test_sglang_two_models() -> None:
    sample = parse_serving_metrics(fixture("sglang.prom"))
    assert sample.engine is ServingEngine.SGLANG
    assert sorted(sample.models) == [QWEN, LLAMA]
    llama = sample.models[LLAMA]
    assert (llama.output_tokens, llama.prompt_tokens, llama.requests) == (7557.0, 8128.0, 11.0)
    itl = llama.latency[Latency.ITL]
    assert itl.count == 64.0 and bucket(itl, 0.01) == 40.0 and bucket(itl, 0.015) == 60.0
    assert llama.latency[Latency.TTFT].count == 11.0
    qwen = sample.models[QWEN]
    assert (qwen.output_tokens, qwen.prompt_tokens, qwen.requests) == (310.0, 640.0, 4.0)
    assert qwen.latency[Latency.E2E].sum == pytest.approx(3.2)


def test_older_sglang_itl_name_and_no_request_counter() -> None:
    text = """\
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 50.0
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 4.0
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
sglang:time_per_output_token_seconds_count{model_name="m"} 5.0
sglang:time_per_output_token_seconds_sum{model_name="m"} 0.07
"""
    counters = parse_serving_metrics(text).models["m"]
    assert counters.output_tokens == 50.0
    assert counters.requests is None  # sglang:num_requests_total came later: not invented
    assert counters.latency[Latency.ITL].count == 5.0


def test_counters_declared_as_untyped_or_gauge_are_read_by_sample_name() -> None:
    text = """\
vllm:generation_tokens_total{model_name="m",engine="0"} 7
# TYPE vllm:prompt_tokens_total gauge
vllm:prompt_tokens_total{model_name="m",engine="0"} 9
vllm:request_success_total{model_name="m",engine="0",finished_reason="stop"} 2
"""
    counters = parse_serving_metrics(text).models["m"]
    assert (counters.output_tokens, counters.prompt_tokens, counters.requests) == (7.0, 9.0, 2.0)


def test_unknown_text_says_what_it_found_by_count_never_by_name() -> None:
    """The page is whatever the URL answered: its names are counted, not repeated."""
    text = "".join(f"# TYPE node_thing_{i} gauge\nnode_thing_{i} {i}\n" for i in range(12))
    with pytest.raises(ServingMetricsError, match=r"no vLLM, TGI or SGLang metrics: found 12 "
                                                  r"families, none known") as caught:
        parse_serving_metrics(text)
    assert "node_thing" not in str(caught.value)
    with pytest.raises(ServingMetricsError, match="found 0 families"):
        parse_serving_metrics("")


def test_an_engine_namespace_without_any_metric_read_is_an_error() -> None:
    with pytest.raises(ServingMetricsError, match="vLLM metrics but none of those joulestat"):
        parse_serving_metrics('vllm:num_requests_running{model_name="m"} 1\n')


def test_two_engines_in_one_scrape_are_refused() -> None:
    text = fixture("sglang.prom") + fixture("vllm-v0.prom")
    with pytest.raises(ServingMetricsError, match="more than one engine"):
        parse_serving_metrics(text)


@pytest.mark.parametrize("bad", ['vllm:prompt_tokens_total{model_name="m" 1 2 3',
                                 "<p>api-key hunter2</p>", "hunter2 is not a number"])
def test_text_that_is_not_exposition_format_says_where_never_what(bad: str) -> None:
    text = ('# TYPE vllm:prompt_tokens counter\n'
            f'vllm:prompt_tokens_total{{model_name="m"}} 1\n{bad}\n')
    with pytest.raises(ServingMetricsError) as caught:
        parse_serving_metrics(text)
    assert str(caught.value) == ("not Prometheus text exposition: line 3 is not a sample, "
                                 "a comment or blank")


def test_a_bucket_bound_that_is_no_number_is_not_quoted() -> None:
    text = ('# TYPE vllm:e2e_request_latency_seconds histogram\n'
            'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="hunter2"} 1\n')
    with pytest.raises(ServingMetricsError, match="le is not a number") as caught:
        parse_serving_metrics(text)
    assert "hunter2" not in str(caught.value)


def test_counter_delta() -> None:
    assert counter_delta(10.0, None) == 0.0  # first sight: no baseline
    assert counter_delta(15.0, 10.0) == 5.0
    assert counter_delta(10.0, 10.0) == 0.0
    assert counter_delta(3.0, 10.0) == 3.0  # restarted, counted 3 since


# --- fetching ------------------------------------------------------------------------------


def test_fetch_refuses_other_schemes() -> None:
    with pytest.raises(ServingMetricsError, match="not an http"):
        fetch_serving_metrics("file:///etc/passwd")


def test_the_engines_load_gauges_per_model() -> None:
    """Running and waiting requests (where a steady-state window opens and closes, issue
    49): summed over vLLM's data-parallel engines; None where the engine has none."""
    vllm = parse_serving_metrics(fixture("vllm.prom"))
    assert (vllm.models[LLAMA].running, vllm.models[LLAMA].waiting) == (2.0, 0.0)
    assert (vllm.models[QWEN].running, vllm.models[QWEN].waiting) == (1.0, 0.0)
    sglang = parse_serving_metrics(fixture("sglang.prom")).models[LLAMA]
    assert sglang.running == 2.0
    tgi = parse_serving_metrics(fixture("tgi.prom")).models["default"]
    assert tgi.running == 0.0
    bare = parse_serving_metrics("# TYPE vllm:generation_tokens counter\n"
                                 'vllm:generation_tokens_total{model_name="m"} 5\n')
    assert bare.models["m"].running is None and bare.models["m"].prompt_lengths is None


def test_vllm_request_length_histograms() -> None:
    page = "\n".join([
        "# TYPE vllm:generation_tokens counter",
        'vllm:generation_tokens_total{model_name="m"} 600',
        "# TYPE vllm:request_prompt_tokens histogram",
        *(f'vllm:request_prompt_tokens_bucket{{model_name="m",engine="{e}",le="{le}"}} {n}'
          for e in ("0", "1") for le, n in (("50", 1), ("100", 2), ("+Inf", 2))),
        'vllm:request_prompt_tokens_sum{model_name="m",engine="0"} 120',
        'vllm:request_prompt_tokens_sum{model_name="m",engine="1"} 140',
        'vllm:request_prompt_tokens_count{model_name="m",engine="0"} 2',
        'vllm:request_prompt_tokens_count{model_name="m",engine="1"} 2',
        "# TYPE vllm:request_generation_tokens histogram",
        'vllm:request_generation_tokens_bucket{model_name="m",le="200"} 4',
        'vllm:request_generation_tokens_bucket{model_name="m",le="+Inf"} 4',
        'vllm:request_generation_tokens_sum{model_name="m"} 600',
        'vllm:request_generation_tokens_count{model_name="m"} 4',
    ]) + "\n"
    model = parse_serving_metrics(page).models["m"]
    assert model.prompt_lengths is not None and model.output_lengths is not None
    assert model.prompt_lengths.buckets == ((50.0, 2.0), (100.0, 4.0), (INF, 4.0))
    assert (model.prompt_lengths.sum, model.prompt_lengths.count) == (260.0, 4.0)
    assert model.output_lengths.sum == 600.0
