"""What ``joulestat run`` adds around the user's command: the wait before it starts and
the wait after it exits, with an agent on the node and without one (embedded).

Runs ``joulestat run --name run-startup -- date +%s.%N`` ``--runs`` times in each mode:
``date`` prints the moment it starts, so the start-up is that moment less the moment
``joulestat run`` was started, and the finish is the moment ``joulestat run`` exited
less the moment ``date`` did (``date`` itself takes about a millisecond, timed alone
first as ``bare``). With an agent (started here, on a temporary SQLite store) ``joulestat
run`` registers the job through its API, hands the command its environment, and after
the command exits waits until the job's last tick is stored; embedded (``--embedded``),
it samples in its own process, so it builds the agent's pipeline first. Also prints the
Python start-up alone (``python -c pass``) and the import of the ``run`` command
(``python -c 'import joulestat.cli.run'``) for scale.

    .venv/bin/python benchmarks/run_startup.py [--runs 7] [--interval 1]

To time the code before a change: ``PYTHONPATH=/path/to/old/tree`` (as busy_node.py).
Prints medians and maxima of wall seconds; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.sidecars import (  # noqa: E402  (after the path insert)
    JOULESTAT,
    agent_env,
    free_port,
    migrate_store,
    stop,
    wait_for_agent,
)

COMMAND = ["date", "+%s.%N"]


def timed_run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(start-up, finish) of one ``joulestat run`` of :data:`COMMAND`, wall seconds."""
    began = time.time()
    done = subprocess.run([str(JOULESTAT), "run", "--name", "run-startup", *args, "--",
                           *COMMAND], env=env, capture_output=True, text=True)
    ended = time.time()
    if done.returncode:
        raise SystemExit(f"joulestat run exited with {done.returncode}: {done.stderr}")
    started = float(done.stdout.split()[0])
    return started - began, ended - started


def timed(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - began


def line(label: str, values: list[float]) -> str:
    return f"{label:<34} {statistics.median(values):>8.3f} {max(values):>8.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds per tick")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="joulestat-run-startup-"))
    env = agent_env()
    db_url = f"sqlite:///{workdir / 'store.db'}"
    migrate_store(db_url, env)
    common = ["--db", db_url, "--interval", str(args.interval), "--log-level", "ERROR"]
    print(f"{'wall seconds, ' + str(args.runs) + ' runs':<34} {'median':>8} {'max':>8}")
    print(line("bare `date`", [timed(COMMAND, env) for _ in range(args.runs)]))
    print(line("python -c pass", [timed([sys.executable, "-c", "pass"], env)
                                  for _ in range(args.runs)]))
    print(line("import joulestat.cli.run", [
        timed([sys.executable, "-c", "import joulestat.cli.run"], env)
        for _ in range(args.runs)]))

    api_port = free_port()
    agent_url = f"http://127.0.0.1:{api_port}"
    agent = subprocess.Popen(
        [str(JOULESTAT), "agent", "--api-port", str(api_port), "--metrics-port", "0",
         *common], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_agent(agent_url, agent)
        with_agent = [timed_run(["--agent-url", agent_url], env) for _ in range(args.runs)]
    finally:
        stop([agent])
    embedded = [timed_run(["--embedded", *common], env) for _ in range(args.runs)]
    for label, found in (("with an agent", with_agent), ("embedded", embedded)):
        print(line(f"{label}: before the command", [start for start, _end in found]))
        print(line(f"{label}: after it exits", [end for _start, end in found]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
