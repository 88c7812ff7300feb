"""Agent labels in the store on any database: kept apart from labels, merged by nodes
(two idle policies make ``mixed``), and migration 0007 moving ``cpu_source`` out of the
labels and back.

The ``check_*`` scenarios take an engine on an empty database; they run on SQLite in
tests/unit/test_agent_labels.py and on a real PostgreSQL in
tests/integration/test_store_postgres.py. Jobs are written through the agent's own
writer (at the head) or as the writer before 0007 wrote them (:func:`~tests.helpers.
store_jobs.save_jobs_before_0007`); everything is read back through the store's reads.
"""

from __future__ import annotations

import json

from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.attribution.registry import Job
from joulestat.store import migrate
from joulestat.store.durability import load_running_jobs
from joulestat.store.jobs import JobFilter, job_detail, job_totals, list_jobs
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

RUN_CGROUP = "cgroup v2 /user.slice/joulestat-job-by-run"


def job(job_id: str, labels: dict[str, str], agent_labels: dict[str, str] | None = None,
        ended_s: float | None = None) -> Job:
    return Job(id=job_id, name=f"name-{job_id}", kind="training", labels=dict(labels),
               pids={100}, started_s=T0, origin="run", ended_s=ended_s,
               agent_labels=dict(agent_labels or {}))


def apart(engine: Engine) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """(labels, agent labels) per job, as every read of the store gives them (they agree)."""
    listed = {s.id: (s.labels, s.agent_labels) for s in list_jobs(engine)}
    totals = {t.id: (t.labels, t.agent_labels) for t in job_totals(engine)}
    details = {i: (d.labels, d.agent_labels)
               for i in listed for d in [job_detail(engine, i)]}
    assert listed == totals == details
    return listed


def raw_labels(engine: Engine) -> dict[str, dict[str, str]]:
    """Labels per job with plain SQL, at any revision."""
    with engine.connect() as connection:
        return {i: json.loads(labels) for i, labels in connection.execute(
            text("SELECT id, labels FROM jobs"))}


def check_agent_labels_kept_apart_and_merged(engine: Engine) -> None:
    """A job's agent labels are stored and read apart from its labels, a filter by label
    key never finds them, a restart reads them back, and nodes reporting one job merge
    them key by key, except that two idle policies make ``mixed``, for good."""
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
def check_migration_moves_cpu_source(engine: Engine) -> None:
    """At 0006, jobs whose labels hold the ``cpu_source`` that `joulestat run` wrote, or a
    user's own; up to the head, run's moves to the agent labels (figures unchanged), the
    user's stays; down to 0006 it goes back among the labels (unless a user label of
    that name was given meanwhile); up again, moved again."""
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
