"""``joulestat demo --llm`` as a new user meets it: a fresh store, one command, then
``joulestat compare --unit output_token`` shows energy per output token and time to
first token for each concurrency.

The real CLI with short stages (``--seconds 4``): a GPT-2 of two layers with random
weights generating in the demo's process, counted from its vLLM-named metrics by the
in-process measurement (``JOULESTAT_AGENT_URL`` points at a closed port, as in
tests/system/test_demo.py). Throughput is not compared across concurrencies: on a
loaded two-core machine it need not grow. Skipped only where transformers is not
installed; the missing-extra message is tested everywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from tests.helpers.agent_process import JOULESTAT, agent_env, free_port, read_cli

# The module's one demo run serves every test that reads it, on one worker
# (pytest-xdist --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_demo_llm")]
LEVELS = ["1", "2", "4"]


def _env(tmp: Path) -> dict[str, str]:
    return agent_env(JOULESTAT_DB=f"sqlite:///{tmp / 'fresh.db'}",
                     XDG_DATA_HOME=str(tmp / "data"),
                     JOULESTAT_AGENT_URL=f"http://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def llm_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str, str]:
    """(env, stdout, stderr) after one `joulestat demo --llm` on a fresh store."""
    if find_spec("transformers") is None or find_spec("torch") is None:
        pytest.skip("transformers is not installed: pip install 'joulestat[hf]'")
    env = _env(tmp_path_factory.mktemp("demo-llm"))
    result = subprocess.run([JOULESTAT, "demo", "--llm", "--seconds", "4"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return env, result.stdout, result.stderr


def test_demo_llm_stores_a_serving_job_per_concurrency(llm_store):
    env, out, err = llm_store
    assert "measured in this process (no agent answered" in err
    engine = make_engine(env["JOULESTAT_DB"])
    jobs = sorted(list_jobs(engine), key=lambda j: int(j.labels["concurrency"]))
    engine.dispose()
    assert [j.labels["concurrency"] for j in jobs] == LEVELS
    for job in jobs:
        assert job.name == "demo-llm" and job.kind == "inference" and job.status == "ended"
        assert job.labels["backend"] == "torch" and job.total_j > 0, job
        # Counted from the server's metrics, never by count(): all three units.
        for unit in ("output_token", "prompt_token", "request"):
            assert job.units.get(unit, 0) > 0, (unit, job.units)
        # Every request generates its full length: 64 new tokens on a 32-token prompt.
        assert job.units["output_token"] == 2 * job.units["prompt_token"] == 64 * (
            job.units["request"])
    # The summary it prints, and where to look next.
    for level in LEVELS:
        line = next(x for x in out.splitlines() if f"demo-llm concurrency={level}:" in x)
        assert "output tokens" in line and "per output token" in line and "TTFT p50" in line
    assert "joulestat compare --jobs demo-llm --by label:concurrency --unit output_token" in out
    assert "joulestat dashboard" in out


def test_compare_gives_energy_per_output_token_and_ttft(llm_store):
    env = llm_store[0]
    result = read_cli("compare", "--by", "label:concurrency", "--unit", "output_token",
                      "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = {row["group"]: row for row in json.loads(result.stdout)["rows"]}
    assert sorted(rows) == [f"concurrency={level}" for level in LEVELS]
    for row in rows.values():
        assert row["unit"] == "output_token" and row["units"] > 0
        assert row["energy_per_unit_j"] > 0
        ttft = row["latency_s"]["ttft"]
        assert 0 < ttft["p50"] <= ttft["p99"], row["latency_s"]
        assert set(row["latency_s"]) == {"ttft", "itl", "e2e"}


def test_without_the_hf_extra_one_line_and_nothing_written(tmp_path):
    """transformers absent (None in sys.modules: its import fails as if not installed):
    the extra is named, the exit is 2, and no store is created."""
    env = _env(tmp_path)
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from joulestat.cli.main import main\n"
            "sys.exit(main(['demo', '--llm']))\n")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == ["joulestat demo: joulestat demo --llm needs the hf extra: "
                     "pip install 'joulestat[hf]'"], result.stderr
    assert not (tmp_path / "fresh.db").exists()
    assert not (tmp_path / "data").exists()
