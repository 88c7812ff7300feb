"""Lightning's JoulestatCallback, as its users run it: the example script
(examples/lightning/fit.py, a tiny transformer with random weights) beside a real agent
on a fake 60 W RAPL node, with a W&B logger in offline mode and with MLflow's; what the
loggers recorded is read back from their files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.agent_process import agent_on_fake_rapl, read_cli
from tests.helpers.wandb_offline import read_run

pytest.importorskip("lightning", reason="the lightning extra is not installed")
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning" / "fit.py"
NAME = "tiny-transformer-fit"  # the example's job name


def _fit(tmp_path: Path, logger: str, **env_extra: str) -> dict:
    """Run the example under an agent; the stored report of its job."""
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        env = agent.client_env(OMP_NUM_THREADS="1", **env_extra)
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "--logger", logger, "--samples", "160",
             "--batch-size", "8", "--log-every-n-steps", "5",
             "--save-dir", str(tmp_path / "logs")],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        report = read_cli("report", "--format", "json", NAME, env=agent.client_env())
        assert report.returncode == 0, report.stderr
        return json.loads(report.stdout)


def test_lightning_fit_logs_the_agents_figures_to_wandb_offline(tmp_path):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    report = _fit(tmp_path, "wandb", WANDB_MODE="offline", WANDB_SILENT="true",
                  WANDB_DIR=str(tmp_path / "logs"))
    assert report["work_units"]["step"] == 20 and report["work_units"]["sample"] == 160
    stored_j = report["energy_j"]["total"]

    run = read_run(tmp_path / "logs")
    rows = [row for row in run.history if "joulestat/energy_j" in row]
    # Logged through self.log every log_every_n_steps, then the final figures.
    assert [row["trainer/global_step"] for row in rows[:-1]] == [4, 9, 14, 19]
    final = rows[-1]
    print(f"Lightning + W&B offline: stored {stored_j:.3f} J; W&B's last "
          f"{final['joulestat/energy_j']:.3f} J at step {final['trainer/global_step']}")
    assert final["trainer/global_step"] == 20
    assert final["joulestat/energy_j"] == pytest.approx(stored_j, rel=0.10)
    assert final["joulestat/steps"] == 20 and final["joulestat/samples"] == 160
    assert final["joulestat/energy_j_per_sample"] == pytest.approx(stored_j / 160, rel=0.10)
    energies = [row["joulestat/energy_j"] for row in rows]
    assert energies == sorted(energies)
    assert run.config["joulestat.job_id"] == report["job"]["id"]
    assert run.config["joulestat.energy_is"].startswith("measured")
    job_id = report["job"]["id"]
    assert run.artifacts == [(f"joulestat-report-{job_id}", "joulestat-report",
                              [f"joulestat-report-{job_id}.html",
                               f"joulestat-report-{job_id}.json"])]


def test_lightning_fit_logs_the_same_to_mlflow(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # MLflow's database backend
    report = _fit(tmp_path, "mlflow", MLFLOW_TRACKING_URI=store)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("joulestat-example")
    (run,) = client.search_runs(experiment_ids=[experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "joulestat/energy_j")
    assert history[-1].step == 20
    assert history[-1].value == pytest.approx(report["energy_j"]["total"], rel=0.10)
    assert run.data.params["joulestat.job_id"] == report["job"]["id"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "joulestat")}
    assert len(artifacts) == 2
