"""Where ML code already logs: the Hugging Face Trainer and Lightning callbacks, and the
MLflow and W&B helpers for custom loops.

Each module imports its framework only when used (its extra: ``hf``, ``lightning``,
``mlflow``, ``wandb``), and takes every figure it logs from the agent through the job
API (:mod:`joulestat.integrations.figures`), never computing one of its own. Like
:func:`joulestat.track`, nothing here raises into the training loop: what fails is
said once on the ``joulestat`` logger and the run goes on.
"""
