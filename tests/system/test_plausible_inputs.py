"""Physical plausibility and hostile text at the job API of a running agent, as a client
meets it: names and labels with bidirectional or invisible controls and absurd unit
counts are refused (400, naming the code point or field), letters of any script are
text, and nothing of a refused count is kept (issue 23, item 3 and the names of item 4).
The same at the command line runs in process: tests/unit/cli/test_plausible_inputs.py."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_process import running_agent, wait_for
from tests.helpers.job_api import call, register

TICKS = "joulestat_agent_ticks_total"


def test_the_job_api_refuses_bidi_names_and_absurd_counts(tmp_path: Path) -> None:
    with running_agent(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.1") as agent:
        wait_for(lambda: (agent.samples().get((TICKS, ())) or 0) >= 1)
        port = agent.api_port
        for body, code in [
            ({"name": "invoice\u202etxt.exe", "kind": "training"}, "U+202E"),
            ({"name": "ok", "kind": "training", "labels": {"team": "a\u2066b"}}, "U+2066"),
            ({"name": "zero\u200bwidth", "kind": "training"}, "U+200B"),
            ({"name": "bell\u0007", "kind": "training"}, "U+0007"),
        ]:
            status, _, answer = call(port, "POST", "/v1/jobs", body)
            assert status == 400 and code in answer["error"], (body, status, answer)
        # Letters of any script are text.
        named = register(port, name="café 中文", labels={"team": "équipe"})
        assert named["name"] == "café 中文"

        job_ = register(port, name="serve")
        units = f"/v1/jobs/{job_['id']}/units"
        for body, field in [({"unit": "inference", "count": 1e308}, "count"),
                            ({"unit": "inference", "count": 2e15}, "count"),
                            ({"unit": "busy_s@model-a", "count": 1e12}, "busy_s")]:
            status, _, answer = call(port, "POST", units, body)
            assert status == 400 and field in answer["error"], (body, status, answer)
        assert "1e+15" in call(port, "POST", units, {"unit": "inference", "count": 1e308}
                               )[2]["error"]
        status, _, answer = call(port, "POST", units, {"unit": "inference", "count": 3})
        assert status == 200 and answer["units"] == {"inference": 3.0}
        status, _, answer = call(port, "POST", units, {"unit": "busy_s@model-a", "count": 2.5})
        assert status == 200, answer
        status, _, after = call(port, "GET", f"/v1/jobs/{job_['id']}")
        assert after["units"] == {"inference": 3.0}  # nothing of the refused counts
        assert agent.stop() == 0
