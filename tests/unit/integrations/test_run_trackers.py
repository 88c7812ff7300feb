"""The hand-over file between a `joulestat run` program and its wrapper: what the
program writes is read back as it was, once per run; what is not a tracker run is
said and skipped, never raised (the program wrote it, the wrapper must still exit
with the command's code)."""

from __future__ import annotations

import json
import logging

import pytest

from joulestat.integrations.run_trackers import (
    ENV_RUN_TRACKERS,
    Tracker,
    TrackerRun,
    hand_over,
    handed_over,
)


def _run(job_id: str = "j1", run_id: str = "r1") -> TrackerRun:
    return TrackerRun(Tracker.MLFLOW, job_id, run_id, "sqlite:///m.db", "agent")


def test_runs_handed_over_come_back_once_for_their_job(tmp_path):
    path = tmp_path / "trackers.jsonl"
    env = {"JOULESTAT_RUN_TRACKERS": str(path)}  # the name docs/jobs.md gives
    for run in (_run(), _run(), _run(run_id="r2"), _run(job_id="other")):
        assert hand_over(run, env) is True
    assert handed_over(path, "j1") == [_run(), _run(run_id="r2")]
    assert handed_over(tmp_path / "none.jsonl", "j1") == []


def test_outside_joulestat_run_nothing_is_handed_over(tmp_path):
    assert hand_over(_run(), {}) is False


def test_lines_that_are_no_tracker_run_are_said_and_skipped(tmp_path, caplog):
    path = tmp_path / "trackers.jsonl"
    good = json.dumps({"tracker": "mlflow", "job_id": "j1", "run_id": "r1",
                       "tracking_uri": "sqlite:///m.db", "measured_by": "agent"})
    path.write_text("\n".join(["not json", "[1]", json.dumps({"tracker": "mlflow"}),
                               good.replace('"mlflow"', '"tensorboard"'), good]) + "\n")
    with caplog.at_level(logging.WARNING, "joulestat"):
        assert handed_over(path, "j1") == [_run()]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 4 and all(ENV_RUN_TRACKERS in m for m in said)
    assert "job_id, run_id, tracking_uri, measured_by" in said[2]


def test_a_bad_line_names_what_is_wrong():
    with pytest.raises(ValueError, match="run_id"):
        TrackerRun.parse(json.dumps({"tracker": "mlflow", "job_id": "j", "run_id": 3,
                                     "tracking_uri": "u", "measured_by": "agent"}))
