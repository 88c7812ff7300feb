"""Embedded mode's job lifecycle over a fake node (/proc and an empty /sys, so the CPU is
estimated): start, count, end; the final tick covers the job's last moments, the job
is stored final, the node's checkpoint is left alone, and the writer is flushed from
the tick loop, there being no store thread."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from joulestat.api.agent_client import AgentClient, AgentError
from joulestat.attribution.validation import JobError
from joulestat.core.errors import ConfigError
from joulestat.runtime.assembly import PipelineSettings
from joulestat.runtime.embedded import EMBEDDED_OPTIONS, EmbeddedJob, embedded_settings
from joulestat.runtime.settings import resolve
from joulestat.store.durability import load_checkpoint
from joulestat.store.engine import make_engine
from joulestat.store.jobs import job_detail
from joulestat.store.schema import TICK_ENERGY
from tests.fakes.procfs import FakeProc

PID = 4242


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for module in ("pynvml", "amdsmi", "pyhlml"):  # no accelerator library
        monkeypatch.setitem(sys.modules, module, None)
    proc = FakeProc(tmp_path / "proc")
    (proc.root / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU\n\n")
    (proc.root / "meminfo").write_text("MemTotal:       16384000 kB\n")
    proc.add(PID, start_s=1000.0)
    proc.write()
    (tmp_path / "sys").mkdir()
    db_url = f"sqlite:///{tmp_path / 'store.db'}"

    def settings(**overrides: Any) -> PipelineSettings:
        values = {"sysfs_root": str(tmp_path / "sys"), "procfs_root": str(proc.root),
                  "db": db_url, "node": "n1", "instance_type": "test.xlarge",
                  "region": "us-east-1", "cloud_metadata": False, "nvml": False,
                  **overrides}
        return embedded_settings(resolve(values, EMBEDDED_OPTIONS, env={}))

    engines: list[Any] = []

    def engine() -> Any:
        engines.append(make_engine(db_url))
        return engines[-1]

    yield proc, settings, engine
    for made in engines:
        made.dispose()


def test_invalid_input_fails_before_anything_is_opened(node: Any) -> None:
    _proc, settings, _engine = node
    with pytest.raises(JobError, match="name"):
        EmbeddedJob("a\\b", "training", None, {PID}, settings=settings())
    with pytest.raises(JobError, match="kind"):
        EmbeddedJob("bert", "nap", None, {PID}, settings=settings())


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


def test_a_store_it_cannot_open_raises_with_nothing_left_open(node: Any, tmp_path: Path
                                                              ) -> None:
    _proc, settings, _engine = node
    before = {thread.ident for thread in threading.enumerate()}
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the store's directory should be")
    job = EmbeddedJob("bert", "training", None, {PID}, job_id="j1",
                      settings=settings(db=f"sqlite:///{blocked / 'store.db'}"))
    with pytest.raises(ConfigError, match="cannot open the store"):
        job.start()
    assert job.api_url is None
    # No tick loop, no API thread outlives the failed start: the client goes on without it.
    left = [t.name for t in threading.enumerate() if t.ident not in before]
    assert left == []
