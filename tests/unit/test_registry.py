from __future__ import annotations

import pytest

from agent.jobs.registry import JobConflict, JobRegistry


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
