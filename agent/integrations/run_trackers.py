"""The tracker runs a ``joulestat run`` program logged to, given their job's final figures
by the wrapper once the job has ended.

Why: under ``joulestat run -- python train.py`` the job is the wrapper's. It ends when
the command exits, after training (saving the model, the interpreter's exit), so the
figures a callback logs at the end of training are the job's so far, not its final ones
(a Trainer measured 993 J where the store ended at 1,039 J), and the report it attaches
says "running". Only the wrapper sees the end. So a callback or helper inside a
``joulestat run`` job does not attach the report itself: it hands over the tracker run
it logs to (``hand_over``: one JSON line in the file ``JOULESTAT_RUN_TRACKERS`` names,
which the wrapper made in a private directory), and the wrapper, once the job's last
tick is stored, logs the final figures to that run at its last step, the report as an
artifact and how the energy was obtained as parameters (``joulestat.cli.run``, through
:func:`joulestat.integrations.mlflow.log_final`): what ``joulestat report`` gives for
the job from then on.

MLflow only: a finished MLflow run takes metrics, parameters and artifacts from any
process through ``MlflowClient`` (https://mlflow.org/docs/latest/python_api/mlflow.client.html).
A W&B run cannot be written once its process finished it without resuming it online,
so W&B gets the end-of-training figures and report, as before.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["ENV_RUN_TRACKERS", "Tracker", "TrackerRun", "hand_over", "handed_over"]

ENV_RUN_TRACKERS = "JOULESTAT_RUN_TRACKERS"


class Tracker(StrEnum):
    MLFLOW = "mlflow"


@dataclass(frozen=True, slots=True)
class TrackerRun:
    """One tracker run a job's program logged to, as the wrapper needs it."""

    tracker: Tracker
    job_id: str
    run_id: str
    tracking_uri: str
    measured_by: str  # the job's measurer, as the program saw it: agent or embedded
    artifact_path: str = "joulestat"

    @classmethod
    def parse(cls, line: str) -> TrackerRun:
        """A line of the hand-over file; ValueError naming what is wrong with it."""
        fields = json.loads(line)
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        wanted = ("tracker", "job_id", "run_id", "tracking_uri", "measured_by")
        missing = [name for name in wanted if not isinstance(fields.get(name), str)]
        if missing:
            raise ValueError(f"missing or not text: {', '.join(missing)}")
        return cls(Tracker(fields["tracker"]), fields["job_id"], fields["run_id"],
                   fields["tracking_uri"], fields["measured_by"],
                   str(fields.get("artifact_path") or "joulestat"))


def hand_over(run: TrackerRun, env: Mapping[str, str] | None = None) -> bool:
    """Leave ``run`` to the enclosing ``joulestat run`` (True), or False where the
    environment names no hand-over file (not under a wrapper that delivers)."""
    path = (os.environ if env is None else env).get(ENV_RUN_TRACKERS, "")
    if not path:
        return False
    line = json.dumps({**asdict(run), "tracker": str(run.tracker)}) + "\n"
    with open(path, "a", encoding="utf-8") as handed:  # one write: lines never interleave
        handed.write(line)
    return True


def handed_over(path: Path, job_id: str) -> list[TrackerRun]:
    """The tracker runs handed over for ``job_id``, each once; a line that is not one
    is said and skipped (the program wrote it, not the wrapper)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    runs: list[TrackerRun] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            run = TrackerRun.parse(line)
        except ValueError as exc:  # json.JSONDecodeError is one
            log.warning("%s line %d is not a tracker run (%s); skipped", ENV_RUN_TRACKERS,
                        number, exc)
            continue
        if run.job_id == job_id and run not in runs:
            runs.append(run)
    return runs
