"""Agent labels in the store, on SQLite and on PostgreSQL (``jsonb`` in the upsert, as
``json_patch`` on SQLite): kept apart from the user's labels, never found by a label
filter, read back after a restart, merged key by key across nodes (two idle policies make
``mixed``); and migration 0007, which moved `joulestat run`'s ``cpu_source`` out of the
labels."""

from __future__ import annotations

from joulestat.store import migrate
from joulestat.store.durability import load_running_jobs
from joulestat.store.jobs import JobFilter, job_totals
from tests.helpers.agent_labels_store import (
    RUN_CGROUP,
    apart,
    job,
    raw_labels,
)
from tests.helpers.store_jobs import (
    LOADER,
    T0,
    TRAINER,
    downgrade,
    feed,
    part_figures,
    save_jobs_before_0007,
    writer_for,
    written_before_0014,
)
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
    [restored] = [j for j in load_running_jobs(engine, TRAINER.node) if j.id == "multi"]
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


@written_before_0014
def test_migration_0007_moves_runs_cpu_source_out_of_the_labels(empty_store: Store) -> None:
    """At 0006, jobs whose labels hold the ``cpu_source`` that `joulestat run` wrote, or a
    user's own; up to the head, run's moves to the agent labels (figures unchanged), the
    user's stays; down to 0006 it goes back among the labels (unless a user label of
    that name was given meanwhile); up again, moved again."""
    engine = empty_store.engine
    assert migrate.upgrade(engine, "0006") == "0006"
    writer = writer_for(engine)
    before = {"by-run": {"team": "nlp", "cpu_source": RUN_CGROUP},
              "by-tree": {"cpu_source": "process tree"},
              "users-own": {"cpu_source": "spot-instances", "team": "cv"},
              "plain": {}}
    save_jobs_before_0007(engine, [job(i, labels, ended_s=T0 + 60)
                                   for i, labels in before.items()])
    feed(writer, T0, 60, tuple(before), units={"sample": 2.0})
    assert writer.flush()
    figures = part_figures(engine)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    moved = {"by-run": ({"team": "nlp"}, {"cpu_source": RUN_CGROUP}),
             "by-tree": ({}, {"cpu_source": "process tree"}),
             "users-own": ({"cpu_source": "spot-instances", "team": "cv"}, {}),
             "plain": ({}, {})}
    assert apart(engine) == moved
    assert part_figures(engine) == figures

    downgrade(engine, "0006")
    assert raw_labels(engine) == before
    assert part_figures(engine) == figures
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert apart(engine) == moved

    # After the upgrade, a user gives "by-tree" a cpu_source label of their own: going
    # down, the user's stays and the agent's has no place.
    writer = writer_for(engine)
    writer.save_job(job("by-tree", {"cpu_source": "mine"}, {"idle_policy": "share"},
                        ended_s=T0 + 60))
    assert writer.flush()
    assert apart(engine)["by-tree"] == ({"cpu_source": "mine"},
                                        {"cpu_source": "process tree", "idle_policy": "share"})
    downgrade(engine, "0006")
    assert raw_labels(engine)["by-tree"] == {"cpu_source": "mine"}
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION

