"""One job measured under ``--idle-policy share`` and again under ``exclude`` (issue 24,
acceptance 3): ``joulestat compare``, the reports and the dashboard each give its energy
per unit twice, in all and above idle, and say which policy applied.

The real agent runs twice over one store, on an empty sysfs (so the node's energy is the
CPU estimate, whose idle power is known), each time beside the same ``joulestat run``
job: a few seconds of CPU work counting ``step`` units. Under ``share`` the lone job
carries the node's idle power; under ``exclude`` it carries what its work added. Expected
figures come from the store's rows (``joulestat jobs --json``: dynamic and idle joules per
component) and the commands' JSON, never from the code under test.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from joulestat.core import units
from joulestat.reports.idle import policy_words
from tests.helpers.agent_process import (
    agent_at_head,
    jobs_in_store,
    read_cli,
    start_run,
    summary_of,
)
from tests.helpers.dashboard_app import run_page
from tests.helpers.workloads import looping

# One worker builds the module's store once (pytest-xdist --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_idle_policy_figures")]

WORK = looping("""
    work(0.02)
    count("step", 1)
    """, "{seconds}", "from joulestat import count")
POLICIES = ("share", "exclude")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict]]:
    """The store's URL and, per policy, the job as ``joulestat jobs --json`` lists it."""
    tmp_path: Path = tmp_path_factory.mktemp("idle_policy")
    jobs: dict[str, dict] = {}
    url = ""
    for policy in POLICIES:
        with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.25",
                           "--idle-policy", policy, "--node", "n1") as agent:
            run = start_run(f"job-{policy}", WORK.format(seconds=3), agent.client_env(),
                            "--kind", "training")
            summary = summary_of(run)
            assert summary["exit_code"] == 0 and summary["mode"] == "agent", summary
            assert agent.stop() == 0
            url = agent.db_url
            jobs[policy] = jobs_in_store(agent.client_env())[f"job-{policy}"]
    return url, jobs


def energy(job: dict) -> tuple[float, float]:
    """(total, dynamic) joules of a job as ``joulestat jobs --json`` lists it."""
    dynamic = sum(job["dynamic_j"].values())
    return dynamic + sum(job["idle_j"].values()), dynamic


def compare_json(url: str, *args: str) -> dict:
    result = read_cli("compare", "--db", url, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_store_holds_idle_power_under_share_only(measured):
    _url, jobs = measured
    share_j, share_dynamic_j = energy(jobs["share"])
    exclude_j, exclude_dynamic_j = energy(jobs["exclude"])
    print(f"share: {share_j:.2f} J ({share_dynamic_j:.2f} J dynamic); "
          f"exclude: {exclude_j:.2f} J ({exclude_dynamic_j:.2f} J dynamic)")
    assert share_j > share_dynamic_j > 0
    assert exclude_j == pytest.approx(exclude_dynamic_j) and exclude_dynamic_j > 0
    assert jobs["share"]["units"]["step"] > 50 and jobs["exclude"]["units"]["step"] > 50


def test_compare_gives_both_figures_and_each_rows_policy(measured):
    url, jobs = measured
    out = compare_json(url, "--jobs", "job-share", "job-exclude", "--unit", "step")
    share, exclude = out["rows"]
    assert (share["job"], exclude["job"]) == ("job-share", "job-exclude")
    for row, policy in ((share, "share"), (exclude, "exclude")):
        total_j, dynamic_j = energy(jobs[policy])
        steps = jobs[policy]["units"]["step"]
        assert row["energy_per_unit_j"] == pytest.approx(total_j / steps, rel=1e-6)
        assert row["dynamic_per_unit_j"] == pytest.approx(dynamic_j / steps, rel=1e-6)
        assert row["idle_policy"] == policy
    assert out["idle_policy"] == "mixed"
    assert share["energy_per_unit_j"] > share["dynamic_per_unit_j"]
    assert exclude["energy_per_unit_j"] == pytest.approx(exclude["dynamic_per_unit_j"])
    assert exclude["dynamic_pct"] == pytest.approx(
        (exclude["dynamic_per_unit_j"] / share["dynamic_per_unit_j"] - 1) * 100)
    # the text table says each row's policy where they differ
    text = read_cli("compare", "--db", url, "--jobs", "job-share", "job-exclude", "--wide")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert policy_words("mixed", jobs=True) in lines[1]
    header = next(line for line in lines if line.startswith("job "))
    assert "dynamic/step" in header and "idle policy" in header
    rows = {line.split()[0]: line.split() for line in lines
            if line.startswith(("job-share", "job-exclude")) and " vs " not in line}
    assert "share" in rows["job-share"] and "exclude" in rows["job-exclude"]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_report_gives_both_figures_and_the_policy(measured, policy):
    url, jobs = measured
    total_j, dynamic_j = energy(jobs[policy])
    steps = jobs[policy]["units"]["step"]
    report = read_cli("report", f"job-{policy}", "--db", url, "--format", "json")
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["idle_policy"] == policy
    assert data["per_unit"]["step"]["energy_j"] == pytest.approx(total_j / steps, rel=1e-6)
    assert data["per_unit"]["step"]["dynamic_energy_j"] == pytest.approx(dynamic_j / steps,
                                                                         rel=1e-6)
    assert f"(idle policy {policy})" in data["headline"]
    table = read_cli("report", f"job-{policy}", "--db", url, "--format", "csv")
    assert table.returncode == 0, table.stderr
    [row] = csv.DictReader(io.StringIO(table.stdout))
    assert row["idle_policy"] == policy
    assert float(row["dynamic_energy_j_per_unit"].removeprefix("step=")) == pytest.approx(
        dynamic_j / steps, rel=1e-9)
    assert float(row["energy_j_per_unit"].removeprefix("step=")) == pytest.approx(
        total_j / steps, rel=1e-9)


def test_the_dashboard_gives_both_figures_and_the_policy(measured, monkeypatch):
    url, jobs = measured
    ids = [jobs[p]["id"] for p in POLICIES]
    at = run_page(url, "pages/compare.py", monkeypatch, kind="training", unit="step",
                  by="job", jobs=",".join(ids))
    [table] = [d.value for d in at.dataframe if "dynamic energy per step" in d.value.columns]
    table = table.set_index("group")
    out = compare_json(url, "--jobs", *ids, "--unit", "step")
    for row in out["rows"]:
        shown = table.loc[row["job"]]
        assert shown["energy per step"] == pytest.approx(row["energy_per_unit_j"], rel=1e-9)
        assert shown["dynamic energy per step"] == pytest.approx(row["dynamic_per_unit_j"],
                                                                 rel=1e-9)
        assert shown["idle policy"] == row["idle_policy"]
    said = policy_words("mixed", jobs=True)
    assert any(said[:1].upper() + said[1:] in c.value for c in at.caption)

    for policy in POLICIES:
        detail = run_page(url, "pages/job_detail.py", monkeypatch, job=jobs[policy]["id"])
        metrics = {m.label: m.value for m in detail.metric}
        report = json.loads(read_cli("report", jobs[policy]["id"], "--db", url).stdout)
        per = report["per_unit"]["step"]
        assert metrics["Energy per step"] == units.energy(per["energy_j"])
        assert metrics["Dynamic energy per step"] == units.energy(per["dynamic_energy_j"])
        said = policy_words(policy)
        assert any(said[:1].upper() + said[1:] in c.value for c in detail.caption)
