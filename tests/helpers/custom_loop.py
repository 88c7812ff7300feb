"""A custom training loop as its author writes one with joulestat's tracker helpers
(docs/integrations.md): ``track()``, ``count()``, ``log_figures`` every 5 steps and
``log_report`` at the end, into MLflow or W&B (``--tracker``). Prints, as its last
line, JSON of what the helpers returned, the job's id and the figures it logged last."""

from __future__ import annotations

import argparse
import json
import time

from joulestat import track


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(i * i for i in range(2000))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tracker", choices=["mlflow", "wandb"], required=True)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.tracker == "mlflow":
        import mlflow

        from joulestat.integrations import mlflow as helper
        run = mlflow.start_run(run_name="custom-loop")
    else:
        import wandb

        from joulestat.integrations import wandb as helper
        run = wandb.init(project="joulestat-test", name="custom-loop")
    logged = []
    with run:
        with track("custom-loop") as job:
            for step in range(1, args.steps + 1):
                busy(0.05)
                job.count("step")
                job.count("sample", 4)
                if step % 5 == 0:
                    logged.append(helper.log_figures(job, step=step))
        # The job has ended: its final figures and report, into the run still open.
        logged.append(helper.log_figures(job, step=args.steps))
        attached = helper.log_report(job)
    print(json.dumps({"logged": logged, "attached": attached, "job_id": job.id,
                      "final": job.figures()}))

if __name__ == "__main__":
    main()
