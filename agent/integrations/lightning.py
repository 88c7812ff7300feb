"""PyTorch Lightning's callback: a ``Trainer.fit`` as one joulestat job, its energy,
CO2e and cost logged through ``self.log`` to whatever loggers the Trainer has (MLflow,
W&B, TensorBoard, CSV, ...).

::

    from joulestat.integrations.lightning import JoulestatCallback

    trainer = L.Trainer(max_epochs=3, logger=WandbLogger(), callbacks=[JoulestatCallback()])

What it does (``lightning.pytorch.Callback`` hooks,
https://lightning.ai/docs/pytorch/stable/extensions/callbacks.html):

* ``on_fit_start``: registers the fit's job with the node's agent, or joins the
  ``joulestat run`` it runs under; a fit over several processes (DDP) is one job
  (:mod:`joulestat.integrations.training`). Its name is the ``name`` given, else the
  LightningModule's class name.
* ``on_train_batch_end``: counts ``step`` per optimizer step (``trainer.global_step``),
  ``sample`` per batch (its first dimension) and ``token`` (the attention mask's ones,
  else the input ids, for batches that are mappings holding them); on several
  processes rank 0's batches times their number. Then logs the job's figures
  (:func:`~joulestat.integrations.training.metrics_of`: ``joulestat/energy_j``, ...,
  asked of the agent at most once a second) with ``pl_module.log_dict(...,
  on_step=True, rank_zero_only=True)``, which the Trainer writes every
  ``log_every_n_steps``.
* ``on_train_end``: ends the job and writes its final, stored figures to every logger
  at the last step (``self.log`` is not allowed there), how its energy was obtained as
  hyperparameters (``joulestat.energy_is``, ``joulestat.job_id``), and its report
  (JSON and HTML) as an artifact to an ``MLFlowLogger``'s or ``WandbLogger``'s run.

Only global rank 0 counts and logs. Nothing here raises into training.
"""

from __future__ import annotations

import tempfile
from typing import Any

from joulestat.client.notice import warn_once
from joulestat.integrations.training import (
    SAMPLE,
    STEP,
    TOKEN,
    TrainingRun,
    as_number,
    batch_size,
    batch_tokens,
    metrics_of,
    report_files,
    torch_gather,
)

try:
    from lightning.pytorch import Callback
except ImportError as exc:  # the extra is not installed: say which
    raise ImportError("joulestat.integrations.lightning needs the lightning extra: "
                      "pip install 'joulestat[lightning]'") from exc

__all__ = ["JoulestatCallback"]


class JoulestatCallback(Callback):
    """A ``lightning.pytorch.Callback`` measuring a fit as one joulestat job; arguments
    as :class:`joulestat.integrations.huggingface.JoulestatCallback`'s."""

    def __init__(self, name: str | None = None, kind: str = "training",
                 labels: dict[str, str] | None = None, job_id: str | None = None,
                 agent_url: str | None = None, *, count_tokens: bool = True) -> None:
        self.run = TrainingRun(name, kind, labels, job_id, agent_url)
        self.count_tokens = count_tokens
        self._scale = 1
        self._steps = 0  # trainer.global_step counted so far

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        world = int(getattr(trainer, "world_size", 1) or 1)
        self.run.start(type(pl_module).__name__, int(getattr(trainer, "global_rank", 0)),
                       torch_gather() if world > 1 else None)
        self._scale, self._steps = world, int(trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if not self.run.counts:
            return
        try:
            self.run.count(STEP, trainer.global_step - self._steps)
            self._steps = int(trainer.global_step)
            samples = batch_size(batch)
            if samples:
                self.run.count(SAMPLE, samples * self._scale)
            if self.count_tokens:
                self.run.count(TOKEN, as_number(batch_tokens(batch)) * self._scale)
            metrics = self.run.metrics()
            if metrics:
                pl_module.log_dict(metrics, on_step=True, on_epoch=False,
                                   rank_zero_only=True, batch_size=samples or None)
        except Exception as exc:
            warn_once(("lightning", "batch", type(exc).__name__),
                      f"joulestat: counting or logging a batch failed ({exc!r}); "
                      "training goes on")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        try:
            final = self.run.end()
            if self.run.counts and final is not None:
                self._to_loggers(trainer, final)
        except Exception as exc:
            warn_once(("lightning", "end", type(exc).__name__),
                      f"joulestat: ending the fit's job failed ({exc!r})")

    def _to_loggers(self, trainer: Any, final: dict[str, Any]) -> None:
        """The final figures, parameters and report to each of the Trainer's loggers."""
        metrics, params = metrics_of(final), self.run.params()
        with tempfile.TemporaryDirectory(prefix="joulestat-report-") as directory:
            files = report_files(self.run.job, directory)
            for logger in trainer.loggers:
                try:
                    logger.log_metrics(metrics, step=trainer.global_step)
                    logger.log_hyperparams(params)
                    _attach(logger, files, final["job_id"])
                    logger.save()
                except Exception as exc:
                    warn_once(("lightning", "logger", type(logger).__name__),
                              f"joulestat: {type(logger).__name__} did not take the job's "
                              f"final figures ({exc!r})")


def _attach(logger: Any, files: list[str], job_id: str) -> None:
    """The report's files as an artifact of the logger's run, where it has artifacts:
    MLflow (``MlflowClient.log_artifact``) and W&B (``Run.log_artifact``)."""
    if not files:
        return
    kind = type(logger).__name__
    if kind == "MLFlowLogger":
        for path in files:
            logger.experiment.log_artifact(logger.run_id, path, "joulestat")
    elif kind == "WandbLogger":
        import wandb

        from joulestat.integrations.wandb import ARTIFACT_TYPE

        artifact = wandb.Artifact(f"joulestat-report-{job_id}", type=ARTIFACT_TYPE)
        for path in files:
            artifact.add_file(path)
        logger.experiment.log_artifact(artifact)
