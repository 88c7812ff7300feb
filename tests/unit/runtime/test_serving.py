"""joulestat.runtime.serving.ServingUnits polling endpoints one apart from another: an
endpoint whose fetch does not end holds its own thread and nobody else's samples, and is
not fetched again until it ends. The fetch is a stand-in that answers from memory (and
one that waits until the test lets it go); over real sockets, with the real agent:
tests/system/test_serving_metrics_isolation.py."""

from __future__ import annotations

import threading
from collections import Counter

from joulestat.attribution.registry import JobRegistry
from joulestat.host.serving_metrics import ServingMetricsError
from joulestat.runtime.serving import ServingUnits

GOOD, HUNG = "http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"


def page(tokens: float) -> str:
    return ("# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{model_name="m"}} {tokens}\n')


def test_a_fetch_that_never_ends_delays_no_other_endpoint() -> None:
    registry = JobRegistry()
    calls: Counter[str] = Counter()
    let_go = threading.Event()

    def fetch(url: str, _timeout_s: float) -> str:
        calls[url] += 1
        if url == HUNG:
            let_go.wait(60)  # as a server that never answers, until the test ends
            raise ServingMetricsError(f"{url}: no complete answer within 2 s")
        return page(100.0 * calls[url])

    units = ServingUnits(registry, fetch=fetch)
    registry.register("hung", "inference", agent_labels={"serving_metrics": HUNG})
    units.poll()  # the hung endpoint's fetch starts, and stays
    good = registry.register("good", "inference", agent_labels={"serving_metrics": GOOD})
    try:
        for _ in range(10):
            units.poll(wait_s=30)  # waits for the good fetch only: the hung one is not
            units()  # restarted while it runs
        assert calls == {GOOD: 10, HUNG: 1}
        # 10 samples: the first is the baseline, 9 differences of 100 tokens
        assert registry.get(good.id).units["output_token"] == 900.0
    finally:
        let_go.set()
        units.close()
    units.poll()  # closed: nothing starts
    assert calls == {GOOD: 10, HUNG: 1}


def test_once_started_each_tick_starts_a_round_and_no_thread_waits_between() -> None:
    """The agent polls from its tick hook (issue 48): no poller thread wakes once a second
    on a node with no serving job. Started, each tick starts a fetch of every endpoint
    named (one at a time per URL) and counts what the last round brought; closed, a
    tick starts none."""
    registry = JobRegistry()
    calls: Counter[str] = Counter()
    fetched = threading.Semaphore(0)

    def fetch(url: str, _timeout_s: float) -> str:
        calls[url] += 1
        try:
            return page(100.0 * calls[url])
        finally:
            fetched.release()

    units = ServingUnits(registry, fetch=fetch)
    before = {thread.ident for thread in threading.enumerate()}
    units.start()
    units()  # a tick with no serving job: nothing to fetch, no thread of its own
    assert {thread.ident for thread in threading.enumerate()} <= before
    job = registry.register("good", "inference", agent_labels={"serving_metrics": GOOD})
    for _ in range(4):
        units()  # counts the last round's sample, starts the next round
        assert fetched.acquire(timeout=30)
        for thread in threading.enumerate():  # the round's fetch keeps its sample, ends
            if thread.name == "joulestat-serving-fetch":
                thread.join(timeout=30)
    units()  # the fourth sample: three differences of 100 tokens after the baseline
    assert registry.get(job.id).units["output_token"] == 300.0
    assert fetched.acquire(timeout=30)  # the fifth round's fetch
    assert calls == {GOOD: 5}
    units.close()
    units()
    assert calls == {GOOD: 5}


def test_each_tick_adds_a_point_to_the_jobs_trace() -> None:
    """A serving job's trace (issue 49): a point per tick with its energy and tokens so
    far and the engine's gauges; a tick whose power a counter fault filled is not
    counted as measured, and a tick without a recent answer not as answered."""
    from joulestat.core.tick import Tick, TickEntry

    registry = JobRegistry()
    clock = {"wall": 1000.0, "tokens": 0.0, "running": 4.0}
    ticks: list[Tick] = []

    def fetch(_url: str, _timeout_s: float) -> str:
        return ("# TYPE vllm:generation_tokens counter\n"
                f'vllm:generation_tokens_total{{model_name="m"}} {clock["tokens"]}\n'
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m"}} {clock["running"]}\n')

    units = ServingUnits(registry, interval_s=1.0, fetch=fetch,
                         last_tick=lambda: ticks[-1] if ticks else None,
                         wall_clock=lambda: clock["wall"])
    job = registry.register("served", "inference", agent_labels={"serving_metrics": GOOD})

    def tick(source: str, answer: bool) -> None:
        clock["wall"] += 1.0
        clock["tokens"] += 100.0
        ticks.append(Tick(clock["wall"] - 1, clock["wall"],
                          (TickEntry("cpu", "package-0", source, 10.0),)))
        registry.get(job.id).dynamic_j["cpu"] = registry.get(job.id).dynamic_j.get(
            "cpu", 0.0) + 10.0
        if answer:
            units.poll(wait_s=30)
        units()

    try:
        for source, answer in [("rapl", True)] * 4 + [("fill:rapl", True)] * 2 \
                + [("rapl", False)] * 4 + [("rapl", True)]:
            tick(source, answer)
        covered = registry.get(job.id).serving_trace.points[-1]
        clock["wall"] += 19.0  # the agent was down: a 20 s gap to the next point
        tick("rapl", True)
    finally:
        units.close()
    after_gap = registry.get(job.id).serving_trace.points[-1]
    assert after_gap.t_s - covered.t_s == 20.0
    assert (after_gap.power_s, after_gap.answered_s) == (covered.power_s, covered.answered_s)
    trace = registry.get(job.id).serving_trace
    assert trace is not None
    points = trace.points[:-1]  # before the gap
    assert len(points) == 11 and [p.t_s for p in points] == [1001.0 + i for i in range(11)]
    assert points[-1].energy_j == 110.0
    # the first answer is the baseline: 10 differences of 100 tokens after it
    assert points[-1].output_tokens == 1000.0
    assert points[-1].running == 4.0 and points[-1].waiting is None
    assert points[-1].power_s == 8.0  # 10 s, 2 of them filled
    # 4 ticks without an answer: the first 2 still within two intervals of the last
    assert points[-1].answered_s == 8.0


def test_a_restart_counts_what_the_engine_served_while_the_agent_was_down() -> None:
    """The last sample of each serving job goes into the agent's checkpoint (as JSON);
    an agent restored from it counts the next sample from there, not as a new baseline;
    a part it cannot read is said and skipped, never raised."""
    import json

    served = {"tokens": 1000.0}

    def fetch(_url: str, _timeout_s: float) -> str:
        return page(served["tokens"])

    registry = JobRegistry()
    job = registry.register("llm", "inference", agent_labels={"serving_metrics": GOOD})
    units = ServingUnits(registry, fetch=fetch)
    for tokens in (1000.0, 1500.0):  # the baseline, then 500 tokens
        served["tokens"] = tokens
        units.poll(wait_s=30)
        units()
    assert registry.get(job.id).units["output_token"] == 500.0
    saved = json.loads(json.dumps(units.checkpoint()))
    assert saved[job.id]["models"] == {"m": [1500.0, None, None]}
    units.close()

    # The agent down while the engine served 700 more; restarted from the checkpoint.
    served["tokens"] = 2200.0
    other = registry.register("llm-b", "inference", agent_labels={"serving_metrics": GOOD})
    restarted = ServingUnits(registry, fetch=fetch)
    restarted.restore({**saved, "gone": saved[job.id], other.id: {"models": "?"}})
    restarted.poll(wait_s=30)
    restarted()
    assert registry.get(job.id).units["output_token"] == 1200.0
    assert registry.get(other.id).units.get("output_token", 0.0) == 0.0  # its baseline
    restarted.close()

    # Without it (no usable checkpoint), the first sample is a baseline again.
    served["tokens"] = 3000.0
    fresh = ServingUnits(registry, fetch=fetch)
    fresh.poll(wait_s=30)
    fresh()
    assert registry.get(job.id).units["output_token"] == 1200.0
    fresh.close()
    assert ServingUnits(JobRegistry(), fetch=fetch).checkpoint() == {}
