"""The job registry: each change reported once to the store, counts refused after a
job's end and past the total cap, and a job registered again merging its labels key by
key within the label limit."""

from __future__ import annotations

import pytest

from joulestat.attribution.registry import JobRegistry
from joulestat.core.validation import MAX_LABELS, JobConflict, JobError


def test_take_changes_reports_each_change_once() -> None:
    registry = JobRegistry(clock=lambda: 100.0)
    job = registry.register("bert", "training", pids=[10], labels={"team": "a"}, job_id="j1")
    registry.count("j1", "sample", 32)
    registry.count("j1", "sample", 8)
    changed, units = registry.take_changes()
    assert changed == [job] and units == {"j1": {"sample": 40.0}}
    assert registry.take_changes() == ([], {})

    # Discovery re-registers the same job every scan: nothing new, nothing to save.
    registry.register("bert", "training", pids=[10], labels={"team": "a"}, job_id="j1")
    registry.set_pids("j1", [10])
    assert registry.take_changes() == ([], {})

    registry.register("bert", "training", pids=[11], job_id="j1")  # a new process joins
    assert registry.take_changes()[0] == [job]
    registry.set_pids("j1", [12])
    assert registry.take_changes()[0] == [job]
    registry.end("j1")
    assert registry.take_changes()[0] == [job] and job.status == "ended"
    with pytest.raises(JobConflict):
        registry.register("other", "training", job_id="j1")


def test_units_after_the_end_and_past_the_total_cap_are_refused() -> None:
    from joulestat.core.validation import MAX_UNIT_COUNT, JobConflict, JobError, JobLimit

    registry = JobRegistry(max_live_jobs=2)
    job = registry.register("a", "training", job_id="a")
    registry.count("a", "sample", MAX_UNIT_COUNT)
    with pytest.raises(JobError, match="over the limit of 1e\\+15 per unit"):
        registry.count("a", "sample", 1)  # each call is fine, their sum is not
    registry.end("a")
    with pytest.raises(JobConflict, match="has ended"):
        registry.count("a", "sample", 1)
    assert job.units == {"sample": MAX_UNIT_COUNT}
    # The live-job cap: ended jobs free their place, a third live one is refused.
    registry.register("b", "other", job_id="b")
    registry.register("c", "other", job_id="c")
    with pytest.raises(JobLimit, match="--max-jobs 2") as caught:
        registry.register("d", "other", job_id="d")
    assert caught.value.status == 429


def test_registering_again_merges_labels_key_by_key():
    registry = JobRegistry()
    job = registry.register("svc", "inference", labels={"concurrency": "4", "team": "a"},
                            job_id="j1")
    registry.register("svc", "inference", labels={"p50_ms": "3.1", "team": "b"}, job_id="j1")
    assert job.labels == {"concurrency": "4", "p50_ms": "3.1", "team": "b"}
    full = {f"k{n}": "v" for n in range(MAX_LABELS - len(job.labels))}
    registry.register("svc", "inference", labels=full, job_id="j1")
    assert len(job.labels) == MAX_LABELS
    with pytest.raises(JobError, match=f"over the limit of {MAX_LABELS}"):
        registry.register("svc", "inference", labels={"one_more": "x"}, job_id="j1")
    assert "one_more" not in job.labels
