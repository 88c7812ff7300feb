"""Serving steady-state figures (issue 49) read back from a real store, through the real
commands and the dashboard: ``joulestat estimate request``, ``joulestat report``,
``joulestat compare`` and the Compare page.

The store is filled through the agent's writer (:class:`StoreWriter`: ticks, the job's
shares of them, its units per tick, and its :class:`JobRecord` with ``serving_trace``)
from one synthetic schedule per job, so the energy and unit rows and the trace agree:

* ``separable``: 120 s at 1 s ticks, the batch full (``running`` 16) throughout, prompt
  and output token rates varying independently; power = 50 W + 0.1 J per prompt token +
  0.4 J per output token, plus a little seeded noise. Each 10 s part of the trace holds
  the same tokens (the per-second rates are an independent shuffle of one set of values
  per part), so J per output token is steady from part to part while the 5 s bins the
  prefill/decode fit uses still vary independently: the window is valid and the split
  separable.
* ``together``: the same, but the prompt rate is 0.25 x the output rate (not separable),
  and the power counter is frozen for the middle 30 s (25 % of the trace: power covers
  75 % of the window, under the 95 % needed), its energy caught up by the tick after.
* ``plain``: an inference job counting output tokens with no serving trace.

Each job runs on its own node and instance type, so a comparison by instance type has a
row per job. Expected figures come from the schedule (the truth) or from the report's
JSON (what every view must agree with), never from the analysis module.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from joulestat.core import units as fmt
from joulestat.core.histogram import Histogram
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo, Share
from joulestat.core.serving_trace import ServingTrace, TracePoint
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter
from tests.helpers.agent_process import read_cli
from tests.helpers.dashboard_app import APP

T0 = 1_700_000_040.0  # a minute boundary
SPAN_S = 120
PART_S = 10  # the window's parts (steady_state.SUB_WINDOW_S): each holds the same tokens
BASE_W, J_PER_PROMPT, J_PER_OUTPUT = 50.0, 0.1, 0.4
NOISE_W = 2.0  # seeded Gaussian noise on each second's power
RUNNING = 16.0
GAP = (45, 75)  # `together`: ticks (45, 75] have no measured power (25 % of the trace)
PROMPT_LE = (64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, math.inf)
OUTPUT_LE = (32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, math.inf)
REQUESTS_PER_PART = 15
# The request `estimate request` is asked about.
ASK_PROMPT, ASK_OUTPUT = 300.0, 120.0
DEVICES = [DeviceInfo("accelerator", "0", "nvml_energy", model="A10G", uuid="GPU-1", index=0)]


@dataclass
class Synthetic:
    """One job's schedule: per second its energy, tokens and requests; its trace."""

    job_id: str
    instance_type: str
    energy_j: list[float] = field(default_factory=list)  # per tick i (i-1, i]
    prompt: list[float] = field(default_factory=list)
    output: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)
    prompt_lengths: list[float] = field(default_factory=list)
    output_lengths: list[float] = field(default_factory=list)
    trace: ServingTrace | None = None


def _histogram(lengths: list[float], bounds: tuple[float, ...]) -> Histogram:
    buckets = tuple((le, float(sum(1 for n in lengths if n <= le))) for le in bounds)
    return Histogram(buckets, float(sum(lengths)), float(len(lengths)))


def quantile(q: float, lengths: list[float], bounds: tuple[float, ...]) -> float:
    """Prometheus' histogram_quantile of ``lengths`` bucketed at ``bounds`` (the oracle:
    linear inside the bucket the rank falls in, the first bucket from 0)."""
    rank = q * len(lengths)
    lower, below = 0.0, 0.0
    for le in bounds:
        count = sum(1 for n in lengths if n <= le)
        if count >= rank:
            assert math.isfinite(le), "the quantile must fall in a finite bucket"
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    raise AssertionError("rank past the last bucket")


def _part_rates(rng: random.Random, total: float) -> list[float]:
    """PART_S per-second values adding up to ``total``, uneven."""
    weights = [rng.uniform(0.3, 1.7) for _ in range(PART_S)]
    return [total * w / sum(weights) for w in weights]


def schedule(job_id: str, instance_type: str, seed: int, together: bool) -> Synthetic:
    rng = random.Random(seed)
    parts = SPAN_S // PART_S
    found = Synthetic(job_id, instance_type)
    count = parts * REQUESTS_PER_PART
    found.output_lengths = [float(max(1, round(rng.lognormvariate(math.log(200), 0.6))))
                            for _ in range(count)]
    if together:  # every request's prompt a quarter of its output: rates move together
        found.prompt_lengths = [0.25 * n for n in found.output_lengths]
    else:
        found.prompt_lengths = [float(max(1, round(rng.lognormvariate(math.log(400), 0.5))))
                                for _ in range(count)]
    output_values = _part_rates(rng, sum(found.output_lengths) / parts)
    prompt_values = _part_rates(rng, sum(found.prompt_lengths) / parts)
    for _ in range(parts):
        output = output_values[:]
        rng.shuffle(output)
        if together:
            prompt = [0.25 * o for o in output]
        else:
            prompt = prompt_values[:]
            rng.shuffle(prompt)  # independent of the output's order
        found.output += output
        found.prompt += prompt
        found.requests += [REQUESTS_PER_PART / PART_S] * PART_S
    found.energy_j = [BASE_W + J_PER_PROMPT * p + J_PER_OUTPUT * o + rng.gauss(0.0, NOISE_W)
                      for p, o in zip(found.prompt, found.output, strict=True)]
    found.trace = _trace(found, frozen=GAP if together else None)
    return found


def _trace(job: Synthetic, frozen: tuple[int, int] | None) -> ServingTrace:
    """The agent's points: cumulative energy, tokens and requests at each tick's end;
    a frozen counter's ticks add neither energy nor power seconds, the tick after it
    catches the energy up."""
    points = [TracePoint(T0, 0.0, 0.0, 0.0, 0.0, RUNNING, 2.0, 0.0, 0.0)]
    energy = output = prompt = requests = power_s = answered_s = 0.0
    owed = 0.0
    for i in range(1, SPAN_S + 1):
        output += job.output[i - 1]
        prompt += job.prompt[i - 1]
        requests += job.requests[i - 1]
        answered_s += 1.0
        if frozen is not None and frozen[0] < i <= frozen[1]:
            owed += job.energy_j[i - 1]
        else:
            energy += owed + job.energy_j[i - 1]
            owed = 0.0
            power_s += 1.0
        points.append(TracePoint(T0 + i, energy, output, prompt, requests, RUNNING, 2.0,
                                 power_s, answered_s))
    return ServingTrace(1.0, tuple(points), _histogram(job.prompt_lengths, PROMPT_LE),
                        _histogram(job.output_lengths, OUTPUT_LE))


def _record(job_id: str, ended_s: float | None, trace: ServingTrace | None) -> JobRecord:
    return JobRecord(id=job_id, name=f"serve-{job_id}", kind="inference", labels={},
                     pids=frozenset({100}), started_s=T0, origin="api", ended_s=ended_s,
                     serving_trace=trace)


def write_job(engine, job: Synthetic, frozen: tuple[int, int] | None) -> None:
    """The job's ticks on its own node, all its energy given to it (BASE_W of each
    second as idle), its units per tick, and its record with the trace at its end."""
    node = NodeInfo(f"node-{job.job_id}", job.instance_type, "us-east-1", "EPYC", "0.1.0")
    writer = StoreWriter(engine, node, DEVICES, raw_retention_s=7 * 86_400)
    writer.save_job(_record(job.job_id, None, None))

    def tick(t0: float, t1: float, energy_j: float) -> None:
        entry = Tick(t0, t1, (TickEntry("accelerator", "0", "nvml_energy", energy_j),))
        writer.add(entry)
        idle = BASE_W * (t1 - t0)
        writer.add_shares(entry, [Share(job.job_id, "accelerator", "0", "nvml_energy",
                                        energy_j - idle, idle)])

    owed_from = None
    for i in range(1, SPAN_S + 1):
        if frozen is not None and frozen[0] < i <= frozen[1]:
            owed_from = T0 + frozen[0]
        elif owed_from is not None:  # the catch-up tick: the frozen seconds' energy
            tick(owed_from, T0 + i, sum(job.energy_j[frozen[0]:i]))
            owed_from = None
        else:
            tick(T0 + i - 1, T0 + i, job.energy_j[i - 1])
        writer.add_units(job.job_id, T0 + i, {"output_token": job.output[i - 1],
                                              "prompt_token": job.prompt[i - 1],
                                              "request": job.requests[i - 1]})
    assert writer.flush()
    writer.save_job(_record(job.job_id, T0 + SPAN_S, job.trace))
    assert writer.flush()


def write_plain(engine) -> None:
    """An inference job counting output tokens, with no serving trace."""
    node = NodeInfo("node-plain", "inf2.xlarge", "us-east-1", "EPYC", "0.1.0")
    writer = StoreWriter(engine, node, DEVICES, raw_retention_s=7 * 86_400)
    writer.save_job(_record("plain", None, None))
    for i in range(1, 61):
        entry = Tick(T0 + i - 1, T0 + i, (TickEntry("accelerator", "0", "nvml_energy", 80.0),))
        writer.add(entry)
        writer.add_shares(entry, [Share("plain", "accelerator", "0", "nvml_energy", 30.0,
                                        50.0)])
        writer.add_units("plain", T0 + i, {"output_token": 100.0})
    writer.save_job(_record("plain", T0 + 60, None))
    assert writer.flush()


@dataclass(frozen=True)
class Store:
    url: str
    separable: Synthetic
    together: Synthetic


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path_factory.mktemp('steady') / 'serving.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    separable = schedule("separable", "g5.xlarge", seed=49, together=False)
    together = schedule("together", "g5.2xlarge", seed=50, together=True)
    write_job(engine, separable, None)
    write_job(engine, together, GAP)
    write_plain(engine)
    engine.dispose()
    yield Store(url, separable, together)


def cli(url: str, *args: str):
    return read_cli(*args, "--db", url)


def cli_json(url: str, *args: str) -> Any:
    result = cli(url, *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def reports(store: Store) -> dict[str, dict[str, Any]]:
    return {job: cli_json(store.url, "report", "--format", "json", job)
            for job in ("separable", "together")}


def estimate(url: str, job: str, *extra: str):
    return cli(url, "estimate", "request", "--job", job, "--prompt-tokens",
               f"{ASK_PROMPT:g}", "--output-tokens", f"{ASK_OUTPUT:g}", *extra)


# -- the store holds what the schedule says -------------------------------------------


def test_the_trace_and_the_store_rows_agree(store, reports):
    """The report's whole-job figures (from the stored trace) are the store's per-unit
    ones (from its energy and unit rows), and the schedule's."""
    job = store.separable
    report = reports["separable"]
    whole = report["serving"]["whole_job"]
    truth_j = sum(job.energy_j)
    assert whole["energy_j"] == pytest.approx(truth_j, rel=1e-6)
    assert whole["output_tokens"] == pytest.approx(sum(job.output), rel=1e-6)
    assert whole["prompt_tokens"] == pytest.approx(sum(job.prompt), rel=1e-6)
    assert report["per_unit"]["output_token"]["energy_j"] == pytest.approx(
        whole["j_per_output_token"], rel=1e-6)
    assert report["per_unit"]["prompt_token"]["energy_j"] == pytest.approx(
        whole["j_per_prompt_token"], rel=1e-6)
    # `together`: the frozen counter's energy arrives late but whole
    together = reports["together"]["serving"]["whole_job"]
    assert together["energy_j"] == pytest.approx(sum(store.together.energy_j), rel=1e-6)
    assert together["power_coverage"] == pytest.approx(0.75, abs=1e-9)


# -- 1. estimate request on a separable job -------------------------------------------


def test_estimate_request_is_the_split_times_the_lengths(store, reports):
    split = reports["separable"]["serving"]["token_split"]
    assert split["separable"] is True, split["reason"]
    found = json.loads(estimate(store.url, "separable", "--json").stdout)
    assert found["job_id"] == "separable"
    assert (found["prompt_tokens"], found["output_tokens"]) == (ASK_PROMPT, ASK_OUTPUT)
    assert found["j_per_prefill_token"] == pytest.approx(split["j_per_prefill_token"],
                                                         rel=1e-9)
    assert found["j_per_decode_token"] == pytest.approx(split["j_per_decode_token"],
                                                        rel=1e-9)
    assert found["energy_j"] == pytest.approx(
        ASK_PROMPT * split["j_per_prefill_token"] + ASK_OUTPUT * split["j_per_decode_token"],
        rel=1e-9)
    # the fit finds the schedule's costs
    assert found["j_per_prefill_token"] == pytest.approx(J_PER_PROMPT, rel=0.15)
    assert found["j_per_decode_token"] == pytest.approx(J_PER_OUTPUT, rel=0.15)
    assert split["base_w"] == pytest.approx(BASE_W, rel=0.15)
    truth = ASK_PROMPT * J_PER_PROMPT + ASK_OUTPUT * J_PER_OUTPUT
    assert found["energy_j"] == pytest.approx(truth, rel=0.15)
    assert 0 <= found["low_j"] <= found["energy_j"] <= found["high_j"]
    assert found["low_j"] <= truth <= found["high_j"]  # two standard errors hold it

    # its provenance is the job's, classed as compare classes the job's row
    [row] = cli_json(store.url, "compare", "--jobs", "separable", "--unit", "output_token",
                     "--json")["rows"]
    assert found["energy_class"] == row["energy_class"] != ""

    text = estimate(store.url, "separable")
    assert text.returncode == 0, text.stderr
    assert fmt.energy(found["energy_j"]) in text.stdout
    assert "separable" in text.stdout and found["energy_class"] in text.stdout


# -- 2. estimate request refuses what it cannot say -----------------------------------


def test_estimate_request_refuses_rates_that_move_together(store, reports):
    split = reports["together"]["serving"]["token_split"]
    assert split["separable"] is False
    assert split["j_per_prefill_token"] is None and split["j_per_decode_token"] is None
    for extra in ((), ("--json",)):
        result = estimate(store.url, "together", *extra)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert result.stdout == ""
        assert "together" in result.stderr and "correlation" in result.stderr
        assert split["reason"] in result.stderr


def test_estimate_request_refuses_a_job_without_a_trace_or_unknown(store):
    result = estimate(store.url, "plain")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "no serving trace" in result.stderr and "plain" in result.stderr
    unknown = estimate(store.url, "no-such-job")
    assert unknown.returncode != 0 and unknown.stdout == ""
    assert "no-such-job" in unknown.stderr


# -- 3. the report's request energy and its tables ------------------------------------


def test_report_request_energy_at_the_histograms_percentiles(store, reports):
    job = store.separable
    serving = reports["separable"]["serving"]
    split, requests = serving["token_split"], serving["request_energy"]
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        prompt = quantile(q, job.prompt_lengths, PROMPT_LE)
        output = quantile(q, job.output_lengths, OUTPUT_LE)
        assert requests[f"{name}_prompt_tokens"] == pytest.approx(prompt, rel=1e-9)
        assert requests[f"{name}_output_tokens"] == pytest.approx(output, rel=1e-9)
        expected = prompt * split["j_per_prefill_token"] + output * split["j_per_decode_token"]
        assert requests[f"{name}_j"] == pytest.approx(expected, rel=1e-9)
        assert requests[f"{name}_low_j"] <= requests[f"{name}_j"] <= requests[f"{name}_high_j"]
        truth = prompt * J_PER_PROMPT + output * J_PER_OUTPUT
        assert requests[f"{name}_j"] == pytest.approx(truth, rel=0.15)
    assert requests["p99_j"] > requests["p50_j"]
    mean_output = sum(job.output_lengths) / len(job.output_lengths)
    assert requests["mean_output_tokens"] == pytest.approx(mean_output, rel=1e-9)
    assert requests["ml_energy_j"] == pytest.approx(
        serving["steady_window"]["j_per_output_token"] * mean_output, rel=1e-9)
    assert requests["reason"] is None


def test_report_steady_window_is_the_whole_batch_full_trace(store, reports):
    job = store.separable
    window = reports["separable"]["serving"]["steady_window"]
    assert (window["rule"], window["verdict"], window["reason"]) == ("batch_full", "valid",
                                                                    None)
    assert (window["start_s"], window["end_s"]) == (T0, T0 + SPAN_S)
    assert window["parts"] == SPAN_S // PART_S
    assert window["cv"] < 0.03
    assert window["j_per_output_token"] == pytest.approx(sum(job.energy_j) / sum(job.output),
                                                         rel=1e-6)
    flagged = reports["together"]["serving"]["steady_window"]
    assert flagged["verdict"] == "unstable"
    assert flagged["power_coverage"] == pytest.approx(0.75, abs=1e-9)
    assert "power measured for 75 %" in flagged["reason"]


def test_report_html_has_the_serving_tables(store):
    for job in ("separable", "together"):
        result = cli(store.url, "report", "--format", "html", job)
        assert result.returncode == 0, result.stderr
        assert "Serving: steady state" in result.stdout
        assert "Serving: energy per token and request" in result.stdout
    plain = cli(store.url, "report", "--format", "html", "plain")
    assert plain.returncode == 0, plain.stderr
    assert "Serving: steady state" not in plain.stdout
    assert cli_json(store.url, "report", "--format", "json", "plain")["serving"] is None


# -- 4. compare prefers valid windows -------------------------------------------------


def steady_of(url: str, job: str) -> dict[str, Any]:
    found = cli_json(url, "compare", "--jobs", job, "--unit", "output_token", "--json")
    (row,) = found["rows"]
    return row


def test_compare_flags_the_window_without_power(store):
    row = steady_of(store.url, "together")
    steady = row["steady_state"]
    assert steady["unit"] == "output_token"
    assert (steady["valid_runs"], steady["runs"]) == (0, 1)
    assert steady["energy_per_unit_j"] is None
    assert "power" in steady["note"]
    assert steady["verdicts"] == {"unstable": 1}


def test_compare_uses_the_valid_window(store, reports):
    row = steady_of(store.url, "separable")
    steady = row["steady_state"]
    assert (steady["valid_runs"], steady["runs"]) == (1, 1)
    window = reports["separable"]["serving"]["steady_window"]
    assert steady["energy_per_unit_j"] == pytest.approx(window["j_per_output_token"],
                                                        rel=1e-9)
    assert steady["window_s"] == pytest.approx(SPAN_S)
    assert steady["note"] is None
    text = cli(store.url, "compare", "--jobs", "separable", "--unit", "output_token")
    assert text.returncode == 0, text.stderr
    assert "steady state" in text.stdout
    assert fmt.energy(steady["energy_per_unit_j"]) in text.stdout
    # a job without a trace has no steady-state figure
    plain = cli_json(store.url, "compare", "--jobs", "plain", "--unit", "output_token",
                     "--json")
    (plain_row,) = plain["rows"]
    assert plain_row.get("steady_state") is None


# -- 5. the dashboard's Compare page --------------------------------------------------


def test_compare_page_shows_the_steady_state_table(store, monkeypatch):
    monkeypatch.setenv("JOULESTAT_DB", store.url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="cmp_kind").set_value("inference").run()
    at.selectbox(key="cmp_unit").set_value("output_token").run()
    assert not at.exception, [e.value for e in at.exception]
    [table] = [d.value for d in at.dataframe if "steady state" in d.value.columns]
    assert {"whole job", "steady state", "valid windows", "why not"} <= set(table.columns)
    rows = table.set_index("group")
    assert set(rows.index) == {"g5.xlarge", "g5.2xlarge"}  # the untraced row has none
    flagged = rows.loc["g5.2xlarge"]
    assert flagged["valid windows"] == "0 of 1"
    assert "power" in flagged["why not"]
    assert flagged["steady state"] is None or pd.isna(flagged["steady state"])
    valid = rows.loc["g5.xlarge"]
    assert valid["valid windows"] == "1 of 1" and valid["why not"] == ""
    expected = steady_of(store.url, "separable")["steady_state"]["energy_per_unit_j"]
    assert valid["steady state"] == pytest.approx(expected, rel=1e-9)
