"""The job registry: each change reported once to the store, counts refused after a
job's end and past the total cap, and a job registered again merging its labels key by
key within the label limit; the records the store is handed are snapshots, a job comes
back from its stored record, and jobs become final by id."""

from __future__ import annotations

import pytest

from joulestat.attribution.registry import Job, JobRegistry
from joulestat.core.records import StoredJob
from joulestat.core.validation import MAX_LABELS, JobConflict, JobError


def test_take_changes_reports_each_change_once() -> None:
    registry = JobRegistry(clock=lambda: 100.0)
    job = registry.register("bert", "training", pids=[10], labels={"team": "a"}, job_id="j1")
    registry.count("j1", "sample", 32)
    registry.count("j1", "sample", 8)
    changed, units = registry.take_changes()
    assert changed == [job.record()] and units == {"j1": {"sample": 40.0}}
    assert registry.take_changes() == ([], {})

    # Discovery re-registers the same job every scan: nothing new, nothing to save.
    registry.register("bert", "training", pids=[10], labels={"team": "a"}, job_id="j1")
    registry.set_pids("j1", [10])
    assert registry.take_changes() == ([], {})

    registry.register("bert", "training", pids=[11], job_id="j1")  # a new process joins
    assert registry.take_changes()[0] == [job.record()]
    assert job.record().pids == {10, 11}
    registry.set_pids("j1", [12])
    assert registry.take_changes()[0] == [job.record()]
    registry.end("j1")
    [ended] = registry.take_changes()[0]
    assert ended == job.record() and ended.status == job.status == "ended"
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


def test_a_record_is_a_snapshot_and_a_stored_record_comes_back_as_the_job() -> None:
    registry = JobRegistry(clock=lambda: 100.0)
    job = registry.register("bert", "inference", pids=[10], labels={"team": "a"},
                            job_id="j1", instance_type="g5.xlarge",
                            agent_labels={"cpu_source": "process tree"})
    record = job.record()
    registry.register("bert", "inference", pids=[11], labels={"team": "b"}, job_id="j1")
    registry.end("j1", at_s=150.0)
    assert (record.pids, record.labels, record.ended_s, record.status) == (
        {10}, {"team": "a"}, None, "running")  # what it was when taken
    assert (record.instance_type, record.agent_labels) == (
        "g5.xlarge", {"cpu_source": "process tree"})

    stored = StoredJob(record, dynamic_j={"cpu": 3.0}, idle_j={"cpu": 1.0},
                       units={"request": 7.0})
    back = Job.from_stored(stored)
    assert (back.id, back.name, back.kind, back.pids, back.labels, back.started_s) == (
        "j1", "bert", "inference", {10}, {"team": "a"}, 100.0)
    assert (back.energy_j, back.units, back.final) == (4.0, {"request": 7.0}, False)
    assert back.record() == record
    back.pids.add(12)  # the job's own copies: the record does not change with it
    assert record.pids == {10} and stored.energy_j == 4.0


def test_jobs_become_final_by_id_once_ended() -> None:
    registry = JobRegistry(clock=lambda: 100.0)
    ended = registry.register("a", "other", job_id="a")
    reopened = registry.register("b", "other", job_id="b")
    registry.end("a")
    registry.end("b")
    registry.register("b", "other", job_id="b")  # running again before its flush
    registry.mark_final(["a", "b", "gone"])
    assert ended.final and not reopened.final
