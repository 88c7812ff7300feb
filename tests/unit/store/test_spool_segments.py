"""A spool segment this joulestat cannot write back as it is, such as one spooled during
joulestat's development before its first release (a tick of component ``gpu``, a job row
without ``agent_labels``) or one lacking a field, is refused when the spool is replayed:
none of its rows are written, the file is set aside as ``<seq>.bad`` byte for byte, and
the error names the file and the field. Segments written and replayed through a real
store are in tests/store/test_spool.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joulestat.core.records import JobRecord, NodeInfo
from joulestat.store.durability import Outage, Spool
from joulestat.store.row_queue import RowQueue
from joulestat.store.rows import SHARE, TICK, UNIT, PendingJobs, RowBuffer

NODE = NodeInfo("node-a", "g5.xlarge", "us-east-1", "Xeon", "0.1.0")
Segment = dict[str, Any]


def spooled(directory: Path) -> Path:
    """One segment as this agent spools it: an accelerator's tick, a job's share and
    units, the job's rows and a checkpoint."""
    batch = RowBuffer()
    batch.append(2000, 1000, 50.0, 0.0, (TICK, "", "accelerator", "gpu0", "nvml_energy"))
    batch.append(2000, 1000, 30.0, 10.0, (SHARE, "j", "accelerator", "gpu0", "nvml_energy"))
    batch.append(2000, 2000, 7.0, 0.0, (UNIT, "j", "token", "", ""))
    pending = PendingJobs()
    pending.save_job(JobRecord(id="j", name="train", kind="training", labels={"team": "nlp"},
                               pids=frozenset({1}), started_s=1.0,
                               agent_labels={"cpu_source": "process tree"}), NODE)
    pending.save_checkpoint({"mono_s": 1.0}, "boot", 2.0)
    Spool(directory).append(batch, pending)
    [path] = directory.glob("*.json")
    return path


def replayed(directory: Path) -> list[tuple[RowBuffer, PendingJobs]]:
    """What the writer's replay writes back from ``directory``, one batch a segment."""
    written: list[tuple[RowBuffer, PendingJobs]] = []

    def write(batch: RowBuffer, pending: PendingJobs) -> tuple[int, int]:
        written.append((batch, pending))
        return len(batch), 0

    spool = Spool(directory)
    Outage("sqlite://", RowQueue(NODE, 1000, lambda: "test"), spool).replay(write)
    return written


def test_a_segment_as_this_agent_spools_it_is_written_back(tmp_path: Path) -> None:
    """The segment the refusals below start from is a good one."""
    spooled(tmp_path)
    [(batch, pending)] = replayed(tmp_path)
    assert len(batch) == 3 and set(pending.jobs) == {"j"}
    assert not list(tmp_path.glob("*.bad")) and not list(tmp_path.glob("*.json"))


def _without_agent_labels(segment: Segment) -> None:
    del segment["jobs"]["j"][0]["agent_labels"]


def _gpu_tick(segment: Segment) -> None:
    segment["keys"][0][2] = "gpu"


def _gpu_share(segment: Segment) -> None:
    segment["keys"][1][2] = "gpu"


def _without_jobs(segment: Segment) -> None:
    del segment["jobs"]


@pytest.mark.parametrize(("change", "field"), [
    (_without_agent_labels, "agent_labels"),  # a job row from before agent labels
    (_gpu_tick, "'gpu'"),  # the accelerator's name before the first release
    (_gpu_share, "'gpu'"),
    (_without_jobs, "'jobs'"),
])
def test_a_segment_this_joulestat_cannot_write_back_is_set_aside_unwritten(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        change: Callable[[Segment], None], field: str) -> None:
    path = spooled(tmp_path)
    segment = json.loads(path.read_text())
    change(segment)
    path.write_text(json.dumps(segment))
    original = path.read_bytes()
    with caplog.at_level(logging.ERROR, logger="joulestat.store.durability"):
        assert replayed(tmp_path) == []  # nothing written
    assert not path.exists()
    assert path.with_suffix(".bad").read_bytes() == original  # kept, never deleted
    [error] = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert str(path) in error and field in error, error
    assert replayed(tmp_path) == []  # never retried
