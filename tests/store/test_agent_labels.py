"""Agent labels in the store, on SQLite and on PostgreSQL (``jsonb`` in the upsert, as
``json_patch`` on SQLite): kept apart from the user's labels, never found by a label
filter, read back after a restart, merged key by key across nodes (two idle policies make
``mixed``)."""

from __future__ import annotations

from joulestat.store import migrate
from joulestat.store.durability import load_unsettled_jobs
from joulestat.store.jobs import JobFilter, job_totals
from tests.helpers.agent_labels_store import RUN_CGROUP, apart, job
from tests.helpers.store_jobs import LOADER, T0, TRAINER, feed, writer_for
from tests.helpers.stores import Store


def test_the_store_keeps_agent_labels_apart_and_merges_them(empty_store: Store) -> None:
    """A job's agent labels are stored and read apart from its labels, a filter by label
    key never finds them, a restart reads them back, and nodes reporting one job merge
    them key by key, except that two idle policies make ``mixed``, for good."""
    engine = empty_store.engine
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    trainer, loader = writer_for(engine, TRAINER), writer_for(engine, LOADER)
    trainer.save_job(job("multi", {"team": "nlp"},
                         {"cpu_source": "process tree", "idle_policy": "share"}))
    trainer.save_job(job("alike", {}, {"idle_policy": "share"}))
    feed(trainer, T0, 30, ("multi", "alike"))
    assert trainer.flush()
    assert apart(engine) == {
        "multi": ({"team": "nlp"}, {"cpu_source": "process tree", "idle_policy": "share"}),
        "alike": ({}, {"idle_policy": "share"})}
    assert [t.id for t in job_totals(engine, JobFilter(label_key="team"))] == ["multi"]
    for key in ("cpu_source", "idle_policy"):
        assert job_totals(engine, JobFilter(label_key=key)) == [], key
    [restored] = [j.record for j in load_unsettled_jobs(engine, TRAINER.node)
                  if j.record.id == "multi"]
    assert restored.agent_labels == {"cpu_source": "process tree", "idle_policy": "share"}

    # The loader node runs both jobs too: "multi" under the other policy, "alike" not.
    loader.save_job(job("multi", {"stage": "load"},
                        {"cpu_source": RUN_CGROUP, "idle_policy": "exclude"}))
    loader.save_job(job("alike", {}, {"idle_policy": "share"}))
    assert loader.flush()
    assert apart(engine) == {
        "multi": ({"stage": "load", "team": "nlp"},
                  {"cpu_source": RUN_CGROUP, "idle_policy": "mixed"}),
        "alike": ({}, {"idle_policy": "share"})}
    # Mixed for good: a node saving its own policy again does not undo it.
    trainer.save_job(job("multi", {}, {"idle_policy": "share"}, ended_s=T0 + 30))
    assert trainer.flush()
    assert apart(engine)["multi"][1]["idle_policy"] == "mixed"
