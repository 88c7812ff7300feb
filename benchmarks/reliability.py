"""Node energy under stress, against fake RAPL counters of known wattage: a high tick
rate, and the store going away.

    .venv/bin/python benchmarks/reliability.py [--seconds 60] [--outage 60] [--skip-outage]

1. **20 Hz**: the agent at ``--interval 0.05`` for ``--seconds``: ticks counted against
   elapsed / interval, the agent's CPU as a share of one core (``/proc/<pid>/stat``),
   and the stored node energy against the counter's truth.
2. **Store outage**: the agent at 1 Hz on a throwaway PostgreSQL server (needs the
   server binaries; see tests/helpers/pg.py), the server stopped for ``--outage`` seconds and
   started again: stored node energy against the truth, and the longest hole in the
   stored ticks.

It prints figures; it asserts nothing (the machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.powercap import FakePowercap  # noqa: E402
from tests.helpers.agent_process import agent_env, running_agent  # noqa: E402

POWER_W = 40.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def stored(db_url: str) -> tuple[float, float, int]:
    """(cpu energy J, covered seconds, longest hole in ms) of node n1's stored ticks."""
    engine = create_engine(db_url)
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT t_start_ms, t_end_ms, energy_j FROM tick_energy "
            "WHERE node = 'n1' AND component = 'cpu' ORDER BY t_end_ms")).all()
    engine.dispose()
    energy = sum(r[2] for r in rows)
    covered = sum(r[1] - r[0] for r in rows) / 1000
    holes = [b[0] - a[1] for a, b in zip(rows, rows[1:], strict=False)]
    return energy, covered, max(holes, default=0)


def high_rate(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake = FakePowercap(root / "sys")
        fake.add_zone("intel-rapl:0", "package-0")
        with fake.drive("intel-rapl:0", power_w=POWER_W, hz=1000) as driver, \
                running_agent(root, "--sysfs-root", str(root / "sys"), "--interval", "0.05",
                              "--node", "n1") as agent:
            time.sleep(2.0)
            ticks0, cpu0, t0 = agent.value("joulestat_agent_ticks_total"), \
                cpu_s(agent.proc.pid), time.monotonic()
            time.sleep(seconds)
            ticks = agent.value("joulestat_agent_ticks_total") - ticks0
            used_s, elapsed_s = cpu_s(agent.proc.pid) - cpu0, time.monotonic() - t0
            agent.stop()
            truth_j = driver.energy_j
        energy_j, covered_s, hole_ms = stored(agent.db_url)
    print(f"20 Hz, {elapsed_s:.0f} s: {ticks:.0f} of {elapsed_s / 0.05:.0f} ticks "
          f"({ticks / (elapsed_s / 0.05):.1%}), agent CPU {used_s / elapsed_s:.1%} of a core")
    print(f"  stored {energy_j:.1f} J over {covered_s:.1f} s covered = "
          f"{energy_j / covered_s:.3f} W average (truth {POWER_W:.0f} W; the counter "
          f"advanced {truth_j:.1f} J since before the agent started), longest hole "
          f"{hole_ms} ms")


def outage(seconds_before: float, outage_s: float) -> None:
    from tests.helpers.pg import running_postgres

    with tempfile.TemporaryDirectory() as tmp, running_postgres() as server:
        root = Path(tmp)
        db_url = server.create_database("reliability")
        fake = FakePowercap(root / "sys")
        fake.add_zone("intel-rapl:0", "package-0")
        with fake.drive("intel-rapl:0", power_w=POWER_W, hz=200), \
                running_agent(root, "--sysfs-root", str(root / "sys"), "--interval", "1",
                              "--node", "n1", "--db", db_url,
                              env=agent_env(JOULESTAT_FLUSH_INTERVAL="5")) as agent:
            time.sleep(seconds_before)
            server.stop()
            began = time.monotonic()
            time.sleep(outage_s)
            server.start()
            print(f"PostgreSQL away for {time.monotonic() - began:.0f} s")
            time.sleep(15)  # the writer's backoff, then a flush
            agent.stop()
        energy_j, covered_s, hole_ms = stored(db_url)
        log = agent.log()
    expected_j = POWER_W * covered_s
    print(f"  stored {energy_j:.1f} J over {covered_s:.1f} s covered = "
          f"{energy_j / covered_s:.2f} W average (truth {POWER_W:.0f} W; "
          f"{energy_j - expected_j:+.2f} J), longest hole "
          f"{hole_ms} ms; dropped rows logged: {'dropped' in log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--outage", type=float, default=60.0)
    parser.add_argument("--skip-outage", action="store_true")
    args = parser.parse_args()
    high_rate(args.seconds)
    if not args.skip_outage:
        outage(10.0, args.outage)


if __name__ == "__main__":
    main()
