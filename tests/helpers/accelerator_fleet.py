"""Two inference services on two kinds of accelerator, for the cross-vendor comparison:
an inf2.xlarge (a fake Inferentia2's sysfs tree and neuron-monitor file) and a
g4dn.xlarge (a fake T4 behind the file-backed fake NVML, :mod:`tests.fakes.nvml_file`).

Each workload is a real program under ``joulestat run`` that counts its inferences with
``joulestat.client.tracking.count`` and drives its fake device as the hardware would:
the T4's energy counter moves by ``T4_J_PER_INFERENCE`` per inference while the program
holds the GPU; the Inferentia2 draws ``NEURON_PCT`` % of its maximum power for a window
the program times itself and reports (the driver's power file has no counter: a window
is what it can say). So each one's accelerator energy per inference is known
independently of the agent: what the fakes imply.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.neuron import FakeNeuron, monitor_report, write_monitor
from tests.fakes.nvml_file import ENV_STATE, REPO, site_dir, write

T4_NAME = "Tesla T4"  # what NVML calls a T4
T4_J_PER_INFERENCE = 2.5
T4_INFERENCES = 60
NEURON_MAX_W = 100.0
NEURON_PCT = 50.0
NEURON_WINDOW_S = 15.0
SETTLE_S = 1.5  # ticks before and after the work, so every joule falls while it is held

# The T4 service: holds the GPU (a compute context), then per inference the counter
# moves by the inference's energy and the inference is counted.
T4_SERVICE = f"""
import os, sys, time
sys.path.insert(0, {str(REPO)!r})
from pathlib import Path
from joulestat import count
from tests.fakes.nvml_file import update
state, me = Path(os.environ[{ENV_STATE!r}]), os.getpid()
update(state, lambda gpus: gpus[0]["compute_pids"].append(me))
time.sleep({SETTLE_S})
for _ in range({T4_INFERENCES}):
    update(state, lambda gpus: gpus[0].update(
        energy_mj=gpus[0]["energy_mj"] + round({T4_J_PER_INFERENCE} * 1000)))
    count("inference")
    time.sleep(0.04)
time.sleep({SETTLE_S})
update(state, lambda gpus: gpus[0]["compute_pids"].remove(me))
"""

# The Inferentia2 service: a runtime on the device in neuron-monitor's report (0 %
# utilisation, so the monitor-based estimate adds nothing while the driver is silent),
# then power on, inferences counted for the window, power off; it writes what it did.
NEURON_SERVICE = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from joulestat import count
from tests.fakes.neuron import FakeNeuron, monitor_report, write_monitor
fake = FakeNeuron(Path({sysfs!r}))
fake.power_files[0] = Path({power!r})
me = os.getpid()
write_monitor(Path({monitor!r}), monitor_report([(me, "serve", {{0: 0.0, 1: 0.0}})]))
time.sleep({settle})
start, done = time.monotonic(), 0
fake.set_power(0, {pct})
while time.monotonic() - start < {window}:
    count("inference")
    done += 1
    time.sleep(0.05)
fake.set_status(0, "NO_DATA")
window_s = time.monotonic() - start
time.sleep({settle})
write_monitor(Path({monitor!r}), monitor_report([]))
Path({result!r}).write_text(json.dumps({{"window_s": window_s, "inferences": done}}))
"""


def t4_node(folder: Path) -> tuple[dict[str, str], Path]:
    """(environment additions for the T4 node's agent, its fake NVML state file)."""
    state = folder / "nvml.json"
    write(state, [{"name": T4_NAME, "uuid": "GPU-t4-0000", "energy_mj": 5_000_000,
                   "power_limit_mw": 70_000, "sm_clock_mhz": 1590, "compute_pids": []}])
    return {"PYTHONPATH": str(site_dir(folder / "site")), ENV_STATE: str(state)}, state


def neuron_node(folder: Path) -> tuple[Path, Path]:
    """(the inf2 node's sysfs root, its neuron-monitor file): one Inferentia2, silent."""
    sysfs = folder / "sys"
    FakeNeuron(sysfs).add_device(0, "Inferentia2")
    monitor = folder / "neuron-monitor.jsonl"
    write_monitor(monitor, monitor_report([]))
    return sysfs, monitor


def neuron_service(sysfs: Path, monitor: Path, result: Path) -> str:
    power = FakeNeuron(sysfs).base / "neuron0" / "stats" / "power" / "utilization"
    return NEURON_SERVICE.format(repo=str(REPO), sysfs=str(sysfs), power=str(power),
                                 monitor=str(monitor), settle=SETTLE_S, pct=NEURON_PCT,
                                 window=NEURON_WINDOW_S, result=str(result))


def neuron_j_per_inference(result: Path) -> float:
    """What the Inferentia2 fake implies: its power over the window, per inference."""
    done = json.loads(result.read_text())
    return NEURON_PCT / 100.0 * NEURON_MAX_W * done["window_s"] / done["inferences"]
