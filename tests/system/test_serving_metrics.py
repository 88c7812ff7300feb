"""``joulestat run --serving-metrics URL`` beside the real agent on a fake RAPL node: a
server exposing vLLM's, TGI's or SGLang's metric names at known rates (200 output
tokens, 50 prompt tokens and 2 requests a second: tests/helpers/fake_serving.py) is
counted into the job; a restart and an outage of the server lose no tokens; two models'
energies add up to the job's; compare gives energy per output token and picks the
setup a latency target allows. The server is a process of its own, as a real one is
(:class:`tests.helpers.fake_serving.ServingEngineProcess`)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from joulestat.core import units as fmt
from tests.helpers.agent_process import (
    JOULESTAT,
    agent_on_fake_rapl,
    jobs_in_store,
    read_cli,
    summary_of,
    wait_for,
)
from tests.helpers.fake_serving import ModelRates, ServingEngineProcess
from tests.helpers.serving_store import serving_store

pytestmark = pytest.mark.slow
RATES = ModelRates(output_tokens_per_s=200.0, prompt_tokens_per_s=50.0, requests_per_s=2.0)
TOLERANCE = 0.15  # the issue's: units within 15 % of the truth


def _serve(agent, engine: ServingEngineProcess, name: str, tmp_path: Path,
           during=None) -> tuple[dict, dict]:
    """A job under `joulestat run --serving-metrics` that lasts until told to stop;
    ``during(units_so_far)`` runs once some tokens are counted. The run's summary, and
    the job as stored."""
    done = tmp_path / f"{name}.done"
    code = ("import os, time\n"
            f"while not os.path.exists({str(done)!r}): time.sleep(0.05)\n")
    proc = subprocess.Popen(
        [JOULESTAT, "run", "--name", name, "--kind", "inference", "--json",
         "--serving-metrics", engine.url, "--", sys.executable, "-c", code],
        env=agent.client_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def counted(minimum: float) -> bool:
            found = jobs_in_store(agent.client_env()).get(name)
            return found is not None and found["units"].get("output_token", 0) >= minimum

        wait_for(lambda: counted(200), timeout_s=120, every_s=0.5)
        if during is not None:
            during()
        wait_for(lambda: counted(1200), timeout_s=120, every_s=0.5)
    finally:
        done.touch()
    summary = summary_of(proc, timeout_s=120)
    return summary, jobs_in_store(agent.client_env())[name]


def _truth(job: dict, per_s: float) -> float:
    return per_s * (job["ended_s"] - job["started_s"])


@pytest.mark.parametrize("engine_name", ["vllm", "tgi", "sglang"])
def test_units_from_the_servers_metrics_within_15_percent(tmp_path, engine_name):
    model = "default" if engine_name == "tgi" else "meta-llama/Llama-3.1-8B-Instruct"
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            ServingEngineProcess(engine_name, {model: RATES}) as engine:
        summary, job = _serve(agent, engine, f"llm-{engine_name}", tmp_path)
        compared = json.loads(read_cli("compare", "--jobs", f"llm-{engine_name}", "--unit",
                                       "output_token", "--json",
                                       env=agent.client_env()).stdout)
        report = json.loads(read_cli("report", "--format", "json", f"llm-{engine_name}",
                                     env=agent.client_env()).stdout)
        csv_text = read_cli("report", "--format", "csv", f"llm-{engine_name}",
                            env=agent.client_env()).stdout
        html = read_cli("report", "--format", "html", f"llm-{engine_name}",
                        env=agent.client_env()).stdout
    assert summary["final"] is True
    units = job["units"]
    for unit, per_s in (("output_token", 200.0), ("prompt_token", 50.0), ("request", 2.0)):
        truth = _truth(job, per_s)
        assert units[unit] == pytest.approx(truth, rel=TOLERANCE), (unit, units, truth)
    assert job["agent_labels"]["serving_metrics"] == engine.url
    (row,) = compared["rows"]
    energy_j = sum(job["dynamic_j"].values()) + sum(job["idle_j"].values())
    assert row["unit"] == "output_token"
    assert row["energy_per_unit_j"] == pytest.approx(energy_j / units["output_token"], rel=1e-9)
    # The latency the server reported: its histograms' percentiles beside the energy.
    expected = {"itl", "e2e"} if engine_name == "tgi" else {"ttft", "itl", "e2e"}
    assert set(row["latency_s"]) == expected
    assert 0.0 < row["latency_s"]["e2e"]["p50"] <= 2.5  # e2e is 2 s, in the (1, 2.5] bucket
    # The report says it per model, with the number of requests observed.
    served = report["latency"][model]
    assert set(served) == expected
    assert 1.0 < served["e2e"]["p50_s"] <= 2.5
    assert served["e2e"]["mean_s"] == pytest.approx(2.0)
    assert served["e2e"]["count"] == pytest.approx(units["request"], rel=TOLERANCE)
    if engine_name != "tgi":
        assert 0.1 < served["ttft"]["p99_s"] <= 0.25  # TTFT 0.12 s: the (0.1, 0.25] bucket
    # Every format says it (issue 46): CSV one figure a cell, HTML a table with units.
    [cells] = list(csv.DictReader(io.StringIO(csv_text)))
    for kind in ("ttft", "itl", "e2e"):
        for quantile in ("p50", "p99"):
            value = served.get(kind, {}).get(f"{quantile}_s")
            cell = cells[f"latency_{kind}_{quantile}_s"]
            assert (float(cell) == pytest.approx(value)) if value is not None else cell == ""
    assert "<h2>Served latency</h2>" in html
    assert f"<td>{fmt.seconds(served['e2e']['p50_s'])}</td>" in html


def test_a_restart_and_an_outage_of_the_server_lose_no_tokens(tmp_path):
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            ServingEngineProcess("vllm", {"m": RATES}) as engine:

        def restart_and_drop_out() -> None:
            engine.restart()  # counters back to 0, as a restarted vLLM's
            engine.down()  # then a second of 503s
            wait_for(lambda: "serving metrics of job" in agent.log(), timeout_s=60)
            engine.up()

        _summary, job = _serve(agent, engine, "llm-restarted", tmp_path, restart_and_drop_out)
        log = agent.log()
    truth = _truth(job, 200.0)
    assert job["units"]["output_token"] == pytest.approx(truth, rel=TOLERANCE)
    assert log.count("its tokens so far are kept") == 1, "an outage is said once"
    assert "answer again" in log


def test_two_models_split_the_jobs_energy_by_their_tokens(tmp_path):
    from joulestat.store.engine import make_engine
    from joulestat.store.model_split import model_splits

    big = ModelRates(output_tokens_per_s=300.0, prompt_tokens_per_s=50.0, requests_per_s=3.0)
    small = ModelRates(output_tokens_per_s=100.0, prompt_tokens_per_s=50.0,
                       requests_per_s=1.0)
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            ServingEngineProcess("vllm", {"big": big, "small": small}) as engine:
        _summary, job = _serve(agent, engine, "two-models", tmp_path)
        engine_db = make_engine(agent.db_url)
        split = model_splits(engine_db, [job["id"]])[job["id"]]
        engine_db.dispose()
    job_j = sum(job["dynamic_j"].values()) + sum(job["idle_j"].values())
    models = {m.model: m for m in split.models}
    assert set(models) == {"big", "small"}
    # Models + what no model's tokens covered = the job's energy.
    assert sum(m.energy_j for m in models.values()) + split.idle_j == pytest.approx(
        job_j, rel=1e-9)
    fractions = split.job_fractions()
    assert sum(fractions.values()) == pytest.approx(1.0)
    assert fractions["big"] == pytest.approx(350 / 500, abs=0.05), fractions  # by tokens
    assert models["big"].units["output_token"] == pytest.approx(
        3 * models["small"].units["output_token"], rel=TOLERANCE)


def test_a_latency_target_picks_the_cheapest_setup_that_meets_it(tmp_path):
    """Three setups with known figures: A the cheapest per token but slow to first
    token, B meeting ttft_p99 <= 0.5 s at less energy per token than C."""
    url = f"sqlite:///{tmp_path / 'setups.db'}"
    serving_store(url)
    result = read_cli("compare", "--db", url, "--by", "instance_type", "--unit",
                      "output_token", "--latency-target", "ttft_p99=0.5", "--json")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)["latency_target"]
    assert outcome["meeting"] == ["g5.xlarge", "p4d.24xlarge"]
    assert outcome["cheapest"] == "g5.xlarge"
    assert [m["row"] for m in outcome["missed"]] == ["inf2.xlarge"]
    text = read_cli("compare", "--db", url, "--by", "instance_type", "--unit",
                    "output_token", "--latency-target", "ttft_p99=0.5").stdout
    assert "least energy per output_token among them: g5.xlarge" in text
    bad = read_cli("compare", "--db", url, "--latency-target", "ttft_p42=x")
    assert bad.returncode == 2 and "--latency-target" in bad.stderr


def test_track_and_the_job_api_take_serving_metrics_and_refuse_a_bad_one(tmp_path):
    from tests.helpers import job_api

    code = ("import sys, time\nfrom joulestat import track\n"
            "with track('tracked-llm', kind='inference', serving_metrics=sys.argv[1]) as job:\n"
            # until the agent has counted the server's tokens, however slowly it ticks
            "    deadline = time.monotonic() + 120\n"
            "    while time.monotonic() < deadline:\n"
            "        figures = job.figures() or {}\n"
            "        if figures.get('work_units', {}).get('output_token', 0) > 200: break\n"
            "        time.sleep(0.1)\n"
            "print(job.summary['units'].get('output_token', 0))\n")
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            ServingEngineProcess("vllm", {"m": RATES}) as engine:
        result = subprocess.run([sys.executable, "-c", code, engine.url],
                                env=agent.client_env(), capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stderr
        status, _, job = job_api.call(agent.api_port, "POST", "/v1/jobs", {
            "name": "api-llm", "kind": "inference", "serving_metrics": engine.url})
        assert status == 201 and job["agent_labels"]["serving_metrics"] == engine.url
        status, _, refused = job_api.call(agent.api_port, "POST", "/v1/jobs", {
            "name": "api-llm", "kind": "inference", "serving_metrics": "ftp://x/metrics"})
        bad_run = read_cli("run", "--name", "x", "--serving-metrics", "not a url", "--",
                           "true", env=agent.client_env())
    assert float(result.stdout.strip().splitlines()[-1]) > 200
    assert status == 400 and "serving_metrics" in refused["error"]
    assert bad_run.returncode == 2 and "--serving-metrics" in bad_run.stderr
