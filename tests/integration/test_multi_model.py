"""One server process, two models: the real agent on fake RAPL at a known wattage, a
program under ``joulestat run`` serving model A three times as long as model B through
``joulestat.client.tracking.serving``, then the store and ``joulestat compare --by model`` read as a
user would read them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from joulestat.store.engine import make_engine
from joulestat.store.jobs import list_jobs
from joulestat.store.model_split import model_splits, split_rows
from tests.fakes.powercap import FakePowercap
from tests.helpers.agent_process import run_cli, running_agent, start_run, summary_of

POWER_W = 50.0
# Blocks of 300 and 100 ms: a block's wall time is its model's busy time, and a loaded
# machine may stretch any block by a few milliseconds, which must stay small beside it.
SERVER = """
import time
from joulestat import serving

def work(seconds):
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass

end = time.time() + {seconds}
while time.time() < end:
    with serving("model-a") as model:
        work(0.3)
        model.count(1)
    with serving("model-b") as model:
        work(0.1)
        model.count(1)
    time.sleep(0.1)  # between requests: no model is busy
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """The store after the two-model server ran 8 s beside the agent, and its summary."""
    tmp_path: Path = tmp_path_factory.mktemp("multi_model")
    fake = FakePowercap(tmp_path / "sys")
    fake.add_zone("intel-rapl:0", "package-0")
    with fake.drive("intel-rapl:0", power_w=POWER_W, hz=500), running_agent(
            tmp_path, "--sysfs-root", str(tmp_path / "sys"), "--interval", "0.25",
            "--node", "n1") as agent:
        time.sleep(1.0)
        run = start_run("two-models", SERVER.format(seconds=8), agent.client_env(),
                        "--kind", "inference")
        summary = summary_of(run)
        assert summary["final"] is True and summary["exit_code"] == 0, summary
        assert agent.stop() == 0
    return agent.db_url, summary


def test_a_model_busy_three_times_as_long_gets_three_times_the_energy(served):
    url, summary = served
    engine = make_engine(url)
    try:
        [job] = list_jobs(engine)
        split = model_splits(engine, [job.id])[job.id]
        rows = split_rows(engine, job.id)
    finally:
        engine.dispose()
    a, b = split.model("model-a"), split.model("model-b")
    print(f"model-a {a.busy_s:.3f} s busy, {a.energy_j:.2f} J; model-b {b.busy_s:.3f} s, "
          f"{b.energy_j:.2f} J; idle {split.idle_j:.2f} J of {job.total_j:.2f} J")
    assert a.busy_s == pytest.approx(3 * b.busy_s, rel=0.05)
    assert a.energy_j / b.energy_j == pytest.approx(3.0, rel=0.05)
    assert a.energy_j / b.energy_j == pytest.approx(a.busy_s / b.busy_s, rel=0.01)
    assert a.units == b.units == {"inference": job.units["inference"] / 2}
    assert job.units == {"inference": summary["units"]["inference"]}  # no per-model keys
    # Models + idle = the process's attributed energy, in all and on every stored tick.
    assert split.energy_j == pytest.approx(job.total_j, rel=1e-9)
    assert a.energy_j + b.energy_j + split.idle_j == pytest.approx(job.total_j, rel=1e-9)
    assert 0 < split.idle_j < 0.5 * job.total_j  # the sleeps between requests
    assert len(rows) > 20 and not any(row.rolled for row in rows)
    for row in rows:
        assert sum(row.models.values()) + row.idle_j == pytest.approx(row.energy_j, abs=1e-9)
    assert sum(row.energy_j for row in rows) == pytest.approx(job.total_j, rel=1e-9)
    assert sum(row.models.get("model-a", 0.0) for row in rows) == pytest.approx(a.energy_j)


def test_compare_by_model_prints_energy_per_inference_per_model(served):
    url, _summary = served
    result = run_cli("compare", "--db", url, "--by", "model", "--unit", "inference",
                     "--baseline", "model-b", "--json")
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    rows = {row["group"]: row for row in table["rows"]}
    assert set(rows) == {"model=model-a", "model=model-b", "idle"}
    a, b = rows["model=model-a"], rows["model=model-b"]
    assert table["by"] == "model" and table["baseline"] == "model=model-b" and b["is_baseline"]
    assert a["energy_per_unit_j"] / b["energy_per_unit_j"] == pytest.approx(3.0, rel=0.05)
    assert a["energy_pct"] == pytest.approx(200.0, abs=15.0)
    assert rows["idle"]["basis"] == "run" and rows["idle"]["units"] is None
    total = sum(row["energy_j"] for row in rows.values())
    text = run_cli("compare", "--db", url, "--by", "model")
    assert text.returncode == 0, text.stderr
    assert "row(s) by model" in text.stdout and "model=model-a" in text.stdout
    assert total == pytest.approx(_summary["total_energy_j"], rel=1e-6)
