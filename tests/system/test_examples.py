"""examples/ run the way their README says: the training script under ``joulestat run``,
the inference server counting each inference by model, and Locust loading it in three
stages that become three jobs on the Load curve page.

Everything talks to 127.0.0.1 only. Locust runs headless as a subprocess (importing it
here would monkey-patch this process with gevent), bounded by its stages (at most 4
users, 3 s each) and a timeout. Tests that need PyTorch or Locust skip, saying so,
where ``pip install 'joulestat[examples]'`` has not been run.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from joulestat.store.model_split import model_splits
from tests.helpers.agent_process import (
    JOULESTAT,
    agent_at_head,
    agent_env,
    communicate_or_explain,
    free_port,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SERVER = EXAMPLES / "inference" / "server.py"
LOCUSTFILE = EXAMPLES / "inference" / "locustfile.py"
LOCUST = Path(sys.executable).with_name("locust")
APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
needs_locust = pytest.mark.skipif(
    find_spec("locust") is None or not LOCUST.exists(),
    reason="Locust is not installed: pip install 'joulestat[examples]'")
needs_torch = pytest.mark.skipif(
    find_spec("torch") is None,
    reason="PyTorch is not installed: pip install 'joulestat[examples]' (CPU build)")
pytestmark = pytest.mark.slow


def embedded_env(tmp_path: Path) -> dict[str, str]:
    """No agent (a closed port), a store of the test's own."""
    return agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'store.db'}",
                     JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}")


def server_port(proc: subprocess.Popen) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"on http://127\.0\.0\.1:(\d+),", line)
    assert found, line
    return int(found.group(1))


def call(port: int, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST", headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return json.loads(response.read())


def test_server_counts_each_inference_with_its_model_into_its_run(tmp_path):
    proc = subprocess.Popen(
        [JOULESTAT, "run", "--name", "two-models", "--kind", "inference", "--json", "--",
         sys.executable, str(SERVER), "--port", "0", "--backend", "numpy",
         "--models", "mlp-small,mlp-large"],
        env=embedded_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = server_port(proc)
        row = [0.1] * 64
        for _ in range(3):
            answer = call(port, "/v1/models/mlp-small/infer", {"inputs": [row]})
            assert answer["model"] == "mlp-small" and len(answer["outputs"][0]) == 10
        call(port, "/v1/models/mlp-large/infer", {"inputs": [row, row]})
        stats = call(port, "/v1/stats")
        assert stats["inferences"] == 5 and stats["job_id"]
        assert stats["models"]["mlp-large"]["inferences"] == 2
        assert stats["models"]["mlp-small"]["busy_s"] > 0
        proc.send_signal(signal.SIGTERM)  # forwarded to the server, which sends its counts
        _out, err = communicate_or_explain(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads([line for line in err.splitlines() if line.startswith("{")][-1])
    assert summary["exit_code"] == 0, err
    assert summary["units"] == {"inference": 5}
    models = summary["models"]
    assert (models["mlp-small"]["inference"], models["mlp-large"]["inference"]) == (3, 2)
    assert models["mlp-small"]["busy_s"] > 0 and models["mlp-large"]["busy_s"] > 0
    assert summary["total_energy_j"] > 0


def load_with_locust(host: str, agent_url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LOCUST), "-f", str(LOCUSTFILE), "--headless", "--only-summary", "--host", host,
         "--agent-url", agent_url, *extra],
        env=agent_env(), capture_output=True, text=True, timeout=120, cwd=EXAMPLES)


@needs_locust
def test_locust_stages_become_three_jobs_on_the_load_curve(tmp_path, monkeypatch):
    with agent_at_head(tmp_path, "--interval", "0.5", "--flush-interval", "1") as agent:
        server = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", "--backend", "numpy",
             "--models", "mlp-small,mlp-large"],
            env=agent_env(), stdout=subprocess.PIPE, text=True)
        try:
            port = server_port(server)
            result = load_with_locust(f"http://127.0.0.1:{port}", agent.api_url,
                                      "--stages", "1,2,4", "--stage-seconds", "3")
        finally:
            server.terminate()
            server.wait(timeout=10)
        assert result.returncode == 0, result.stdout + result.stderr
        engine = make_engine(agent.db_url)
        jobs = {int(j.labels["concurrency"]): j for j in list_jobs(engine)}
        splits = model_splits(engine, [j.id for j in jobs.values()])
        engine.dispose()
    assert sorted(jobs) == [1, 2, 4]
    for job in jobs.values():
        assert job.name == "mlp-serve" and job.kind == "inference" and job.status == "ended"
        assert job.labels["load_test"] == "locust"
        assert job.labels["models"] == "mlp-small+mlp-large"
        assert job.total_j > 0 and list(job.units) == ["inference"]  # no per-model keys
        assert job.units["inference"] > 0
        # Each stage's energy split between the two models by busy time: whole, and
        # every inference counted for one model or the other.
        split = splits[job.id]
        assert [m.model for m in split.models] == ["mlp-large", "mlp-small"]
        assert split.energy_j == pytest.approx(job.total_j, rel=1e-9)
        assert sum(m.energy_j for m in split.models) + split.idle_j == pytest.approx(
            job.total_j, rel=1e-9)
        assert all(m.energy_j > 0 and m.busy_s > 0 for m in split.models)
        assert sum(m.units["inference"] for m in split.models) == job.units["inference"]
        assert 0 < float(job.labels["p50_ms"]) <= float(job.labels["p99_ms"])
    printed = [line for line in result.stdout.splitlines() if line.startswith("joulestat:")]
    assert len(printed) == 3 and all("J/inference" in line for line in printed)

    monkeypatch.setenv("JOULESTAT_DB", agent.db_url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/load_curve.py").run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert sorted(table["concurrency"]) == [1, 2, 4]
    for _, row in table.iterrows():
        job = jobs[int(row["concurrency"])]
        assert row["energy per inference"] == pytest.approx(
            job.total_j / job.units["inference"])
        # Each level's latency, as Locust measured it, beside its energy per inference.
        assert row["p50_ms"] == float(job.labels["p50_ms"])
        assert row["p99_ms"] == float(job.labels["p99_ms"])
    # Grouped by model: a line per model, each with its energy per inference.
    at.radio(key="load_by").set_value("model").run()
    assert not at.exception, [e.value for e in at.exception]
    by_model = at.dataframe[0].value
    assert sorted(zip(by_model["model"], by_model["concurrency"], strict=True)) == [
        (m, c) for m in ("mlp-large", "mlp-small") for c in (1, 2, 4)]
    for _, row in by_model.iterrows():
        share = splits[jobs[int(row["concurrency"])].id].model(row["model"])
        assert row["energy per inference"] == pytest.approx(share.per("inference"))
    at.radio(key="load_by").set_value("setup").run()
    # p50 and p99 are on the page as load-level labels too: pick one, and energy per
    # inference is plotted against that latency.
    for label in ("p50_ms", "p99_ms"):
        assert label in at.selectbox(key="load_label").options
        at.selectbox(key="load_label").set_value(label).run()
        assert not at.exception
        assert sorted(at.dataframe[0].value[label]) == sorted(
            float(j.labels[label]) for j in jobs.values())


@needs_locust
def test_locust_stops_with_a_message_when_no_agent_answers(tmp_path):
    server = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--backend",
                               "numpy"], env=agent_env(), stdout=subprocess.PIPE, text=True)
    try:
        port = server_port(server)
        result = load_with_locust(f"http://127.0.0.1:{port}",
                                  f"http://127.0.0.1:{free_port()}", "--stage-seconds", "2")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert result.returncode == 1
    assert "no joulestat agent answers at" in result.stderr


@needs_torch
def test_training_example_counts_samples_and_steps_under_joulestat_run(tmp_path):
    result = subprocess.run(
        [JOULESTAT, "run", "--name", "mlp-train", "--kind", "training", "--json", "--",
         sys.executable, str(EXAMPLES / "train" / "train.py"), "--samples", "4096",
         "--epochs", "2", "--batch-size", "256", "--hidden", "128"],
        env=embedded_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    summary = json.loads([x for x in result.stderr.splitlines() if x.startswith("{")][-1])
    assert summary["units"] == {"sample": 8192, "step": 32}
    assert summary["total_energy_j"] > 0 and summary["final"] is True
    assert "(joined the run)" in result.stdout
