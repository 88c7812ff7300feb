"""Overhead of the joulestat agent beside CodeCarbon's tracker, side by side in one run.

Both run at the same 1 s interval for the same wall time, as separate processes on the
same machine, so noise hits them alike. Printed per process: CPU seconds over the whole
run, CPU seconds in the steady state (after a warm-up, so import cost is shown apart),
peak RSS (VmHWM), and the agent/CodeCarbon ratios. The agent measures no job here: the
figure with 10 live jobs is ``busy_node.py --processes 0 --jobs 10``. Targets (issue 48,
after issue 2's 50 MiB): agent CPU <= 0.5x CodeCarbon's, agent peak RSS <= 40 MiB.

    .venv/bin/python benchmarks/overhead.py [--seconds 120] [--warmup 10]

CPU time comes from /proc/<pid>/stat (10 ms clock ticks, dead threads included), so
the steady window should be long enough for each process to use many ticks.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from benchmarks.sidecars import (  # noqa: E402  (after the path insert)
    CODECARBON_SCRIPT,
    JOULESTAT,
    Usage,
    agent_env,
    cpu_s,
    free_port,
    migrate_store,
    peak_rss_bytes,
)

RSS_TARGET_MIB = 40  # issue 48's acceptance 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="measured wall time")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before steady state")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="joulestat-overhead-"))
    env = agent_env()
    db_url = f"sqlite:///{workdir / 'agent.db'}"
    print(f"one-off store migration: {migrate_store(db_url, env):.2f} s wall")
    agent = subprocess.Popen(
        [str(JOULESTAT), "agent", "--interval", str(args.interval),
         "--metrics-port", str(free_port()), "--db", db_url,
         "--log-level", "WARNING"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    codecarbon = subprocess.Popen(
        [sys.executable, "-c", CODECARBON_SCRIPT.format(interval=args.interval)],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    procs = {"joulestat agent": agent, "codecarbon tracker": codecarbon}
    handles = {name: psutil.Process(p.pid) for name, p in procs.items()}
    usage = {name: Usage(name) for name in procs}
    try:
        time.sleep(args.warmup)
        for name, proc in procs.items():
            if proc.poll() is not None:
                err = agent.stderr.read() if proc is agent else ""
                print(f"{name} exited early with {proc.returncode}: {err}", file=sys.stderr)
                return 1
        steady_start = {name: cpu_s(h) for name, h in handles.items()}
        time.sleep(args.seconds)
        for name, handle in handles.items():
            usage[name].cpu_total_s = cpu_s(handle)
            usage[name].cpu_steady_s = usage[name].cpu_total_s - steady_start[name]
            usage[name].peak_rss_bytes = peak_rss_bytes(handle.pid)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    agent_u, cc_u = usage["joulestat agent"], usage["codecarbon tracker"]
    mib = 1024 * 1024
    print(f"interval {args.interval} s, warm-up {args.warmup} s, steady state {args.seconds} s")
    print(f"{'process':<22}{'CPU total s':>12}{'CPU steady s':>14}{'peak RSS MiB':>14}")
    for u in (agent_u, cc_u):
        print(f"{u.name:<22}{u.cpu_total_s:>12.2f}{u.cpu_steady_s:>14.2f}"
              f"{u.peak_rss_bytes / mib:>14.1f}")
    steady_ratio = agent_u.cpu_steady_s / cc_u.cpu_steady_s if cc_u.cpu_steady_s else float("nan")
    total_ratio = agent_u.cpu_total_s / cc_u.cpu_total_s if cc_u.cpu_total_s else float("nan")
    rss_ratio = agent_u.peak_rss_bytes / cc_u.peak_rss_bytes if cc_u.peak_rss_bytes else 0
    print(f"ratio agent/codecarbon: CPU steady {steady_ratio:.3f}, CPU total {total_ratio:.3f}, "
          f"peak RSS {rss_ratio:.3f}")
    cpu_ok = steady_ratio <= 0.5 and total_ratio <= 0.5
    rss_ok = agent_u.peak_rss_bytes <= RSS_TARGET_MIB * mib
    print(f"target agent CPU <= 0.5x CodeCarbon: {'met' if cpu_ok else 'NOT met'}")
    print(f"target agent peak RSS <= {RSS_TARGET_MIB} MiB: {'met' if rss_ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
