"""Embedded mode's job lifecycle over a fake node (/proc and an empty /sys, so the CPU is
estimated; tests/helpers/embedded_node.py), through the job API it serves on a loopback
port: start, count, end; the final tick covers the job's last moments, the job is stored
final, the node's checkpoint is left alone, and the writer is flushed from the tick
loop, there being no store thread."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update

from joulestat.api.agent_client import AgentClient, AgentError
from joulestat.runtime.embedded import EmbeddedJob
from joulestat.store.durability import load_checkpoint
from joulestat.store.jobs import job_detail
from joulestat.store.schema import NODE_CHECKPOINTS, NODES, TICK_ENERGY
from tests.helpers.embedded_node import PID, EmbeddedNode, embedded_node


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNode]:
    with embedded_node(tmp_path, monkeypatch) as made:
        yield made


def test_a_job_is_measured_counted_and_stored_final(node: Any) -> None:
    proc, settings, engine = node
    # A long interval: the loop does not tick on its own, so the fake /proc is never
    # rewritten under a tick, and the one tick is end()'s final one.
    job = EmbeddedJob("bert", "training", {"team": "nlp"}, {PID}, job_id="j1",
                      settings=settings(interval=60.0)).start()
    try:
        assert job.api_url is not None
        client = AgentClient(job.api_url, job.api_token)
        assert client.health()["mode"] == "embedded"
        job.count("sample", 32)
        # A program of the job, through its API, with the token `run` hands its command
        # (JOULESTAT_JOB_TOKEN); without it the API refuses the count.
        with pytest.raises(AgentError) as refused:
            client.count("j1", "sample", 8)
        assert refused.value.status == 403
        client.remember("j1", job.job_token)
        client.count("j1", "sample", 8)
        other = client.register("helper", "other", job_id="j2")
        assert other["status"] == "running"
        proc.run(PID, cpu_s=2.0, busy_extra_s=2.0)  # half the node's busy time
        proc.write()
        time.sleep(0.05)  # the final tick covers some time
    finally:
        summary = job.end()
    assert summary["status"] == "ended" and summary["final"] is True
    assert summary["units"] == {"sample": 40.0}
    assert summary["total_energy_j"] > 0 and summary["energy_j"]["cpu"] > 0
    store = engine()
    stored = job_detail(store, "j1")
    assert stored.status == "ended" and stored.units == {"sample": 40.0}
    assert stored.total_j == pytest.approx(summary["total_energy_j"])
    assert job_detail(store, "j2").status == "ended"  # ended with the measurement
    assert load_checkpoint(store, "n1") is None  # the node's agent owns the checkpoint


def test_the_loop_flushes_the_store_while_the_job_runs(node: Any) -> None:
    _proc, settings, engine = node
    job = EmbeddedJob("bert", "inference", None, {PID}, job_id="j1",
                      settings=settings(interval=0.05, flush_interval=0.2)).start()
    try:
        store = engine()
        deadline = time.monotonic() + 10.0
        rows = 0
        while not rows and time.monotonic() < deadline:
            time.sleep(0.05)
            with store.connect() as connection:
                rows = connection.execute(select(func.count()).select_from(TICK_ENERGY)
                                          ).scalar_one()
        assert rows > 0, "no tick reached the store before the job ended"
    finally:
        summary = job.end()
    assert summary["final"] is True


def test_runs_one_after_another_where_an_agent_left_its_checkpoint(node: Any) -> None:
    proc, settings, engine = node
    # A first run, which gives the node's lease up when it ends; then a checkpoint, as
    # an agent that ran on this node and stopped leaves one. A second run, another
    # process, takes the node over from the first and used to fail naming it (a lease
    # given up has no end to print).
    for job_id in ("first", "second"):
        job = EmbeddedJob("bert", "training", {}, {PID}, job_id=job_id,
                          settings=settings(interval=60.0)).start()
        summary = job.end()
        assert summary["status"] == "ended" and summary["final"] is True
        if job_id == "first":
            with engine().begin() as connection:
                assert connection.execute(select(NODES.c.writer_mode, NODES.c.lease_until_s)
                                          ).one() == ("embedded", None)
                connection.execute(update(NODES).values(  # the first run's own process
                    writer_id=NODES.c.writer_id + "0"))
                connection.execute(insert(NODE_CHECKPOINTS).values(
                    node="n1", saved_s=time.time(), boot_id="another-boot", state="{}"))
    store = engine()
    assert [job_detail(store, j).status for j in ("first", "second")] == ["ended", "ended"]
