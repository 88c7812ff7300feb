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
