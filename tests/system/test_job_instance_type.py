"""Issue 24, item 1: a job can say which instance type it runs as, and the agent records
it for that job (its node keeps its own). That is how `joulestat demo`'s placeholder
setups are priced beside an agent that `make run` started as `local`; `joulestat run
--instance-type` does the same for a user's job."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.agent_process import agent_at_head, read_cli, run_cli, wait_for
from tests.helpers.job_api import call, register

TICKS = "joulestat_agent_ticks_total"


def test_the_agent_records_the_type_a_job_runs_as(tmp_path: Path) -> None:
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--instance-type", "local") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 1)
        port = agent.api_port
        for bad, why in [("a/b", "instance_type"), ("x" * 65, "at most 64"),
                         ("demo\u202e", "U+202E"), ("", "empty"), (7, "string")]:
            status, _, answer = call(port, "POST", "/v1/jobs", {
                "name": "bad", "kind": "inference", "instance_type": bad})
            assert status == 400 and why in answer["error"], (bad, status, answer)
        own = register(port, name="api-job", instance_type="demo-1vcpu")
        assert own["instance_type"] == "demo-1vcpu"
        plain = register(port, name="plain-job")
        assert plain["instance_type"] is None
        env = agent.client_env()
        ran = run_cli("run", "--name", "run-job", "--instance-type", "demo-2vcpu", "--",
                      "python3", "-c", "sum(range(3_000_000))", env=env)
        assert ran.returncode == 0 and "measured agent" in ran.stderr, ran.stderr
        for job_id in (own["id"], plain["id"]):
            assert call(port, "POST", f"/v1/jobs/{job_id}/end", {})[0] == 200

        def stored() -> dict[str, dict]:
            listed = read_cli("jobs", "--json", env=env)
            assert listed.returncode == 0, listed.stderr
            return {j["name"]: j for j in json.loads(listed.stdout)}

        jobs = wait_for(lambda: (found := stored()) and all(
            found.get(n, {}).get("status") == "ended" for n in ("api-job", "plain-job",
                                                                 "run-job")) and found)
    types = {name: {itype for _node, itype in job["nodes"]} for name, job in jobs.items()}
    assert types["api-job"] == {"demo-1vcpu"} and types["run-job"] == {"demo-2vcpu"}
    assert types["plain-job"] == {"local"}  # the node's own
    # Priced where they are read: the demo types have a price, `local` has none.
    compared = read_cli("compare", "--json", "--jobs", "api-job", "run-job", "plain-job",
                        "--by", "job", env=env)
    assert compared.returncode == 0, compared.stderr
    prices = {p["instance_type"]: p for p in json.loads(compared.stdout)["prices"]}
    assert prices["demo-1vcpu"]["usd_per_hour"] == 0.05
    assert prices["demo-2vcpu"]["usd_per_hour"] == 0.10
    assert prices["demo-1vcpu"]["source"] == "demo"
    assert prices["local"]["usd_per_hour"] is None
