"""MLflow: a job's figures as metrics, how they were obtained as tags and (final)
parameters, and its report as artifacts, for a custom training loop (the Trainer and
Lightning callbacks log through their own MLflow loggers).

::

    import mlflow
    from joulestat import track
    from joulestat.integrations import mlflow as joulestat_mlflow

    with mlflow.start_run(), track("bert-finetune") as job:
        for step, batch in enumerate(loader):
            ...
            job.count("step"); job.count("sample", len(batch))
            if step % 50 == 0:
                joulestat_mlflow.log_figures(job, step=step)
        joulestat_mlflow.log_report(job)

Metric names are :func:`joulestat.integrations.training.metrics_of`'s
(``joulestat/energy_j``, ``joulestat/energy_j_per_step``, ...); the figures are the
agent's (:meth:`TrackedJob.figures`), never computed here. Each call logs to the active
run (MLflow's ``mlflow.active_run()``), and none raises: without an active run, or with
MLflow failing, it says so once on the ``joulestat`` logger and returns False.
MLflow's API: https://mlflow.org/docs/latest/python_api/mlflow.html (``log_metrics``,
``log_params``, ``log_artifact``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from typing import Any

from joulestat.client.context import enclosing_job
from joulestat.client.notice import warn_once
from joulestat.client.tracking import TrackedJob
from joulestat.integrations.run_trackers import (
    ENV_RUN_TRACKERS,
    Tracker,
    TrackerRun,
    hand_over,
)
from joulestat.integrations.training import (
    METRIC_PREFIX,
    metrics_of,
    params_of,
    report_files,
    run_params,
)

__all__ = ["log_figures", "log_final", "log_report"]


def _mlflow() -> Any | None:
    try:
        import mlflow
    except ImportError:
        warn_once(("mlflow", "missing"), "joulestat: MLflow is not installed "
                  "(pip install 'joulestat[mlflow]'); nothing is logged to it")
        return None
    if mlflow.active_run() is None:
        warn_once(("mlflow", "no run"), "joulestat: no active MLflow run "
                  "(mlflow.start_run()); the job's figures are not logged to MLflow")
        return None
    return mlflow


def log_figures(job: TrackedJob, step: int | None = None,
                figures: dict[str, Any] | None = None) -> bool:
    """Log the job's figures so far at ``step`` (``figures``: ones already read), and
    how they were obtained as tags (``joulestat.energy_is``, ...), which follow the run
    while it goes; True when logged."""
    mlflow = _mlflow()
    if mlflow is None:
        return False
    figures = figures if figures is not None else job.figures()
    if figures is None:
        return False
    try:
        mlflow.log_metrics(metrics_of(figures), step=step)
        mlflow.set_tags(params_of(figures, job))
    except Exception as exc:
        warn_once(("mlflow", "log", type(exc).__name__),
                  f"joulestat: logging figures to MLflow failed ({exc!r})")
        return False
    return True


def log_report(job: TrackedJob, artifact_path: str = "joulestat") -> bool:
    """Attach the job's report (JSON and HTML) to the active run under
    ``artifact_path``, and how its energy was obtained as parameters
    (``joulestat.energy_is``, ``joulestat.job_id``, ``joulestat.measured_by``): call it
    once the job ended, so both are final (MLflow never changes a parameter).

    Inside a ``joulestat run`` job (joined, ``JOULESTAT_RUN_TRACKERS`` set) the job
    ends after this program does: the run is handed over instead, and the wrapper logs
    the final figures, parameters and report to it once the job has ended
    (:mod:`joulestat.integrations.run_trackers`)."""
    mlflow = _mlflow()
    if mlflow is None:
        return False
    if _handed_over(mlflow, job, artifact_path):
        return True
    with tempfile.TemporaryDirectory(prefix="joulestat-report-") as directory:
        files = report_files(job, directory)
        try:
            _log_new_params(mlflow, params_of(job.figures() if files else None, job))
            for path in files:
                mlflow.log_artifact(path, artifact_path=artifact_path)
        except Exception as exc:
            warn_once(("mlflow", "artifact", type(exc).__name__),
                      f"joulestat: attaching the report to MLflow failed ({exc!r})")
            return False
    return bool(files)


def _handed_over(mlflow: Any, job: TrackedJob, artifact_path: str) -> bool:
    """Leave the active run to the enclosing ``joulestat run`` when ``job`` is its."""
    enclosing = enclosing_job()
    if not (job.joined and enclosing is not None and enclosing.job_id == job.id
            and job.mode is not None):
        return False
    try:
        run = TrackerRun(Tracker.MLFLOW, job.id, mlflow.active_run().info.run_id,
                         mlflow.get_tracking_uri(), str(job.mode), artifact_path)
        return hand_over(run)
    except Exception as exc:
        warn_once(("mlflow", "hand over", type(exc).__name__),
                  f"joulestat: the MLflow run could not be handed to `joulestat run` "
                  f"through {ENV_RUN_TRACKERS} ({exc!r}); its report is attached now, "
                  "with the job still running")
        return False


def log_final(run: TrackerRun, figures: Mapping[str, Any], files: list[str]) -> int:
    """Log an ended job's final ``figures`` to ``run`` (it may be finished) at the last
    step it has figures at, with how its energy was obtained as parameters not yet set
    and ``files`` (its report) as artifacts; the step. Raises what MLflow raises: the
    ``joulestat run`` wrapper calls it, after its command exited
    (:func:`joulestat.integrations.run_trackers.deliver`). MLflow shows a metric's
    latest value by step, then time, so these become the run's values."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=run.tracking_uri)
    history = client.get_metric_history(run.run_id, METRIC_PREFIX + "energy_j")
    step = max((metric.step for metric in history), default=0)
    now_ms = int(time.time() * 1000)
    logged = client.get_run(run.run_id).data.params
    params = run_params(figures, run.job_id, run.measured_by)
    client.log_batch(run.run_id,
                     metrics=[Metric(key, value, now_ms, step)
                              for key, value in metrics_of(figures).items()],
                     params=[Param(key, value) for key, value in params.items()
                             if key not in logged])
    for path in files:
        client.log_artifact(run.run_id, path, run.artifact_path)
    return step


def _log_new_params(mlflow: Any, params: dict[str, str]) -> None:
    """Parameters not yet on the run: MLflow refuses to change one, and how a job's
    energy was obtained can change as it runs (the final is in its report)."""
    run = mlflow.active_run()
    logged = mlflow.get_run(run.info.run_id).data.params if run is not None else {}
    new = {k: v for k, v in params.items() if k not in logged}
    if new:
        mlflow.log_params(new)
