"""The Hugging Face ``Trainer``'s callback: its training run as one joulestat job, and
the job's energy, CO2e and cost in the Trainer's logs, so they reach whatever
``report_to`` names (MLflow, W&B, TensorBoard, ...).

::

    from joulestat.integrations.huggingface import JoulestatCallback

    trainer = Trainer(model=model, args=args, train_dataset=train,
                      callbacks=[JoulestatCallback()])

What it does (``TrainerCallback`` events, https://huggingface.co/docs/transformers/main_classes/callback):

* ``on_train_begin``: registers the run's job with the node's agent, or joins the
  ``joulestat run`` it runs under; a run of several processes is one job
  (:mod:`joulestat.integrations.training`). The job's name is the ``name`` given, else
  ``args.run_name``, else the model's name.
* Counting: ``step`` per optimizer step; ``sample`` and ``token`` per training
  batch, read from the model's inputs by a forward pre-hook (the batch's first
  dimension; the attention mask's ones, else every input id); on several processes,
  rank 0's times the number of processes (equal batches per rank, as the Trainer's
  distributed sampler makes them), or the Trainer's own ``num_input_tokens_seen`` for
  tokens when ``include_num_input_tokens_seen`` is on (gathered over the ranks).
* ``on_log``: adds ``joulestat/energy_j``, ``joulestat/co2e_g``,
  ``joulestat/cost_usd``, the same per step, sample and token, and
  ``joulestat/measured_share`` (:func:`~joulestat.integrations.training.metrics_of`)
  to the logs, asked of the agent (the numbers ``joulestat report`` gives at that
  moment, at most once a second). The callback puts itself first among the Trainer's
  callbacks, so the loggers ``report_to`` added see them, and into
  ``trainer.state.log_history``. At the end of training (the log with
  ``train_runtime``) the job ends and the figures logged are its final, stored ones.
* ``on_train_end``: to an active MLflow run or W&B run that ``report_to`` names, the
  job's id and how its energy was obtained as parameters (``joulestat.energy_is``:
  measured or estimated, and from what), and its report (JSON and HTML) as artifacts.

Only global rank 0 counts and logs. Nothing here raises into training: a failure is
said once on the ``joulestat`` logger.
"""

from __future__ import annotations

import inspect
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
    torch_gather,
)

try:
    from transformers import TrainerCallback
except ImportError as exc:  # the extra is not installed: say which
    raise ImportError("joulestat.integrations.huggingface needs the hf extra: "
                      "pip install 'joulestat[hf]'") from exc

__all__ = ["JoulestatCallback"]

# The log the Trainer makes once training is over (speed_metrics("train", ...)).
FINAL_LOG_KEY = "train_runtime"


class JoulestatCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` measuring the run as one joulestat job.

    ``name``, ``kind``, ``labels``, ``job_id``, ``agent_url``: as :func:`joulestat.track`
    takes them (``job_id``: the id of a job of several nodes; under ``joulestat run`` the
    run's job is joined). ``count_tokens``: count tokens from the inputs.
    """

    def __init__(self, name: str | None = None, kind: str = "training",
                 labels: dict[str, str] | None = None, job_id: str | None = None,
                 agent_url: str | None = None, *, count_tokens: bool = True) -> None:
        self.run = TrainingRun(name, kind, labels, job_id, agent_url)
        self.count_tokens = count_tokens
        self._hook: Any = None
        self._scale = 1  # processes whose batches rank 0's stand for
        self._tokens: Any = 0  # counted, not yet sent: a tensor stays on its device
        self._tokens_seen = 0  # the Trainer's num_input_tokens_seen, when it counts
        self._trainer_counts_tokens = False
        self._ended = False
        self._final: dict[str, Any] | None = None

    # -- order: first, so report_to's loggers see what on_log adds --------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self._go_first()
        except Exception as exc:
            warn_once(("hf", "order", type(exc).__name__),
                      f"joulestat: could not put JoulestatCallback first ({exc!r}); "
                      "report_to's loggers may not see its figures")

    def _go_first(self) -> None:
        """Move this callback to the front of the Trainer's ``CallbackHandler``: the
        handler calls callbacks in order with the same ``logs`` dict, and it put
        ``report_to``'s loggers before the callbacks passed to the Trainer. The handler
        is the caller of this event (``CallbackHandler.call_event``); the Trainer has
        no public way to reorder callbacks."""
        frame = inspect.currentframe()
        handler = None
        while frame is not None and handler is None:
            candidate = frame.f_locals.get("self")
            if type(candidate).__name__ == "CallbackHandler" and \
                    isinstance(getattr(candidate, "callbacks", None), list):
                handler = candidate
            frame = frame.f_back
        del frame
        if handler is None or self not in handler.callbacks:
            raise LookupError("the Trainer's CallbackHandler was not found")
        handler.callbacks.remove(self)
        handler.callbacks.insert(0, self)

    # -- the run ------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        self._ended, self._final = False, None
        world = int(getattr(args, "world_size", 1) or 1)
        self.run.start(self._default_name(args, model), int(args.process_index),
                       torch_gather() if world > 1 else None)
        if not self.run.counts:
            return
        self._scale = world
        self._trainer_counts_tokens = getattr(args, "include_num_input_tokens_seen",
                                              "no") not in (False, "no", None)
        self._tokens_seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            try:
                self._hook = model.register_forward_pre_hook(self._on_forward,
                                                             with_kwargs=True)
            except Exception as exc:
                warn_once(("hf", "hook", type(exc).__name__),
                          f"joulestat: cannot count samples from the model's inputs "
                          f"({exc!r}); only steps are counted")

    @staticmethod
    def _default_name(args: Any, model: Any) -> str:
        run_name = getattr(args, "run_name", None)
        if run_name:
            return str(run_name)
        config = getattr(model, "config", None)
        return str(getattr(config, "_name_or_path", "") or getattr(config, "model_type", "")
                   or type(model).__name__ or "training")

    def _on_forward(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> None:
        """A training batch: its samples and tokens (never an evaluation's)."""
        try:
            if not getattr(module, "training", False):
                return
            samples = batch_size(kwargs) or batch_size(args)
            if samples is None:
                return
            self.run.count(SAMPLE, samples * self._scale)
            if self.count_tokens and not self._trainer_counts_tokens:
                self._tokens = self._tokens + batch_tokens(kwargs)
        except Exception as exc:
            warn_once(("hf", "count", type(exc).__name__),
                      f"joulestat: counting a batch failed ({exc!r}); training goes on")

    def _send_tokens(self, state: Any) -> None:
        if not self.count_tokens:
            return
        if self._trainer_counts_tokens:
            seen = int(getattr(state, "num_input_tokens_seen", 0) or 0)
            self.run.count(TOKEN, seen - self._tokens_seen)
            self._tokens_seen = seen
            return
        tokens, self._tokens = self._tokens, 0
        self.run.count(TOKEN, as_number(tokens) * self._scale)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.run.count(STEP, 1)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if not self.run.counts or logs is None or self._ended:
            return
        try:
            self._send_tokens(state)
            if FINAL_LOG_KEY in logs:  # training is over: the job's final figures
                self._end()
                metrics = metrics_of(self._final) if self._final is not None else {}
            else:
                metrics = self.run.metrics()
            logs.update(metrics)
            history = getattr(state, "log_history", None)
            if history and history[-1].get("step") == state.global_step:
                history[-1].update(metrics)  # the Trainer's copy of these logs
        except Exception as exc:
            warn_once(("hf", "log", type(exc).__name__),
                      f"joulestat: adding figures to the logs failed ({exc!r})")

    def _end(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._ended = True
        self._final = self.run.end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            if not self._ended:
                self._send_tokens(state)
                self._end()
            if self.run.counts:
                _to_trackers(args, self.run)
        except Exception as exc:
            warn_once(("hf", "end", type(exc).__name__),
                      f"joulestat: ending the training run's job failed ({exc!r})")


def _to_trackers(args: Any, run: TrainingRun) -> None:
    """Parameters and the report to the MLflow or W&B run that ``report_to`` logs to."""
    report_to = getattr(args, "report_to", None) or []
    wanted = {report_to} if isinstance(report_to, str) else set(report_to)
    if "all" in wanted:
        wanted |= {"mlflow", "wandb"}
    if run.job is None:
        return
    if "mlflow" in wanted:
        from joulestat.integrations import mlflow as joulestat_mlflow

        joulestat_mlflow.log_report(run.job)
    if "wandb" in wanted:
        from joulestat.integrations import wandb as joulestat_wandb

        joulestat_wandb.log_report(run.job)
