"""Physical plausibility and hostile text at every way in, as a user meets them: the
real job API of a running agent, ``joulestat run``, ``joulestat import`` and
``compare --json`` (issue 23, item 3 and the names of item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy import text

from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.agent_process import agent_env, run_cli, running_agent, wait_for
from tests.helpers.compare_store import PINNED, T0, job, node, run_job
from tests.helpers.job_api import call, register

TICKS = "joulestat_agent_ticks_total"


def _strict(name: str) -> NoReturn:
    raise AssertionError(f"{name} in JSON output")


def strict_json(text_: str) -> Any:
    """What a strict JSON parser (jq, JSON.parse) reads: NaN and Infinity refused."""
    return json.loads(text_, parse_constant=_strict)


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


def test_run_refuses_a_bidi_name_before_starting_its_command(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = agent_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'j.db'}")
    for args in (["--name", "x\u202ey"], ["--name", "ok", "--label", "team=a\u200fb"]):
        result = run_cli("run", *args, "--", "touch", str(marker), env=env)
        assert result.returncode != 0
        assert "U+202E" in result.stderr or "U+200F" in result.stderr, result.stderr
    assert not marker.exists()


def _report(tmp_path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """A store with one ended job, and its JSON report."""
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("j-g5", "bert-g5", "inference", T0, 3600),
            ticks=4, gpu_j=90_000.0, units={"inference": 2_500})
    engine.dispose()
    env = agent_env(JOULESTAT_DB=url)
    result = run_cli("report", "j-g5", "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    return env, strict_json(result.stdout)


def test_an_absurd_import_fails_naming_the_field_and_imports_nothing(tmp_path: Path) -> None:
    _, good = _report(tmp_path)
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    target = agent_env(JOULESTAT_DB=target_url)
    assert run_cli("db", "upgrade", env=target).returncode == 0
    bad = json.loads(json.dumps(good))
    bad["nodes"][0]["components"]["accelerator"]["idle_j"] = 1e308
    path = tmp_path / "absurd.json"
    path.write_text(json.dumps([good, bad]))
    result = run_cli("import", str(path), env=target)
    assert result.returncode != 0
    assert "components.accelerator.idle_j" in result.stderr, result.stderr
    assert "1e+12 J per node" in result.stderr, result.stderr
    engine = make_engine(target_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
    engine.dispose()
    # The good entry alone imports, and compare reads it back as strict JSON.
    path.write_text(json.dumps([good]))
    assert run_cli("import", str(path), env=target).returncode == 0


def test_compare_json_is_strict_json_on_extreme_but_valid_values(tmp_path: Path) -> None:
    """A count of 5e-324 (valid: finite, >= 0) makes energy per unit overflow to
    Infinity; the output says null instead, which every JSON parser reads."""
    url = f"sqlite:///{tmp_path / 'extreme.db'}"
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("j-tiny", "tiny", "inference", T0, 3600),
            ticks=4, gpu_j=90_000_000.0, units={"inference": 5e-324})
    run_job(engine, node("g5-2", "g5.xlarge"),
            job("j-huge", "huge", "inference", T0 + 3600, 3600), ticks=4, gpu_j=1.0,
            units={"inference": 2.5e14})
    engine.dispose()
    result = run_cli("compare", "--db", url, "--jobs", "tiny", "huge", "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    out = strict_json(result.stdout)
    tiny, huge = out["rows"]
    assert tiny["energy_per_unit_j"] is None  # 3.6e8 J / 5e-324: not a finite figure
    assert huge["energy_per_unit_j"] > 0
    jobs = run_cli("jobs", "--json", "--db", url, env=agent_env())
    assert jobs.returncode == 0, jobs.stderr
    assert {j["id"] for j in strict_json(jobs.stdout)} == {"j-tiny", "j-huge"}
