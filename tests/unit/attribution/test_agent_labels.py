"""Agent labels (what joulestat records about how it measured a job: ``cpu_source``,
``idle_policy``) are kept apart from the user's labels where a job comes in: the registry
of an agent or an embedded run (which records its own idle policy on every job) and the
checks on a registration. The job API is in tests/system/test_agent_labels_api.py, the
store in tests/store/test_agent_labels.py; a spool segment whose job rows lack agent
labels is refused in tests/unit/store/test_spool_segments.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.agent_labels import (
    MIXED,
    idle_policy_of,
    merge_agent_labels,
    validate_agent_labels,
)
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import Job, JobRegistry
from joulestat.attribution.shares import IdlePolicy
from joulestat.core.validation import MAX_LABELS, JobError


def attributing(registry: JobRegistry, policy: IdlePolicy, tmp_path: Path) -> JobAccounting:
    """The accounting an agent or an embedded run builds over ``registry``."""
    return JobAccounting(registry, tmp_path, IdleBaselines({}), policy)


def test_the_idle_policy_reads_back_as_recorded_and_unknown_as_none() -> None:
    assert idle_policy_of({"idle_policy": "share"}) == "share"
    assert idle_policy_of({"cpu_source": "process tree", "idle_policy": "exclude"}) == "exclude"
    assert idle_policy_of({"idle_policy": MIXED}) == "mixed"
    assert idle_policy_of({}) is None  # stored before joulestat recorded it
    assert idle_policy_of({"idle_policy": "something else"}) is None


def test_two_policies_merge_to_mixed_for_good_other_keys_as_labels() -> None:
    share, exclude = {"idle_policy": "share"}, {"idle_policy": "exclude"}
    assert merge_agent_labels(share, share) == share
    assert merge_agent_labels({}, exclude) == exclude
    assert merge_agent_labels(share, exclude) == {"idle_policy": MIXED}
    assert merge_agent_labels({"idle_policy": MIXED}, share) == {"idle_policy": MIXED}
    assert merge_agent_labels({"cpu_source": "cgroup v2 /a", **share},
                              {"cpu_source": "process tree"}) == {
        "cpu_source": "process tree", **share}


@pytest.mark.parametrize(("given", "message"), [
    ({"idle_policy": "share"}, "agent_labels.idle_policy: recorded by the agent"),
    ({"team": "nlp"}, "'team' is not an agent label"),
    ({"cpu_source": "a\u202eb"}, "agent_labels.cpu_source: must not contain control"),
    (["cpu_source"], "agent_labels: expected an object"),
])
def test_a_registration_gives_cpu_source_only(given: object, message: str) -> None:
    with pytest.raises(JobError, match=message):
        validate_agent_labels(given)


def test_every_job_an_agent_holds_records_its_idle_policy(tmp_path: Path) -> None:
    """However a job comes in (the API, `joulestat run`, discovery, a restart), it holds
    the policy of the accounting dividing its energy; a job it held under another one
    before a restart is mixed."""
    registry = JobRegistry()
    early = registry.register("early", "training")  # before the accounting exists
    attributing(registry, IdlePolicy.EXCLUDE, tmp_path)
    assert early.agent_labels == {"idle_policy": "exclude"}
    ran = registry.register("run", "training", labels={"team": "nlp"},
                            agent_labels={"cpu_source": "process tree"}, origin="run")
    found = registry.register("pod", "inference", pids=[4242], origin="discovered:k8s")
    assert ran.labels == {"team": "nlp"}
    assert ran.agent_labels == {"cpu_source": "process tree", "idle_policy": "exclude"}
    assert found.agent_labels == {"idle_policy": "exclude"}
    # Registered again (the wrapper, once CMD runs): merged, the policy kept.
    again = registry.register("run", "training", pids=[4243], job_id=ran.id,
                              agent_labels={"cpu_source": "cgroup v2 /j"}, origin="run")
    assert again.agent_labels == {"cpu_source": "cgroup v2 /j", "idle_policy": "exclude"}
    # A restart under the other policy: what the store held, and now this one.
    restarted = JobRegistry()
    attributing(restarted, IdlePolicy.SHARE, tmp_path)
    restarted.restore(Job(id=ran.id, name="run", kind="training", labels={}, pids={4243},
                          started_s=1.0, agent_labels=dict(again.agent_labels)))
    assert restarted.get(ran.id).agent_labels == {"cpu_source": "cgroup v2 /j",
                                                  "idle_policy": MIXED}
    assert ran.id in {job.id for job in restarted.take_changes()[0]}


def test_agent_labels_never_count_against_the_users_labels() -> None:
    registry = JobRegistry()
    full = {f"k{i}": "v" for i in range(MAX_LABELS)}
    job = registry.register("full", "training", labels=full,
                            agent_labels={"cpu_source": "process tree"})
    assert job.labels == full and job.agent_labels == {"cpu_source": "process tree"}

