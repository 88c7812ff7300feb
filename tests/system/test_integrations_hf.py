"""The Hugging Face Trainer's JoulestatCallback, as its users run it: the example script
(examples/huggingface/trainer.py, a tiny BERT built from a config: nothing downloaded)
beside a real agent on a fake 60 W RAPL node, logging to MLflow's local file store;
and the same script under torchrun, two ranks making one job."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.agent_process import agent_env, agent_on_fake_rapl, free_port, read_cli

pytest.importorskip("transformers", reason="the hf extra is not installed")
pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "huggingface" / "trainer.py"
JOULESTAT = str(Path(sys.executable).with_name("joulestat"))
NAME = "tiny-bert-finetune"  # the example's default --name


def _stored_report(env: dict[str, str], name: str) -> dict:
    result = read_cli("report", "--format", "json", name, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _mlflow_metric(store: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` in the one run of MLflow's store (its database backend),
    read back with MLflow's own client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    runs = client.search_runs(experiment_ids=["0"])
    assert len(runs) == 1, runs
    return [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, key)]


def test_trainer_logs_the_agents_figures_to_mlflow_and_the_store_agrees(tmp_path):
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        store = f"sqlite:///{tmp_path / 'mlflow.db'}"  # MLflow's database backend
        env = agent.client_env(MLFLOW_TRACKING_URI=store, OMP_NUM_THREADS="1")
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "--samples", "160", "--batch-size", "8",
             "--logging-steps", "5", "--report-to", "mlflow",
             "--output-dir", str(tmp_path / "out")],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        report = _stored_report(agent.client_env(), NAME)

    # The store's job: 20 steps of 8 samples, measured by the agent.
    assert report["work_units"]["step"] == 20
    assert report["work_units"]["sample"] == 160
    assert report["work_units"]["token"] > 0
    stored_j = report["energy_j"]["total"]
    assert stored_j > 0

    # The Trainer's logs (trainer_state.json): the figures at every logging step, the
    # final log (train_runtime) carrying the job's final, stored figures.
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    logged = [entry for entry in history if "joulestat/energy_j" in entry]
    assert [entry["step"] for entry in logged if "loss" in entry] == [5, 10, 15, 20]
    final = next(entry for entry in history if "train_runtime" in entry)
    print(f"Trainer: stored {stored_j:.3f} J, {report['work_units']}; final log "
          f"{final['joulestat/energy_j']:.3f} J; logged at steps "
          f"{[(e['step'], round(e['joulestat/energy_j'], 2)) for e in logged]}")
    assert final["joulestat/energy_j"] == pytest.approx(stored_j, rel=0.10)
    assert final["joulestat/steps"] == 20 and final["joulestat/samples"] == 160
    assert final["joulestat/energy_j_per_step"] == pytest.approx(stored_j / 20, rel=0.10)
    assert final["joulestat/co2e_g"] == pytest.approx(report["co2e_g"], rel=0.10)
    assert 0 < final["joulestat/measured_share"] <= 1
    energies = [entry["joulestat/energy_j"] for entry in logged]
    assert energies == sorted(energies), "energy so far never goes back"

    # MLflow got the same numbers as metrics, the provenance as parameters, and the
    # report (JSON and HTML) as artifacts.
    last_step, last_j = _mlflow_metric(store, "joulestat/energy_j")[-1]
    print(f"MLflow: joulestat/energy_j at step {last_step} = {last_j:.3f} J")
    assert last_step == 20 and last_j == pytest.approx(stored_j, rel=0.10)
    assert len(_mlflow_metric(store, "joulestat/energy_j")) == len(logged)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    run = client.search_runs(experiment_ids=["0"])[0]
    assert run.data.params["joulestat.job_id"] == report["job"]["id"]
    assert run.data.params["joulestat.energy_is"].startswith("measured")
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "joulestat")}
    job_id = report["job"]["id"]
    assert artifacts == {f"joulestat/joulestat-report-{job_id}.json",
                         f"joulestat/joulestat-report-{job_id}.html"}
    attached = json.loads(Path(client.download_artifacts(
        run.info.run_id, f"joulestat/joulestat-report-{job_id}.json", str(tmp_path))
    ).read_text())
    assert attached["energy_j"]["total"] == pytest.approx(stored_j, rel=0.10)


def test_two_ranks_of_one_run_make_one_job_counted_once(tmp_path):
    """torchrun, two processes on CPU (gloo): one job holding both ranks' processes,
    steps counted once, samples for the whole run."""
    torchrun = Path(sys.executable).with_name("torchrun")
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
        env = agent.client_env(OMP_NUM_THREADS="1")
        result = subprocess.run(
            [str(torchrun), "--nproc-per-node", "2", "--master-port", str(free_port()),
             str(EXAMPLE), "--samples", "160", "--batch-size", "8", "--logging-steps", "5",
             "--output-dir", str(tmp_path / "out")],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        with urllib.request.urlopen(agent.api_url + "/v1/jobs", timeout=10) as answer:
            jobs = [job for job in json.loads(answer.read())["jobs"] if job["name"] == NAME]
        report = _stored_report(agent.client_env(), NAME)

    assert len(jobs) == 1, jobs
    assert len(jobs[0]["pids"]) == 2, "both ranks' processes are the job's"
    # 160 samples over 2 ranks of 8 a step: 10 optimizer steps, each counted once.
    assert report["work_units"]["step"] == 10
    assert report["work_units"]["sample"] == 160
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    assert state["global_step"] == 10
    final = next(entry for entry in state["log_history"] if "train_runtime" in entry)
    assert final["joulestat/steps"] == 10
    assert final["joulestat/energy_j"] == pytest.approx(report["energy_j"]["total"], rel=0.10)


@pytest.mark.parametrize("measured_by", ["agent", "embedded"])
def test_under_joulestat_run_mlflow_ends_with_the_jobs_final_stored_figures(
        tmp_path, measured_by):
    """Issue 46, acceptance 3: the Trainer's job is the wrapper's and goes on after
    training (until the script exits), so MLflow's last figures are the ones the wrapper
    logs once the job ended: the store's, with the report attached saying ended; and
    at each logging step the units and the energy are of the same moment."""
    mlflow_db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = [sys.executable, str(EXAMPLE), "--report-to", "mlflow",
              "--output-dir", str(tmp_path / "out")]
    if measured_by == "agent":
        with agent_on_fake_rapl(tmp_path, at_head=True) as agent:
            env = agent.client_env(MLFLOW_TRACKING_URI=mlflow_db, OMP_NUM_THREADS="1")
            result = subprocess.run(
                [JOULESTAT, "run", "--name", "hf-run", "--kind", "training", "--json", "--",
                 *script], env=env, cwd=tmp_path, capture_output=True, text=True,
                timeout=600)
            assert result.returncode == 0, result.stderr[-4000:]
            jobs = json.loads(read_cli("jobs", "--json", env=agent.client_env()).stdout)
            assert [job["name"] for job in jobs] == ["hf-run"], "joined, not its own"
            report = _stored_report(agent.client_env(), "hf-run")
    else:
        env = agent_env(JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}",
                        JOULESTAT_DB=f"sqlite:///{tmp_path / 'embedded.db'}",
                        MLFLOW_TRACKING_URI=mlflow_db, OMP_NUM_THREADS="1")
        result = subprocess.run(
            [JOULESTAT, "run", "--name", "hf-run", "--kind", "training", "--json",
             "--interval", "0.25", "--", *script], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        report = _stored_report(env, "hf-run")
    summary = json.loads([x for x in result.stderr.splitlines() if x.startswith("{")][-1])
    assert summary["mode"] == measured_by and summary["final"] is True
    assert report["job"]["status"] == "ended"
    assert report["work_units"]["step"] == 20 and report["work_units"]["sample"] == 160
    stored_j = report["energy_j"]["total"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_db)
    (run,) = client.search_runs(experiment_ids=["0"])
    assert summary["trackers"] == [
        f"final figures logged to MLflow run {run.info.run_id} at step 20"]
    last = run.data.metrics  # MLflow's latest value of each: by step, then time
    print(f"{measured_by}: store {stored_j:.3f} J, MLflow last "
          f"{last['joulestat/energy_j']:.3f} J, {last['joulestat/steps']:g} steps")
    assert last["joulestat/energy_j"] == pytest.approx(stored_j, rel=0.01)
    assert last["joulestat/steps"] == 20 and last["joulestat/samples"] == 160
    assert last["joulestat/energy_j_per_step"] == pytest.approx(stored_j / 20, rel=0.01)
    assert last["joulestat/co2e_g"] == pytest.approx(report["co2e_g"], rel=0.01)
    assert run.data.params["joulestat.job_id"] == report["job"]["id"]
    assert run.data.params["joulestat.measured_by"] == measured_by
    job_id = report["job"]["id"]
    attached = json.loads(Path(client.download_artifacts(
        run.info.run_id, f"joulestat/joulestat-report-{job_id}.json", str(tmp_path))
    ).read_text())
    assert attached["job"]["status"] == "ended"
    assert attached["energy_j"]["total"] == pytest.approx(stored_j, rel=1e-9)

    # At every logging step: energy per step is the energy over the steps of one moment,
    # and those steps are every one counted up to the figures' moment (the first log, at
    # step 5, has them: a tick is taken after the counts arrive).
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text())["log_history"]
    logged = [entry for entry in history if "joulestat/energy_j" in entry]
    assert logged[0]["step"] == 5 and logged[0]["joulestat/steps"] == 5
    for entry in logged:
        assert entry["joulestat/steps"] <= entry["step"]
        assert entry["joulestat/energy_j_per_step"] * entry["joulestat/steps"] == \
            pytest.approx(entry["joulestat/energy_j"], rel=1e-9)


def test_without_an_agent_training_goes_on_measured_in_process(tmp_path):
    env = agent_env(JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}",
                    JOULESTAT_DB=f"sqlite:///{tmp_path / 'embedded.db'}", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--output-dir", str(tmp_path / "out")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "in-process (embedded mode)" in result.stderr
    assert "Traceback" not in result.stderr
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    final = next(entry for entry in state["log_history"] if "train_runtime" in entry)
    report = _stored_report(env, NAME)
    assert final["joulestat/energy_j"] == pytest.approx(report["energy_j"]["total"], rel=0.10)
    assert report["work_units"]["step"] == 20
