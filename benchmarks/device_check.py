"""Prepared check for a machine with a real NVIDIA GPU: is joulestat's GPU path right there?

Three figures, printed as JSON (and the exit status is 1 when a check fails):

1. **Counter vs power.** A PyTorch matmul load runs on one GPU for ``--seconds``; meanwhile
   ``nvmlDeviceGetPowerUsage`` (mW) is sampled every ``--sample-ms`` and integrated with the
   trapezoid rule, and ``nvmlDeviceGetTotalEnergyConsumption`` (mJ) is read before and after.
   They must agree within 3 %. (On A100/H100 the power reading samples only ~25 % of the
   runtime, Yang et al. SC24, so a steady load is used on purpose: a bursty one would
   mostly measure that sampling, not joulestat.)
2. **Idle power**, the lowest 1 s mean power seen before the load: what the agent learns
   and keeps unattributed or gives to context holders.
3. **Two processes sharing the GPU.** Two worker processes run the same matmul with
   different duty cycles (``--duty`` A and B, default 0.75 and 0.25 of each 200 ms slot);
   joulestat's own NVIDIA sensor, sampler and attribution (the agent's code path:
   ``open_nvidia``, ``Sampler``, ``device_processes``, ``attribute``) split each second's
   dynamic energy between them by NVML per-process SM utilisation. Each worker reports
   the GPU time its kernels took (CUDA events); the attributed split must match that
   split within 10 % (relative, on A's share).

Needs ``torch`` with CUDA and ``nvidia-ml-py``:

    .venv/bin/pip install torch nvidia-ml-py
    .venv/bin/python benchmarks/device_check.py --seconds 60 --device 0

Put the printed figures in docs/methodology.md with the GPU model and driver version.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

COUNTER_VS_POWER_TOLERANCE = 0.03
SHARE_TOLERANCE = 0.10


@dataclass
class CounterVsPower:
    gpu: str
    driver: str
    seconds: float
    counter_j: float
    integrated_power_j: float
    mean_power_w: float
    relative_difference: float
    ok: bool


@dataclass
class SharedGpu:
    seconds: float
    duty_a: float
    duty_b: float
    kernel_s_a: float
    kernel_s_b: float
    expected_share_a: float
    attributed_dynamic_j_a: float
    attributed_dynamic_j_b: float
    attributed_share_a: float
    unattributed_j: float
    node_j: float
    ok: bool


def _matmul_loop(device: int, size: int, seconds: float, duty: float,
                 result: Any = None, tag: str = "") -> float:
    """Run ``size``x``size`` matmuls for ``seconds`` at ``duty`` of each 200 ms slot;
    return the GPU time the kernels took (CUDA events), in seconds."""
    import torch

    torch.cuda.set_device(device)
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    kernel_s = 0.0
    slot_s = 0.2
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        slot_end = time.monotonic() + slot_s
        busy_until = time.monotonic() + slot_s * duty
        start_ev = torch.cuda.Event(enable_timing=True)
        stop_ev = torch.cuda.Event(enable_timing=True)
        start_ev.record()
        while time.monotonic() < busy_until:
            for _ in range(4):
                a @ b  # noqa: B018  (the work is the point)
            torch.cuda.synchronize()
        stop_ev.record()
        stop_ev.synchronize()
        kernel_s += start_ev.elapsed_time(stop_ev) / 1000.0
        rest = slot_end - time.monotonic()
        if rest > 0:
            time.sleep(rest)
    if result is not None:
        result.put((tag, kernel_s))
    return kernel_s


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def idle_power_w(nvml: Any, handle: Any, seconds: float = 5.0) -> float:
    """Lowest 1 s mean of NVML power while nothing of ours runs."""
    means = []
    for _ in range(int(seconds)):
        samples = []
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            samples.append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            time.sleep(0.05)
        means.append(sum(samples) / len(samples))
    return min(means)


def counter_vs_power(nvml: Any, device: int, seconds: float, size: int,
                     sample_ms: float) -> CounterVsPower:
    handle = nvml.nvmlDeviceGetHandleByIndex(device)
    stop = threading.Event()
    integrated = {"j": 0.0, "n": 0}

    def sample() -> None:
        last_s = time.monotonic()
        last_w = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        while not stop.is_set():
            time.sleep(sample_ms / 1000.0)
            now_s = time.monotonic()
            watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            integrated["j"] += (last_w + watts) / 2.0 * (now_s - last_s)
            integrated["n"] += 1
            last_s, last_w = now_s, watts

    _matmul_loop(device, size, 3.0, 1.0)  # warm up: clocks, cuBLAS handles
    start_mj = nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    start_s = time.monotonic()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _matmul_loop(device, size, seconds, 1.0)
    stop.set()
    sampler.join()
    elapsed_s = time.monotonic() - start_s
    counter_j = (nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - start_mj) / 1000.0
    diff = abs(integrated["j"] - counter_j) / counter_j if counter_j > 0 else float("inf")
    return CounterVsPower(
        gpu=_text(nvml.nvmlDeviceGetName(handle)), driver=_text(nvml.nvmlSystemGetDriverVersion()),
        seconds=elapsed_s, counter_j=counter_j, integrated_power_j=integrated["j"],
        mean_power_w=counter_j / elapsed_s if elapsed_s > 0 else 0.0,
        relative_difference=diff, ok=diff <= COUNTER_VS_POWER_TOLERANCE)


def shared_gpu(device: int, seconds: float, size: int, duty_a: float, duty_b: float,
               idle_w: float) -> SharedGpu:
    """Two workers on one GPU, attributed by joulestat's own sensor and attribution."""
    from joulestat.attribution.shares import DeviceUse, TickUsage, attribute
    from joulestat.core.tick import Component
    from joulestat.devices.nvidia import open_nvidia
    from joulestat.pipeline.sampler import Sampler

    sensor = open_nvidia()
    if sensor is None:
        raise SystemExit("NVML opened for the first check but joulestat's sensor found no GPU")
    key = (Component.ACCELERATOR, f"gpu{device}")
    sampler = Sampler([sensor])
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    workers = [ctx.Process(target=_matmul_loop,
                           args=(device, size, seconds, duty, results, tag))
               for tag, duty in (("a", duty_a), ("b", duty_b))]
    for worker in workers:
        worker.start()
    names = {workers[0].pid: "a", workers[1].pid: "b"}
    time.sleep(3.0)  # CUDA contexts up before the first tick
    sampler.start()
    sensor.device_processes()  # consume samples from before the first tick
    got = {"a": 0.0, "b": 0.0, None: 0.0}
    node_j = 0.0
    while any(w.is_alive() for w in workers):
        time.sleep(1.0)
        tick = sampler.tick()
        util, holders = sensor.device_processes().get(key, ({}, set()))
        use = DeviceUse(utilization={names[p]: u for p, u in util.items() if p in names},
                        holders=tuple(sorted(names[p] for p in holders if p in names)))
        usage = TickUsage(node_busy_cpu_s=0.0, job_cpu_s={}, devices={key: use})
        for share in attribute(tick, usage, {key: idle_w}):
            if (share.component, share.device) == key:
                if share.job is None:
                    got[None] += share.dynamic_j + share.idle_j
                else:
                    got[share.job] += share.dynamic_j
        node_j += sum(e.energy_j for e in tick.entries if (e.component, e.device) == key)
    for worker in workers:
        worker.join()
    kernel = dict(results.get(timeout=10) for _ in workers)
    kernel_a, kernel_b = kernel["a"], kernel["b"]
    sampler.close()
    expected = kernel_a / (kernel_a + kernel_b)
    attributed = got["a"] / (got["a"] + got["b"]) if got["a"] + got["b"] > 0 else 0.0
    return SharedGpu(
        seconds=seconds, duty_a=duty_a, duty_b=duty_b, kernel_s_a=kernel_a, kernel_s_b=kernel_b,
        expected_share_a=expected, attributed_dynamic_j_a=got["a"],
        attributed_dynamic_j_b=got["b"], attributed_share_a=attributed,
        unattributed_j=got[None], node_j=node_j,
        ok=abs(attributed - expected) / expected <= SHARE_TOLERANCE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=8192, help="matmul side (fp16)")
    parser.add_argument("--sample-ms", type=float, default=20.0)
    parser.add_argument("--duty", type=float, nargs=2, default=(0.75, 0.25),
                        metavar=("A", "B"))
    args = parser.parse_args(argv)

    import pynvml
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a real NVIDIA GPU", file=sys.stderr)
        return 2
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(args.device)
        idle_w = idle_power_w(pynvml, handle)
        first = counter_vs_power(pynvml, args.device, args.seconds, args.size, args.sample_ms)
    finally:
        pynvml.nvmlShutdown()
    second = shared_gpu(args.device, args.seconds, args.size, args.duty[0], args.duty[1],
                        idle_w)
    print(json.dumps({"idle_power_w": idle_w, "counter_vs_power": asdict(first),
                      "shared_gpu": asdict(second)}, indent=2))
    return 0 if first.ok and second.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
