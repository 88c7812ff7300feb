"""What joulestat records about how it measured a job (its agent labels: ``cpu_source``,
``idle_policy``) stays apart from the user's labels, as a user meets it: the real
``joulestat run`` beside a real agent or in embedded mode, then ``jobs``, ``report``
(JSON, CSV, HTML) and ``compare`` (issue 24: "no label the agent added appears among a
report's or the dashboard's labels"; the dashboard's side is in
tests/unit/dashboard/test_apptest.py)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tests.helpers.agent_process import (
    agent_at_head,
    agent_env,
    read_cli,
    start_run,
    summary_of,
)
from tests.helpers.burners import wait_until_stored

NO_AGENT = "http://127.0.0.1:9"  # the discard port: nothing answers, so embedded mode
# A short burn that counts its samples into the job (compare needs a unit).
WORK = ("import time\nfrom joulestat import count\n"
        "while time.process_time() < 0.3: pass\ncount('sample', 100)")


def report(env: dict[str, str], job: str, fmt: str) -> str:
    done = read_cli("report", job, "--format", fmt, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def assert_apart(env: dict[str, str], name: str, labels: dict[str, str],
                 agent_labels: dict[str, str]) -> None:
    """``labels`` and ``agent_labels`` are the job's, each where it belongs, in `jobs
    --json` and in every report format."""
    done = read_cli("jobs", "--json", "--name", name, env=env)
    assert done.returncode == 0, done.stderr
    [listed] = json.loads(done.stdout)
    assert (listed["labels"], listed["agent_labels"]) == (labels, agent_labels)

    job = json.loads(report(env, name, "json"))["job"]
    assert (job["labels"], job["agent_labels"]) == (labels, agent_labels)

    [row] = list(csv.DictReader(io.StringIO(report(env, name, "csv"))))
    assert row["labels"] == "; ".join(f"{k}={v}" for k, v in labels.items())
    assert row["agent_labels"] == "; ".join(f"{k}={v}" for k, v in agent_labels.items())

    html = report(env, name, "html")
    shown = ", ".join(f"{k}={v}" for k, v in agent_labels.items())
    assert "Recorded by joulestat" in html and shown in html
    for key in agent_labels:
        # once, in its own row: never also among the labels
        assert html.count(f"{key}=") == 1, key


def test_run_beside_an_agent_keeps_its_cpu_source_and_idle_policy_out_of_the_labels(
        tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--idle-policy", "exclude") as agent:
        env = agent.client_env(JOULESTAT_SYSFS_ROOT=str(tmp_path))
        summary = summary_of(start_run("labelled", f"{WORK}", env, "--label", "team=nlp",
                                       "--kind", "training"))
        assert summary["mode"] == "agent" and summary["final"] is True
        # The summary the wrapper prints says them apart too.
        assert summary["labels"] == {"team": "nlp"}
        assert summary["agent_labels"] == {"cpu_source": "process tree",
                                           "idle_policy": "exclude"}
        wait_until_stored(env, {"labelled"})
        assert agent.stop() == 0
    # No cgroup file system under the wrapper's sysfs root: the process tree was read
    # (cgroups: tests/system/test_cgroup_jobs.py).
    assert_apart(env, "labelled", {"team": "nlp"},
                 {"cpu_source": "process tree", "idle_policy": "exclude"})

    # Grouping by a label sees the user's labels only.
    by_team = read_cli("compare", "--by", "label:team", "--json", env=env)
    assert by_team.returncode == 0, by_team.stderr
    assert [r["group"] for r in json.loads(by_team.stdout)["rows"]] == ["team=nlp"]
    by_source = read_cli("compare", "--by", "label:cpu_source", "--json", env=env)
    assert by_source.returncode == 2  # no job has such a label: refused, keys named
    assert "label 'cpu_source'" in by_source.stderr and "team" in by_source.stderr


def test_an_embedded_run_records_the_policy_it_attributed_under(tmp_path: Path) -> None:
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'e.db'}",
                    JOULESTAT_SYSFS_ROOT=str(tmp_path), JOULESTAT_INTERVAL="0.2",
                    JOULESTAT_AGENT_URL=NO_AGENT, JOULESTAT_NVML="false")
    summary = summary_of(start_run("alone", WORK, env, "--idle-policy", "exclude"))
    assert summary["mode"] == "embedded" and summary["labels"] == {}
    assert_apart(env, "alone", {}, {"cpu_source": "process tree", "idle_policy": "exclude"})


def test_a_job_attributed_under_two_policies_says_mixed(tmp_path: Path) -> None:
    """One job id run on two nodes whose agents divide idle power differently: its
    idle energy is neither policy's, and the record says so."""
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    summaries = {}
    for node, policy in (("n-share", "share"), ("n-exclude", "exclude")):
        (tmp_path / node).mkdir()
        with agent_at_head(tmp_path / node, "--db", shared, "--node", node,
                           "--sysfs-root", str(tmp_path), "--interval", "0.2",
                           "--idle-policy", policy) as agent:
            env = agent.client_env(JOULESTAT_SYSFS_ROOT=str(tmp_path))
            summaries[node] = summary_of(start_run("two-nodes", WORK, env,
                                                   "--job-id", "two-nodes-1"))
            assert summaries[node]["mode"] == "agent"
            wait_until_stored(env, {"two-nodes"})
            assert agent.stop() == 0
    assert summaries["n-share"]["agent_labels"]["idle_policy"] == "share"
    assert summaries["n-exclude"]["agent_labels"]["idle_policy"] == "exclude"
    job = json.loads(report(env, "two-nodes-1", "json"))["job"]
    assert job["agent_labels"] == {"cpu_source": "process tree", "idle_policy": "mixed"}
    assert job["labels"] == {}
