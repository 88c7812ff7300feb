"""Serving energy in the steady-state window (issue 49), as a user meets it: the real
agent on a fake RAPL package whose power follows a fake vLLM server's load, the server
ramping up for 30 s, holding for 60 s and draining for 30 s
(:class:`tests.helpers.fake_serving.LoadSchedule`), measured by ``joulestat run
--serving-metrics``; then ``joulestat report``, ``joulestat compare`` and ``joulestat
estimate request``.

The truth in the window: the job's energy there as the store's raw rows hold it (the
agent flushes every second, so rows are a second long), over the tokens the server
generated in it (its full rate times the window).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from joulestat.store.engine import make_engine
from joulestat.store.jobs import job_serving_traces
from joulestat.store.series import job_energy_rows
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import (
    JOULESTAT,
    agent_at_head,
    agent_on_fake_rapl,
    in_memory,
    jobs_in_store,
    read_cli,
    summary_of,
    wait_for,
)
from tests.helpers.fake_serving import LoadSchedule, ModelRates, ServingEngineProcess

pytestmark = pytest.mark.slow
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# At full load: 400 output and 100 prompt tokens a second, 2 requests of 50 + 200 tokens.
RATES = ModelRates(output_tokens_per_s=400.0, prompt_tokens_per_s=100.0, requests_per_s=2.0)
BASE_W, J_PER_OUTPUT, J_PER_PROMPT = 40.0, 0.1, 0.05
LEAD_S = 25.0  # the agent starts and the job registers before the load does


def _energy_now(schedule: LoadSchedule):
    """The fake package's energy so far: a base power plus each token's cost."""
    origin = time.time()

    def energy_j() -> float:
        now = time.time()
        full_s = schedule.full_load_s(now)
        return (BASE_W * (now - origin) + full_s * (J_PER_OUTPUT * RATES.output_tokens_per_s
                                                    + J_PER_PROMPT * RATES.prompt_tokens_per_s))

    return energy_j


def _serve(agent, engine: ServingEngineProcess, schedule: LoadSchedule, name: str,
           during=None) -> dict:
    """A `joulestat run --serving-metrics` job from before the load starts to after it
    ends; ``during(job_id)`` runs in the steady window. The run's summary. The job's
    command runs until its standard input closes, which reading the summary does."""
    code = "import sys; sys.stdin.read()"
    proc = subprocess.Popen(
        [JOULESTAT, "run", "--name", name, "--kind", "inference", "--json",
         "--serving-metrics", engine.url, "--", sys.executable, "-c", code],
        env=agent.client_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        job = wait_for(lambda: jobs_in_store(agent.client_env()).get(name), timeout_s=60,
                       every_s=0.5)
        assert time.time() < schedule.start_s, "the job registered after the load began"
        if during is not None:
            wait_for(lambda: time.time() >= schedule.steady_bounds_s[0] + 15,
                     timeout_s=schedule.end_s - time.time() + 5, every_s=0.2)
            during(job["id"])
        wait_for(lambda: time.time() >= schedule.end_s + 3,
                 timeout_s=schedule.end_s - time.time() + 30, every_s=0.5)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return summary_of(proc, timeout_s=120)  # closes its stdin: the command ends


def _missing_power_s(db_url: str, job_id: str) -> float:
    """The seconds of the job's stored serving trace that had no measured power tick."""
    traces = job_serving_traces(make_engine(db_url), [job_id]).get(job_id, [])
    if not traces or len(traces[0].points) < 2:
        return 0.0
    first, last = traces[0].points[0], traces[0].points[-1]
    return (last.t_s - first.t_s) - (last.power_s - first.power_s)


def _energy_within(db_url: str, job_id: str, start_s: float, end_s: float) -> float:
    """The job's stored energy in [start_s, end_s], rows cut where they overlap it."""
    total = 0.0
    for _node, t0, t1, _component, energy_j in job_energy_rows(make_engine(db_url), job_id):
        overlap = min(t1, end_s) - max(t0, start_s)
        if overlap > 0 and t1 > t0:
            total += energy_j * overlap / (t1 - t0)
    return total


def test_steady_window_of_a_ramped_vllm_server(tmp_path):
    schedule = LoadSchedule(start_s=time.time() + LEAD_S, prompt_length=50.0,
                            output_length=200.0)
    with agent_on_fake_rapl(tmp_path, "--flush-interval", "1",
                            energy_now=_energy_now(schedule)) as agent, \
            ServingEngineProcess("vllm", {MODEL: RATES}, schedule=schedule) as engine:
        summary = _serve(agent, engine, schedule, "llm-ramped")
        env = agent.client_env()
        job_id = summary["id"]
        report = json.loads(read_cli("report", "--format", "json", job_id, env=env).stdout)
        compared = json.loads(read_cli("compare", "--jobs", job_id, "--unit", "output_token",
                                       "--json", env=env).stdout)
        estimated = read_cli("estimate", "request", "--job", job_id, "--prompt-tokens",
                             "300", "--output-tokens", "120", "--json", env=env)
        estimate = json.loads(estimated.stdout) if estimated.returncode == 0 else None
        truth_start, truth_end = schedule.steady_bounds_s
        truth_j = _energy_within(agent.db_url, job_id, truth_start, truth_end)
    serving = report["serving"]
    window = serving["steady_window"]
    assert window["rule"] == "batch_full"
    # The window's bounds within 3 s of the true ones.
    assert abs(window["start_s"] - truth_start) <= 3.0, (window["start_s"] - truth_start)
    assert abs(window["end_s"] - truth_end) <= 3.0, (window["end_s"] - truth_end)
    # Its J per output token within 5 % of the truth in the true window...
    truth_per_token = truth_j / (RATES.output_tokens_per_s * schedule.steady_s)
    assert window["j_per_output_token"] == pytest.approx(truth_per_token, rel=0.05)
    # ... while the whole job's differs from it by more than 15 %.
    whole = report["per_unit"]["output_token"]["energy_j"]
    assert abs(whole / truth_per_token - 1) > 0.15
    assert serving["whole_job"]["j_per_output_token"] == pytest.approx(whole, rel=0.02)
    # compare says the same of the window, or says why it cannot.
    (row,) = compared["rows"]
    steady = row["steady_state"]
    assert steady["unit"] == "output_token" and steady["runs"] == 1
    if window["verdict"] == "valid":
        assert steady["valid_runs"] == 1
        assert steady["energy_per_unit_j"] == pytest.approx(window["j_per_output_token"],
                                                            rel=1e-6)
    else:
        assert steady["valid_runs"] == 0 and steady["energy_per_unit_j"] is None
        assert steady["note"] and window["reason"]
    # Per request: the engine's length histograms (every request 50 + 200 tokens).
    requests = serving["request_energy"]
    split = serving["token_split"]
    if split["separable"]:
        assert requests["p50_j"] == pytest.approx(
            requests["p50_prompt_tokens"] * split["j_per_prefill_token"]
            + requests["p50_output_tokens"] * split["j_per_decode_token"], rel=1e-6)
        assert estimate["energy_j"] == pytest.approx(
            300 * split["j_per_prefill_token"] + 120 * split["j_per_decode_token"],
            rel=1e-6)
    else:  # one schedule scales both rates alike: they move together
        assert split["reason"] and estimate is None
    assert requests["ml_energy_j"] == pytest.approx(
        window["j_per_output_token"] * requests["mean_output_tokens"], rel=1e-6)
    assert requests["mean_output_tokens"] == pytest.approx(200.0, rel=0.02)


def test_a_window_with_power_missing_is_flagged(tmp_path):
    """The counter freezes for 12 s of a 50 s steady window (24 %): the window is flagged
    in the report and in compare, with the reason."""
    schedule = LoadSchedule(start_s=time.time() + LEAD_S, ramp_s=5.0, steady_s=50.0,
                            drain_s=5.0)
    drivers: list = []
    with agent_on_fake_rapl(tmp_path, "--flush-interval", "1", drivers=drivers,
                            energy_now=_energy_now(schedule)) as agent, \
            ServingEngineProcess("vllm", {MODEL: RATES}, schedule=schedule) as engine:
        (driver,) = drivers

        def freeze_for_12_s(job_id: str) -> None:
            """The counter frozen until the agent's trace of the job (flushed every
            second) holds 12 s without a measured power tick."""
            driver.freeze()
            try:
                wait_for(lambda: _missing_power_s(agent.db_url, job_id) >= 12.0,
                         timeout_s=60, every_s=0.2)
            finally:
                driver.thaw(catch_up=True)

        summary = _serve(agent, engine, schedule, "llm-frozen", during=freeze_for_12_s)
        env = agent.client_env()
        job_id = summary["id"]
        report = json.loads(read_cli("report", "--format", "json", job_id, env=env).stdout)
        compared = json.loads(read_cli("compare", "--jobs", job_id, "--unit", "output_token",
                                       "--json", env=env).stdout)
    window = report["serving"]["steady_window"]
    assert window["verdict"] != "valid"
    assert window["power_coverage"] < 0.9
    assert "power" in window["reason"]
    (row,) = compared["rows"]
    assert row["steady_state"]["valid_runs"] == 0
    assert row["steady_state"]["energy_per_unit_j"] is None
    assert "power" in row["steady_state"]["note"]


def _stored_trace(db_url: str, job_id: str):
    traces = job_serving_traces(make_engine(db_url), [job_id]).get(job_id, [])
    return traces[0] if traces else None


def test_a_serving_jobs_trace_survives_a_kill_9_of_the_agent(tmp_path):
    """The trace is stored with the job and read back when the agent restarts: after a
    `kill -9` and a restart, the stored trace keeps every point of before, goes on from
    them with energy and tokens still counted since the job began, and the seconds the
    agent was down count as neither measured power nor an engine's answer."""
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**13)
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", "0.25", "--node", "n1",
            "--flush-interval", "1")
    code = "import sys; sys.stdin.read()"
    with fake.drive("intel-rapl:0", power_w=60.0, hz=500), \
            ServingEngineProcess("vllm", {MODEL: RATES}) as engine:
        with agent_at_head(tmp_path, *args) as agent:
            api_port = agent.api_port
            run = subprocess.Popen(
                [JOULESTAT, "run", "--name", "llm-crash", "--kind", "inference", "--json",
                 "--serving-metrics", engine.url, "--", sys.executable, "-c", code],
                env=agent.client_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
            try:
                job_id = wait_for(lambda: jobs_in_store(agent.client_env())
                                  .get("llm-crash", {}).get("id"), timeout_s=60, every_s=0.5)
                before = wait_for(lambda: (trace := _stored_trace(agent.db_url, job_id))
                                  and len(trace.points) >= 20 and trace, timeout_s=60,
                                  every_s=0.5)
                agent.proc.send_signal(signal.SIGKILL)
                agent.proc.wait()
                killed_s = time.time()
            except BaseException:
                run.kill()
                run.communicate()
                raise
        # Down for a while (more than 5 ticks: a gap), then restarted as a supervisor would.
        wait_for(lambda: time.time() >= killed_s + 3, timeout_s=10, every_s=0.2)
        with agent_at_head(tmp_path, *args, api_port=api_port) as agent:
            after = wait_for(lambda: (trace := _stored_trace(agent.db_url, job_id))
                             and sum(p.t_s > killed_s for p in trace.points) >= 20 and trace,
                             timeout_s=60, every_s=0.5)
            summary = summary_of(run)  # its stdin closed: the job's command ends
            assert summary["final"] is True and summary["status"] == "ended", summary
    # Every point of before is still there, unchanged (fewer than 1,024: none halved).
    assert after.points[:len(before.points)] == before.points
    resumed = [p for p in after.points if p.t_s > killed_s]
    first_after = resumed[0]
    last_before = after.points[after.points.index(first_after) - 1]
    # Counted on from where it was: cumulative, never back to zero.
    for field in ("energy_j", "output_tokens", "prompt_tokens", "requests", "power_s",
                  "answered_s"):
        values = [getattr(p, field) for p in after.points]
        assert values == sorted(values), field
    assert after.points[-1].output_tokens > last_before.output_tokens > 0
    # The tokens over the restart are the server's (its counters ran on): their rate
    # over the whole trace is the server's rate.
    span_s = after.points[-1].t_s - after.points[0].t_s
    rate = (after.points[-1].output_tokens - after.points[0].output_tokens) / span_s
    assert rate == pytest.approx(RATES.output_tokens_per_s, rel=0.1)
    # The gap counts as neither measured nor answered.
    gap_s = first_after.t_s - last_before.t_s
    assert gap_s >= 3
    assert first_after.power_s - last_before.power_s < gap_s / 2
    assert first_after.answered_s - last_before.answered_s < gap_s / 2
