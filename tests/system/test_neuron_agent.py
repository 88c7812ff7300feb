"""The real ``joulestat agent`` process over a fake AWS Neuron sysfs tree (inf2.xlarge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.neuron import FakeNeuron
from tests.helpers.agent_process import agent_at_head, wait_for

POWER = "joulestat_node_power_watts"
ENERGY = "joulestat_node_energy_joules_total"
INFO = "joulestat_node_device_info"


def _neuron(agent, name: str) -> dict[str, float]:
    return {dict(k)["source"]: v for k, v in agent.series(name).items()
            if dict(k).get("device") == "neuron0"}


def test_agent_measures_a_fake_inferentia2_and_keeps_ticking_through_no_data(
        tmp_path: Path) -> None:
    fake = FakeNeuron(tmp_path)
    fake.add_device(0, "Inferentia2", "stats/hardware/power/utilization")
    fake.set_power(0, 40.0)
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval", "0.2",
                       "--instance-type", "inf2.xlarge", "--neuron-max-power-w", "100") as agent:
        wait_for(lambda: _neuron(agent, ENERGY).get("neuron", 0.0) > 5.0)
        assert _neuron(agent, POWER)["neuron"] == pytest.approx(40.0, rel=0.01)
        info = [dict(k) for k in agent.series(INFO)]
        assert {"component": "accelerator", "device": "neuron0", "vendor": "AWS",
                "model": "AWS Inferentia2", "uuid": "neuron0", "attribution": ""} in info
        fake.set_status(0, "NO_DATA")
        ticks = agent.value("joulestat_agent_ticks_total")
        wait_for(lambda: agent.value("joulestat_agent_ticks_total") >= ticks + 5)
        assert _neuron(agent, POWER)["neuron"] == 0.0
        assert "NO_DATA" in agent.log()
        assert agent.stop() == 0
