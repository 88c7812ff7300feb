"""Physical plausibility and hostile text at the command line, as a user meets them:
``joulestat run`` refuses a name or label with a bidirectional or invisible control
before starting its command, ``joulestat import`` refuses an absurd figure naming the
field and imports nothing of the file, and ``compare --json`` stays strict JSON on
extreme but valid counts (issue 23, item 3 and the names of item 4). The real commands
run in this process (tests/helpers/cli.py); the job API of a running agent:
tests/system/test_plausible_inputs.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from sqlalchemy import text

from joulestat.store import migrate
from joulestat.store.engine import make_engine
from tests.helpers.cli import cli_env, invoke
from tests.helpers.compare_store import PINNED, T0, job, node, run_job


def _strict(name: str) -> NoReturn:
    raise AssertionError(f"{name} in JSON output")


def strict_json(text_: str) -> Any:
    """What a strict JSON parser (jq, JSON.parse) reads: NaN and Infinity refused."""
    return json.loads(text_, parse_constant=_strict)


def test_run_refuses_a_bidi_name_before_starting_its_command(tmp_path: Path) -> None:
    """In process, a command it started would also fail the test (this tier starts no
    process): the refusal comes first."""
    marker = tmp_path / "ran"
    env = cli_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'j.db'}")
    for args in (["--name", "x\u202ey"], ["--name", "ok", "--label", "team=a\u200fb"]):
        result = invoke("run", *args, "--", "touch", str(marker), env=env)
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
    env = cli_env(JOULESTAT_DB=url)
    result = invoke("report", "j-g5", "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    return env, strict_json(result.stdout)


def test_an_absurd_import_fails_naming_the_field_and_imports_nothing(tmp_path: Path) -> None:
    _, good = _report(tmp_path)
    target_url = f"sqlite:///{tmp_path / 'target.db'}"
    target = cli_env(JOULESTAT_DB=target_url)
    assert invoke("db", "upgrade", env=target).returncode == 0
    bad = json.loads(json.dumps(good))
    bad["nodes"][0]["components"]["accelerator"]["idle_j"] = 1e308
    path = tmp_path / "absurd.json"
    path.write_text(json.dumps([good, bad]))
    result = invoke("import", str(path), env=target)
    assert result.returncode != 0
    assert "components.accelerator.idle_j" in result.stderr, result.stderr
    assert "1e+12 J per node" in result.stderr, result.stderr
    engine = make_engine(target_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
    engine.dispose()
    # The good entry alone imports, and compare reads it back as strict JSON.
    path.write_text(json.dumps([good]))
    assert invoke("import", str(path), env=target).returncode == 0


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
    result = invoke("compare", "--db", url, "--jobs", "tiny", "huge", "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    out = strict_json(result.stdout)
    tiny, huge = out["rows"]
    assert tiny["energy_per_unit_j"] is None  # 3.6e8 J / 5e-324: not a finite figure
    assert huge["energy_per_unit_j"] > 0
    jobs = invoke("jobs", "--json", "--db", url, env=cli_env())
    assert jobs.returncode == 0, jobs.stderr
    assert {j["id"] for j in strict_json(jobs.stdout)} == {"j-tiny", "j-huge"}
