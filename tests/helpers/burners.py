"""CPU burners to run under ``joulestat run``, the wait for their jobs in the store, and
the runs of them that the process-tree and cgroup tests both make beside an agent.

Each ``BURN_*`` is a ``python -c`` script to ``.format()``: ``{s}`` seconds of wall time,
or ``{cpu}`` seconds of CPU time.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import text

from joulestat.store.engine import make_engine
from joulestat.store.nodes import unattributed_check
from tests.helpers.agent_process import JOULESTAT, jobs_in_store, start_run, summary_of, wait_for

BURN_FULL = "import time\ne = time.time() + {s}\nwhile time.time() < e: pass"
BURN_HALF = (
    "import time\ne = time.time() + {s}\nwhile time.time() < e:\n"
    "    t = time.time() + 0.01\n    while time.time() < t: pass\n    time.sleep(0.01)"
)
# A half-core burner that runs until the file ``{path}`` exists (or ``{s}`` seconds of
# wall time, a bound for a test that failed before creating it): a job that lasts as
# long as its test needs, not a guess at how long a loaded machine takes.
BURN_HALF_UNTIL = (
    "import os, time\ne = time.time() + {s}\n"
    "while time.time() < e and not os.path.exists({path!r}):\n"
    "    t = time.time() + 0.01\n    while time.time() < t: pass\n    time.sleep(0.01)"
)
# Burners that stop after a given amount of CPU time, so their CPU-time ratio does not
# depend on how busy the machine is: with the linear per-vCPU CPU model a job's dynamic
# energy is proportional to its CPU time, which is what these tests check.
BURN_CPU_FULL = "import time\nwhile time.process_time() < {cpu}: pass"
BURN_CPU_HALF = (
    "import time\nwhile time.process_time() < {cpu}:\n"
    "    t = time.process_time() + 0.01\n    while time.process_time() < t: pass\n"
    "    time.sleep(0.01)"
)


def wait_until_stored(env: dict[str, str], names: set[str], timeout_s: float = 20) -> dict:
    """Jobs appear ended in the store once the agent's next flush has run (``joulestat
    jobs --json`` as it lists them, read in this process: polled, a process a round
    would cost a CPU-second each)."""
    def ready():
        jobs = jobs_in_store(env)
        ok = names <= set(jobs) and all(jobs[n]["status"] == "ended" for n in names)
        return jobs if ok else None

    return wait_for(ready, timeout_s=timeout_s, every_s=0.2)


def run_full_and_half(env: dict[str, str]) -> tuple[list[dict], dict]:
    """A full-core burner ("full", training) and a half-core one ("half", inference) side
    by side, each until it used its CPU time: their summaries, and their stored jobs."""
    full = start_run("full", BURN_CPU_FULL.format(cpu=5), env, "--kind", "training")
    half = start_run("half", BURN_CPU_HALF.format(cpu=2.5), env, "--kind", "inference")
    summaries = [summary_of(full), summary_of(half)]
    return summaries, wait_until_stored(env, {"full", "half"})


def run_direct_and_nested(env: dict[str, str]) -> dict:
    """One burner run directly ("direct") and the same two levels down, under a shell
    ("nested"), side by side: their stored jobs."""
    code = BURN_CPU_FULL.format(cpu=4)
    direct = start_run("direct", code, env)
    nested = subprocess.Popen(
        [JOULESTAT, "run", "--name", "nested", "--json", "--", "sh", "-c",
         f'"{sys.executable}" -c "$BURN" & wait'],
        env={**env, "BURN": code}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    summary_of(direct)
    summary_of(nested)
    return wait_until_stored(env, {"direct", "nested"})


def run_three_jobs(env: dict[str, str]) -> dict:
    """A full burner ("a"), a half one ("b") and a sleeper ("c"), 3 s each: their jobs."""
    runs = [start_run("a", BURN_FULL.format(s=3), env),
            start_run("b", BURN_HALF.format(s=3), env),
            start_run("c", "import time; time.sleep(3)", env)]
    for run in runs:
        summary_of(run)
    return wait_until_stored(env, {"a", "b", "c"})


def dynamic_cpu_ratio(jobs: dict, over: str, under: str) -> float:
    """Job ``over``'s dynamic CPU energy over job ``under``'s (printed for the log)."""
    ratio = jobs[over]["dynamic_j"]["cpu"] / jobs[under]["dynamic_j"]["cpu"]
    print(f"dynamic cpu energy {over}/{under} = {ratio:.3f}")
    return ratio


def assert_conserved(db_url: str, node: str) -> None:
    """Jobs + unattributed == node energy on every stored job window and component of
    ``node`` (a flush's ticks, migration 0009), over more than 30 stored tick entries."""
    engine = make_engine(db_url)
    rows = unattributed_check(engine, node)
    assert rows
    with engine.connect() as connection:
        ticks = connection.execute(text(
            "SELECT count(*) FROM tick_energy WHERE node = :node"),
            {"node": node}).scalar_one()
    assert ticks > 30
    for t_end_ms, component, device, node_j, sum_j in rows:
        assert sum_j == pytest.approx(node_j, rel=1e-9, abs=1e-9), (t_end_ms, component, device)
