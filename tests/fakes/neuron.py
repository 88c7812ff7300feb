"""A fake AWS Neuron sysfs tree and neuron-monitor output, for tests without Inferentia.

``FakeNeuron(root).add_device(0, ...)`` writes ``<root>/devices/virtual/neuron_device/
neuron0/`` with ``info/architecture/device_name`` and a power file in the layout given
(``stats/power/utilization`` as documented before driver 2.31, or a deeper one to prove the
sensor discovers paths rather than hard-coding them). ``set_power`` rewrites the file in
the driver's ``<status>,<unix ts>,<min>,<max>,<avg>`` form (percent of max power).
``write_monitor`` appends one neuron-monitor JSON report line.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path


class FakeNeuron:
    def __init__(self, sysfs_root: Path) -> None:
        self.root = Path(sysfs_root)
        self.base = self.root / "devices" / "virtual" / "neuron_device"
        self.power_files: dict[int, Path] = {}

    def add_device(self, index: int, device_name: str = "Inferentia2",
                   power_path: str = "stats/power/utilization") -> Path:
        device = self.base / f"neuron{index}"
        (device / "info" / "architecture").mkdir(parents=True, exist_ok=True)
        (device / "info" / "architecture" / "device_name").write_text(device_name + "\n")
        (device / "core_count").write_text("2\n")
        power = device / power_path
        power.parent.mkdir(parents=True, exist_ok=True)
        self.power_files[index] = power
        self.set_status(index, "NO_DATA")
        return device

    def set_power(self, index: int, avg_pct: float, unix_s: float | None = None) -> None:
        stamp = int(time.time() if unix_s is None else unix_s)
        self.power_files[index].write_text(
            f"POWER_STATUS_VALID,{stamp},{avg_pct * 0.9:.2f},{avg_pct * 1.1:.2f},"
            f"{avg_pct:.2f}\n")

    def set_status(self, index: int, status: str) -> None:
        self.power_files[index].write_text(f"{status}\n")

    def remove_device(self, index: int) -> None:
        shutil.rmtree(self.base / f"neuron{index}")


def monitor_report(runtimes: list[tuple[int, str, dict[int, float]]], *,
                   devices: int = 1, cores_per_device: int = 2,
                   device_type: str = "inferentia2") -> dict:
    """One neuron-monitor report: runtimes as (pid, tag, {global core: utilisation %})."""
    return {
        "neuron_runtime_data": [
            {"pid": pid, "neuron_runtime_tag": tag, "error": "",
             "report": {"neuroncore_counters": {
                 "period": 1.0, "error": "",
                 "neuroncores_in_use": {str(core): {"neuroncore_utilization": util}
                                        for core, util in cores.items()}}}}
            for pid, tag, cores in runtimes
        ],
        "instance_info": {"instance_type": "inf2.xlarge"},
        "neuron_hardware_info": {"neuron_device_count": devices,
                                 "neuroncore_per_device_count": cores_per_device,
                                 "neuron_device_type": device_type, "error": ""},
    }


def write_monitor(path: Path, report: dict) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(report) + "\n")
