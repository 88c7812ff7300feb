"""Issue 14, acceptance 2: two real agents, one on a fake Inferentia2 (inf2.xlarge) and one
on a fake T4 (g4dn.xlarge), one store, each serving an inference job that counts its
inferences. ``joulestat compare --by instance_type`` (JSON and text) and the dashboard's
Compare page show each setup's accelerator energy per inference, within 1 % of what the
fakes imply, labelled with the device models the agents registered. The workloads are
:mod:`tests.helpers.accelerator_fleet`'s."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from joulestat.core import units
from tests.fakes.nvml_file import ENV_STATE
from tests.helpers.accelerator_fleet import (
    NEURON_MAX_W,
    T4_INFERENCES,
    T4_J_PER_INFERENCE,
    T4_NAME,
    T4_SERVICE,
    neuron_j_per_inference,
    neuron_node,
    neuron_service,
    t4_node,
)
from tests.helpers.agent_process import (
    agent_at_head,
    agent_env,
    read_cli,
    start_run,
    summary_of,
)
from tests.helpers.dashboard_app import run_page

pytestmark = pytest.mark.slow
INTERVAL = "0.1"
T4_MODEL, INF2_MODEL = f"1 x {T4_NAME}", "1 x AWS Inferentia2"


def _serve_both(tmp_path: Path, db: str) -> float:
    """Both agents and both services, run to the end; what the Inferentia2 fake implies
    per inference. The agents are stopped (their last rows flushed) before it returns."""
    inf2_dir, t4_dir = tmp_path / "inf2", tmp_path / "t4"
    inf2_dir.mkdir()
    (t4_dir / "sys").mkdir(parents=True)
    sysfs, monitor = neuron_node(inf2_dir)
    t4_env, state = t4_node(t4_dir)
    result = tmp_path / "inf2-served.json"
    with ExitStack() as stack:  # one after the other: the first migrates the store
        inf2 = stack.enter_context(agent_at_head(
            inf2_dir, "--db", db, "--node", "inf2-node", "--instance-type", "inf2.xlarge",
            "--sysfs-root", str(sysfs), "--interval", INTERVAL,
            "--neuron-max-power-w", f"{NEURON_MAX_W:g}", "--neuron-monitor", str(monitor)))
        t4 = stack.enter_context(agent_at_head(
            t4_dir, "--db", db, "--node", "t4-node", "--instance-type", "g4dn.xlarge",
            "--sysfs-root", str(t4_dir / "sys"), "--interval", INTERVAL, "--nvml", "true",
            env=agent_env(**t4_env)))
        # The T4 agent found the fake through NVML, with its limit and its clock.
        gpu = (("component", "accelerator"), ("device", "gpu0"))
        assert t4.value("joulestat_node_device_power_limit_watts", **dict(gpu)) == 70.0
        assert t4.value("joulestat_node_device_clock_hertz", **dict(gpu)) == 1590e6
        assert any(dict(labels).get("model") == T4_NAME
                   for labels in t4.series("joulestat_node_device_info")), t4.log()
        services = [
            start_run("inf2-serve", neuron_service(sysfs, monitor, result),
                      inf2.client_env(), "--kind", "inference"),
            start_run("t4-serve", T4_SERVICE, t4.client_env(**{ENV_STATE: str(state)}),
                      "--kind", "inference"),
        ]
        for service in services:
            summary = summary_of(service, timeout_s=120)
            assert summary["exit_code"] == 0, summary
        assert inf2.stop() == 0 and t4.stop() == 0
    return neuron_j_per_inference(result)


def test_compare_by_instance_type_shows_accelerator_energy_per_inference_and_models(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    inf2_j = _serve_both(tmp_path, db)
    env = agent_env(JOULESTAT_DB=db)

    out = read_cli("compare", "--by", "instance_type", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["unit"] == "inference"
    rows = {row["group"]: row for row in doc["rows"]}
    assert set(rows) == {"inf2.xlarge", "g4dn.xlarge"}
    t4, inf2 = rows["g4dn.xlarge"], rows["inf2.xlarge"]
    assert t4["units"] == T4_INFERENCES
    assert t4["accelerator_per_unit_j"] == pytest.approx(T4_J_PER_INFERENCE, rel=0.01)
    assert inf2["accelerator_per_unit_j"] == pytest.approx(inf2_j, rel=0.01)
    assert (t4["accelerators"], inf2["accelerators"]) == ([T4_MODEL], [INF2_MODEL])
    for row in (t4, inf2):  # a part of the row's energy, which the CPU estimate adds to
        assert 0 < row["accelerator_j"] < row["energy_j"]

    text = read_cli("compare", "--by", "instance_type", "--wide", env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    header = next(line for line in lines if line.startswith("instance type"))
    assert "accelerators" in header and "accelerator energy/inference" in header
    for group, row, model in (("g4dn.xlarge", t4, T4_MODEL), ("inf2.xlarge", inf2, INF2_MODEL)):
        line = next(line for line in lines if line.startswith(group))
        assert model in line and units.energy(row["accelerator_per_unit_j"]) in line, line

    at = run_page(db, "pages/compare.py", monkeypatch)
    table = at.dataframe[0].value.set_index("group")
    assert table.at["g4dn.xlarge", "accelerators"] == T4_MODEL
    assert table.at["inf2.xlarge", "accelerators"] == INF2_MODEL
    column = "accelerator energy per inference"
    assert table.at["g4dn.xlarge", column] == pytest.approx(T4_J_PER_INFERENCE, rel=0.01)
    assert table.at["inf2.xlarge", column] == pytest.approx(inf2_j, rel=0.01)
