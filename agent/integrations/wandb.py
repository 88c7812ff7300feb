"""Weights & Biases: a job's figures as metrics, how they were obtained in the run's
config, and its report as an artifact, for a custom training loop (the Trainer and
Lightning callbacks log through their own W&B loggers).

::

    import wandb
    from joulestat import track
    from joulestat.integrations import wandb as joulestat_wandb

    with wandb.init(project="bert"), track("bert-finetune") as job:
        for step, batch in enumerate(loader):
            ...
            job.count("step"); job.count("sample", len(batch))
            if step % 50 == 0:
                joulestat_wandb.log_figures(job, step=step)
        joulestat_wandb.log_report(job)

Names as in :mod:`joulestat.integrations.mlflow`; each call logs to ``wandb.run`` (the
run ``wandb.init`` made, offline mode included) and none raises: without a run, or
with W&B failing, it says so once on the ``joulestat`` logger and returns False.
W&B's API: https://docs.wandb.ai/ref/python/ (``Run.log``, ``Run.config.update``,
``Artifact.add_file``, ``Run.log_artifact``).
"""

from __future__ import annotations

import tempfile
from typing import Any

from joulestat.client.notice import warn_once
from joulestat.client.tracking import TrackedJob
from joulestat.integrations.training import metrics_of, params_of, report_files

__all__ = ["log_figures", "log_report"]

ARTIFACT_TYPE = "joulestat-report"


def _run() -> Any | None:
    try:
        import wandb
    except ImportError:
        warn_once(("wandb", "missing"), "joulestat: wandb is not installed "
                  "(pip install 'joulestat[wandb]'); nothing is logged to it")
        return None
    if wandb.run is None:
        warn_once(("wandb", "no run"), "joulestat: no W&B run (wandb.init()); the job's "
                  "figures are not logged to W&B")
        return None
    return wandb.run


def log_figures(job: TrackedJob, step: int | None = None,
                figures: dict[str, Any] | None = None) -> bool:
    """Log the job's figures so far (at ``step`` when given: W&B wants it never to go
    back), and how they were obtained into the run's config; True when logged."""
    run = _run()
    if run is None:
        return False
    figures = figures if figures is not None else job.figures()
    if figures is None:
        return False
    try:
        run.log(metrics_of(figures), step=step)
        run.config.update(params_of(figures, job), allow_val_change=True)
    except Exception as exc:
        warn_once(("wandb", "log", type(exc).__name__),
                  f"joulestat: logging figures to W&B failed ({exc!r})")
        return False
    return True


def log_report(job: TrackedJob) -> bool:
    """Attach the job's report (JSON and HTML) to the run as an artifact of type
    ``joulestat-report``, and how its energy was obtained to its config; after the
    job ended, both are final."""
    run = _run()
    if run is None:
        return False
    import wandb

    with tempfile.TemporaryDirectory(prefix="joulestat-report-") as directory:
        files = report_files(job, directory)
        if not files:
            return False
        try:
            run.config.update(params_of(job.figures(), job), allow_val_change=True)
            artifact = wandb.Artifact(f"joulestat-report-{job.id}", type=ARTIFACT_TYPE)
            for path in files:
                artifact.add_file(path)
            run.log_artifact(artifact)  # add_file staged a copy: the folder may go
        except Exception as exc:
            warn_once(("wandb", "artifact", type(exc).__name__),
                      f"joulestat: attaching the report to W&B failed ({exc!r})")
            return False
    return True
