"""The MLflow and W&B helpers for custom loops, as their users call them (a script with
``track()``, ``log_figures`` and ``log_report``: tests/helpers/custom_loop.py) beside a
real agent on a fake RAPL node; and what they do where there is nothing to log to."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.agent_process import agent_on_fake_rapl, free_port, read_cli
from tests.helpers.wandb_offline import read_run

pytestmark = pytest.mark.slow
LOOP = Path(__file__).resolve().parents[1] / "helpers" / "custom_loop.py"


def _run_loop(tmp_path: Path, tracker: str, **env_extra: str) -> tuple[dict, dict]:
    """The loop's printed result and the stored report of its job."""
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        env = agent.client_env(PYTHONPATH=str(Path(__file__).resolve().parents[2]),
                               **env_extra)
        result = subprocess.run([sys.executable, str(LOOP), "--tracker", tracker],
                                env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-4000:]
        printed = json.loads(result.stdout.strip().splitlines()[-1])
        report = read_cli("report", "--format", "json", printed["job_id"],
                          env=agent.client_env())
        assert report.returncode == 0, report.stderr
        return printed, json.loads(report.stdout)


def test_mlflow_helpers_log_figures_at_steps_and_the_report_at_the_end(tmp_path):
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # MLflow's database backend
    printed, report = _run_loop(tmp_path, "mlflow", MLFLOW_TRACKING_URI=store)
    assert printed["logged"] == [True] * 5 and printed["attached"] is True
    assert report["work_units"] == {"step": 20, "sample": 80}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs(experiment_ids=["0"])
    history = client.get_metric_history(run.info.run_id, "joulestat/energy_j")
    assert [m.step for m in history] == [5, 10, 15, 20, 20]
    # The last figures logged are the job's final ones: the store's, exactly.
    assert history[-1].value == pytest.approx(report["energy_j"]["total"], rel=1e-9)
    steps = client.get_metric_history(run.info.run_id, "joulestat/steps")
    assert steps[-1].value == 20
    assert run.data.params["joulestat.job_id"] == printed["job_id"]
    assert run.data.params["joulestat.measured_by"] == "agent"
    assert run.data.params["joulestat.energy_is"] == printed["final"]["energy_is"]
    assert run.data.tags["joulestat.energy_is"] == printed["final"]["energy_is"]
    names = {a.path for a in client.list_artifacts(run.info.run_id, "joulestat")}
    assert names == {f"joulestat/joulestat-report-{printed['job_id']}.json",
                     f"joulestat/joulestat-report-{printed['job_id']}.html"}


def test_under_joulestat_run_the_report_and_last_figures_are_the_ended_jobs(tmp_path):
    """Inside a `joulestat run` job, log_report hands the run over and the wrapper, once
    the job ended (after the script's own exit), logs the final figures and report."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        env = agent.client_env(PYTHONPATH=str(Path(__file__).resolve().parents[2]),
                               MLFLOW_TRACKING_URI=store)
        result = subprocess.run(
            [str(Path(sys.executable).with_name("joulestat")), "run", "--name", "loop-run",
             "--", sys.executable, str(LOOP), "--tracker", "mlflow"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-4000:]
        printed = json.loads(result.stdout.strip().splitlines()[-1])
        report = json.loads(read_cli("report", "--format", "json", printed["job_id"],
                                     env=agent.client_env()).stdout)
    assert printed["attached"] is True  # handed over
    assert report["job"]["name"] == "loop-run" and report["job"]["status"] == "ended"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs(experiment_ids=["0"])
    assert f"final figures logged to MLflow run {run.info.run_id} at step 20" in result.stderr
    history = client.get_metric_history(run.info.run_id, "joulestat/energy_j")
    assert [m.step for m in history] == [5, 10, 15, 20, 20, 20]
    # The loop's own last figures were the job's so far; the wrapper's, the final ones.
    assert history[-2].value < history[-1].value
    assert run.data.metrics["joulestat/energy_j"] == pytest.approx(
        report["energy_j"]["total"], rel=1e-9)
    assert run.data.params["joulestat.job_id"] == printed["job_id"]
    attached = json.loads(Path(client.download_artifacts(
        run.info.run_id, f"joulestat/joulestat-report-{printed['job_id']}.json",
        str(tmp_path))).read_text())
    assert attached["job"]["status"] == "ended"


def test_wandb_helpers_log_the_same_in_offline_mode(tmp_path):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    printed, report = _run_loop(tmp_path, "wandb", WANDB_MODE="offline", WANDB_SILENT="true",
                                WANDB_DIR=str(tmp_path))
    assert printed["logged"] == [True] * 5 and printed["attached"] is True
    run = read_run(tmp_path)
    rows = [row for row in run.history if "joulestat/energy_j" in row]
    # W&B keeps one row a step: the final figures, logged at step 20 again, replace
    # those of the loop's step 20.
    assert [row["_step"] for row in rows] == [5, 10, 15, 20]
    assert rows[-1]["joulestat/energy_j"] == pytest.approx(report["energy_j"]["total"],
                                                            rel=1e-9)
    assert run.config["joulestat.energy_is"] == printed["final"]["energy_is"]
    job_id = printed["job_id"]
    assert run.artifacts == [(f"joulestat-report-{job_id}", "joulestat-report",
                              [f"joulestat-report-{job_id}.html",
                               f"joulestat-report-{job_id}.json"])]


def test_helpers_without_a_run_or_a_measured_job_say_so_once_and_go_on(
        tmp_path, monkeypatch, caplog):
    """Nothing to log to (no active MLflow run, no W&B run) or nothing to log (a job no
    agent measures and that cannot be measured in-process): False, one warning each,
    never an exception into the loop."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from joulestat import track
    from joulestat.client import notice
    from joulestat.integrations import mlflow as joulestat_mlflow
    from joulestat.integrations import wandb as joulestat_wandb

    notice.forget()
    monkeypatch.setenv("JOULESTAT_AGENT_URL", f"http://127.0.0.1:{free_port()}")
    # An in-process measurement that cannot open its store: the job is not measured.
    monkeypatch.setenv("JOULESTAT_DB", f"sqlite:///{tmp_path / 'missing' / 'dir' / 'x.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    caplog.set_level(logging.WARNING, logger="joulestat")
    with track("nowhere") as job:
        for step in range(3):
            assert joulestat_mlflow.log_figures(job, step=step) is False
            assert joulestat_wandb.log_figures(job, step=step) is False
        assert joulestat_mlflow.log_report(job) is False
        assert job.figures() is None
    said = [r.getMessage() for r in caplog.records]
    assert sum("no active MLflow run" in m for m in said) == 1, said
    assert sum("no W&B run" in m for m in said) == 1, said

    import mlflow

    with mlflow.start_run():
        assert joulestat_mlflow.log_figures(job, step=0) is False  # not measured
        assert joulestat_mlflow.log_report(job) is False
    assert sum("has no figures" in m for m in [r.getMessage() for r in caplog.records]) == 1
