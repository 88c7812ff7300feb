"""Issue 27: every figure with its bounds, and comparisons that say when a difference is
real, at the level a user meets them: the real agent on a fake RAPL tree, ``joulestat
run`` estimated on this VM, ``joulestat report`` and ``joulestat compare`` (text and
JSON) through the CLI, and the Compare page."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from joulestat.core import units
from joulestat.reports.compare import words
from joulestat.reports.model_error import estimator_error
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import agent_at_head, agent_env, in_memory, read_cli, run_cli
from tests.helpers.compare_store import PINNED, T0, TICK_S, compare_invoke, job, node, run_job
from tests.helpers.dashboard_app import run_page
from tests.helpers.report_checks import validate

BURN = "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass\n"


def _report(env: dict[str, str], name: str) -> dict:
    result = read_cli("report", name, "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report)
    return report


def test_a_job_measured_by_rapl_is_bounded_within_ten_percent(tmp_path: Path) -> None:
    """The real agent on a fake RAPL package and DRAM zone: a job's total bounds contain
    its figure and lie within +/-10 % of it (RAPL's +/-5 %, attribution's share)."""
    fake = FakePowercap(in_memory(tmp_path / "sys"))
    fake.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**13)
    fake.add_zone("intel-rapl:0:0", "dram", max_energy_range_uj=10**13)
    args = ("--sysfs-root", str(tmp_path / "sys"), "--interval", "0.25", "--node", "n1")
    with fake.drive("intel-rapl:0", power_w=60.0, hz=500), \
            fake.drive("intel-rapl:0:0", power_w=6.0, hz=500), \
            agent_at_head(tmp_path, *args) as agent:
        env = agent.client_env()
        result = run_cli("run", "--name", "rapl-job", "--", sys.executable, "-c", BURN,
                         env=env)
        assert result.returncode == 0, result.stderr
    report = _report(env, "rapl-job")
    total = report["energy_j"]["total"]
    low, high = report["energy_bounds_j"]["total"]
    print(f"rapl-job: {total:.2f} J, bounds {low:.2f}-{high:.2f} J "
          f"({low / total - 1:+.1%} / {high / total - 1:+.1%}), "
          f"sources {report['bounds']['sources']}")
    assert total > 0
    assert 0.9 * total <= low <= total <= high <= 1.1 * total
    assert report["sources"]["cpu"] == ["rapl"] and report["sources"]["dram"] == ["rapl"]
    assert report["bounds"]["sources"]["rapl"]["low_pct"] == pytest.approx(-5.0)
    assert report["bounds"]["attribution"]["basis"] == "measured"
    html = read_cli("report", "rapl-job", "--format", "html", env=env).stdout
    assert units.energy_range(low, high) in html


def test_a_job_estimated_on_this_vm_is_bounded_at_least_by_the_models_error(
        tmp_path: Path) -> None:
    """``joulestat run`` with no agent on this VM (no RAPL): the CPU is the ccf-vcpu
    estimate and DRAM the dram-gib one; their bounds are at least as wide as each
    model's error measured against published RAPL points, and contain the figure."""
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'vm.db'}")
    result = run_cli("run", "--name", "vm-job", "--interval", "0.25", "--", sys.executable,
                     "-c", BURN, env=env)
    assert result.returncode == 0, result.stderr
    report = _report(env, "vm-job")
    cpu_error = estimator_error("ccf-vcpu")
    assert cpu_error is not None
    assert report["sources"]["cpu"] == ["model:ccf-vcpu"]
    cpu_j = report["energy_j"]["cpu"]
    low, high = report["energy_bounds_j"]["cpu"]
    print(f"vm-job cpu: {cpu_j:.3f} J, bounds {low:.3f}-{high:.3f} J; ccf-vcpu error "
          f"MAPE {cpu_error.mape:.1%}, truth {cpu_error.low:+.1%}..{cpu_error.high:+.1%}")
    assert low <= cpu_j <= high
    assert (high - low) / cpu_j >= cpu_error.high - cpu_error.low
    total = report["energy_j"]["total"]
    low, high = report["energy_bounds_j"]["total"]
    assert low <= total <= high
    assert (high - low) / total >= cpu_error.mape
    accuracy = report["bounds"]["sources"]["model:ccf-vcpu"]
    assert accuracy["basis"] == "measured"
    assert accuracy["high_pct"] == pytest.approx(cpu_error.high * 100)


def _fill(url: str) -> dict[str, list[float]]:
    """Three runs on each of three setups, 100 inferences each: g5 at 10, 11, 9 J per
    inference; inf2 5 % above it, well inside the runs' spread; p4d three times it.
    Returns each setup's per-run energy per inference."""
    from joulestat.store import migrate
    from joulestat.store.engine import make_engine

    engine = make_engine(url)
    migrate.upgrade(engine)
    setups = {"g5.xlarge": [1000.0, 1100.0, 900.0], "inf2.xlarge": [1100.0, 1000.0, 1050.0],
              "p4d.24xlarge": [3000.0, 3100.0, 2900.0]}
    start = T0
    for setup, energies in setups.items():
        for n, gpu_j in enumerate(energies):
            run_job(engine, node(f"{setup}-{n}", setup),
                    job(f"j-{setup}-{n}", f"bert-{setup.split('.')[0]}", "inference", start,
                        TICK_S), ticks=1, gpu_j=gpu_j, units={"inference": 100})
            start += TICK_S
    engine.dispose()
    return {setup: [gpu_j / 100 for gpu_j in energies] for setup, energies in setups.items()}


def test_compare_pools_runs_and_says_which_differences_are_real(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    per_run = _fill(url)
    result = compare_invoke(url, "--by", "instance_type", "--baseline", "g5.xlarge",
                         "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    rows = {row["group"]: row for row in answer["rows"]}
    for setup, values in per_run.items():
        row = rows[setup]
        assert row["runs"] == 3
        assert row["runs_mean_j"] == pytest.approx(statistics.mean(values))
        assert row["runs_spread_j"] == pytest.approx(statistics.stdev(values))
        low, high = row["energy_bounds_per_unit_j"]
        assert low < row["energy_per_unit_j"] < high
        assert row["interval_j"] == pytest.approx(
            [low - row["runs_spread_j"], high + row["runs_spread_j"]])
    # inf2 is 5 % above g5, less than their combined spread: not distinguishable
    inf2, p4d = rows["inf2.xlarge"], rows["p4d.24xlarge"]
    assert inf2["energy_pct"] == pytest.approx(5.0)
    assert inf2["energy_distinguishable"] is False
    # p4d is three times g5: a real difference, written as one
    assert p4d["energy_distinguishable"] is True
    texts = {h["row"]: h for h in answer["headlines"]}
    assert ("energy, dynamic energy and CO2e per inference not distinguishable from the "
            "baseline") in texts["inf2.xlarge"]["text"]
    # said with the change and its interval, which holds no change (issue 46)
    low, high = inf2["energy_change_interval_pct"]
    assert low < 0 < high and inf2["energy_error_shared"] is False  # two instance types
    assert (f"not distinguishable from the baseline ({words.format_pct(5.0)}, "
            f"{words.format_pct(low).removesuffix(' %')} to {words.format_pct(high)})") in (
        texts["inf2.xlarge"]["text"])
    assert texts["p4d.24xlarge"]["energy_distinguishable"] is True
    assert f"{words.format_pct(p4d['energy_pct'])} energy per inference" in (
        texts["p4d.24xlarge"]["text"])
    # the text table says the same: n.d. in the energy delta column
    text = compare_invoke(url, "--by", "instance_type", "--baseline", "g5.xlarge", "--wide",
                          *PINNED)
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("inf2.xlarge "))
    assert f" {words.ND} " in line
    assert "inf2.xlarge vs g5.xlarge: " in text.stdout
    # --min-runs: three runs are fewer than four, said on stderr and in the notes
    few = compare_invoke(url, "--by", "instance_type", "--min-runs", "4", "--json", *PINNED)
    assert few.returncode == 0, few.stderr
    assert "--min-runs: g5.xlarge: 3 run(s), fewer than --min-runs 4" in few.stderr
    assert any("fewer than --min-runs 4" in n for n in json.loads(few.stdout)["notes"])
    bad = compare_invoke(url, "--min-runs", "0")
    assert bad.returncode == 2 and "--min-runs" in bad.stderr


def test_compare_by_name_pools_the_runs_of_a_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    per_run = _fill(url)
    result = compare_invoke(url, "--by", "name", "--baseline", "bert-g5", "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    rows = {row["group"]: row for row in json.loads(result.stdout)["rows"]}
    assert set(rows) == {"bert-g5", "bert-inf2", "bert-p4d"}
    assert rows["bert-g5"]["runs_spread_j"] == pytest.approx(
        statistics.stdev(per_run["g5.xlarge"]))
    assert rows["bert-inf2"]["energy_distinguishable"] is False
    assert rows["bert-p4d"]["energy_distinguishable"] is True


def test_the_compare_page_follows_the_same_rule(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _fill(url)
    at = run_page(url, "pages/compare.py", monkeypatch, by="instance_type",
                  baseline="g5.xlarge")
    lines = [m.value for m in at.markdown]
    inf2 = next(line for line in lines if line.startswith("**inf2.xlarge** vs g5.xlarge: "))
    p4d = next(line for line in lines if line.startswith("**p4d.24xlarge** vs g5.xlarge: "))
    assert "energy, dynamic energy and CO2e per inference not distinguishable" in inf2
    assert "not distinguishable" not in p4d
    table = at.dataframe[0].value.set_index("group")
    spread = table.at["g5.xlarge", "runs (mean ± spread)"]
    assert spread.endswith("3 runs") and "±" in spread
    assert "–" in table.at["p4d.24xlarge", "bounds"]


def test_the_compare_page_pools_the_runs_of_a_name(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's "by job name" mode (``by=name`` in its link), as ``--by name``."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    per_run = _fill(url)
    at = run_page(url, "pages/compare.py", monkeypatch, by="name", baseline="bert-g5")
    assert at.radio(key="cmp_mode").value == "by job name"
    table = at.dataframe[0].value.set_index("group")
    assert set(table.index) == {"bert-g5", "bert-inf2", "bert-p4d"}
    spread = table.at["bert-g5", "runs (mean ± spread)"]
    assert spread == (f"{units.energy(statistics.mean(per_run['g5.xlarge']))} ± "
                      f"{units.energy(statistics.stdev(per_run['g5.xlarge']))}, 3 runs")
    lines = [m.value for m in at.markdown]
    assert any(line.startswith("**bert-inf2** vs bert-g5: ") and "not distinguishable" in line
               for line in lines)


# Issue 46: 1 vs 2 threads on one VM, both estimated by ccf-vcpu (-55 %/+193 %-wide
# bounds): per inference, dynamic energy 2x apart, three runs each.
THREADS_DYNAMIC_J = {"1": [0.626, 0.640, 0.612], "2": [1.29, 1.25, 1.33]}


def _fill_threads(url: str) -> None:
    from joulestat.core.records import DeviceInfo, JobRecord
    from joulestat.core.records import Share as JobShare
    from joulestat.core.tick import Tick, TickEntry
    from joulestat.store import migrate
    from joulestat.store.engine import make_engine
    from joulestat.store.writer import StoreWriter

    engine = make_engine(url)
    migrate.upgrade(engine)
    writer = StoreWriter(engine, node("vm-1", "c6i.2xlarge"),
                         [DeviceInfo("cpu", "0", "model:ccf-vcpu", index=0)],
                         raw_retention_s=7 * 86400)
    start, per_job = T0, 1000.0  # inferences a run, one tick each
    for threads, runs in THREADS_DYNAMIC_J.items():
        for n, dynamic_per_unit_j in enumerate(runs):
            record = JobRecord(id=f"t{threads}-{n}", name="infer", kind="inference",
                               labels={"threads": threads}, pids=frozenset({1}),
                               started_s=start, origin="api", ended_s=start + TICK_S)
            writer.save_job(record)
            dynamic_j, idle_j = dynamic_per_unit_j * per_job, 200.0
            tick = Tick(start, start + TICK_S,
                        (TickEntry("cpu", "0", "model:ccf-vcpu", dynamic_j + idle_j),))
            writer.add(tick)
            writer.add_shares(tick, [JobShare(record.id, "cpu", "0", "model:ccf-vcpu",
                                              dynamic_j, idle_j)])
            writer.add_units(record.id, tick.t1_s, {"inference": per_job})
            start += TICK_S
    assert writer.flush()
    engine.dispose()


def test_one_estimator_on_one_node_tells_a_2x_difference_by_its_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimator's error is the same on both setups and cancels in their ratio, so
    the runs decide: ``compare`` (JSON, text) and the Compare page call the 2x real and
    give the change's interval, where the overlapping bounds once said "not
    distinguishable"."""
    url = f"sqlite:///{tmp_path / 'threads.db'}"
    _fill_threads(url)
    by = ("--by", "label:threads", "--baseline", "threads=1", *PINNED)
    result = compare_invoke(url, *by, "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    rows = {row["group"]: row for row in answer["rows"]}
    one, two = rows["threads=1"], rows["threads=2"]
    assert one["runs"] == two["runs"] == 3
    assert two["dynamic_per_unit_j"] / one["dynamic_per_unit_j"] == pytest.approx(
        statistics.fmean(THREADS_DYNAMIC_J["2"]) / statistics.fmean(THREADS_DYNAMIC_J["1"]))
    # each row's bounds are the estimator's, wide enough to overlap
    assert two["energy_bounds_per_unit_j"][0] < one["energy_bounds_per_unit_j"][1]
    assert two["energy_error_shared"] is True
    assert two["energy_distinguishable"] is True
    low, high = two["energy_change_interval_pct"]
    assert 0 < low < two["energy_pct"] < high
    headline = next(h for h in answer["headlines"] if h["row"] == "threads=2")
    assert headline["energy_distinguishable"] is True
    assert "not distinguishable" not in headline["text"]
    text = compare_invoke(url, *by, "--wide")  # the sentence on one line
    assert text.returncode == 0, text.stderr
    said = next(x for x in text.stdout.splitlines() if x.startswith("threads=2 vs threads=1: "))
    assert said == f"threads=2 vs threads=1: {headline['text']}"
    at = run_page(url, "pages/compare.py", monkeypatch, by="label:threads",
                  baseline="threads=1")
    lines = [m.value for m in at.markdown]
    page = next(line for line in lines if line.startswith("**threads=2** vs threads=1: "))
    assert "not distinguishable" not in page
    assert words.interval_words(_difference(two, one)) in page.replace("\\", "")


def _difference(row: dict, base: dict):
    """The row's difference from its JSON, as the words module says it."""
    from joulestat.reports.compare.difference import Difference

    ratio = 1 + row["energy_pct"] / 100
    low, high = row["energy_change_interval_pct"]
    return Difference(ratio, (1 + low / 100, 1 + high / 100), row["energy_error_shared"],
                      False)
