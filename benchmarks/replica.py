"""The dashboard's side on a read replica: do the reading commands work on a hot standby?

docs/store.md sends the dashboard and ``joulestat report``/``compare`` to a read replica
when one PostgreSQL is not enough. This tries it on this machine: a throwaway primary
(tests/helpers/pg.py), a streaming replica made with ``pg_basebackup -R`` on another
port, a simulated node writing jobs through the agent's writer into the primary; then,
against the replica, ``joulestat db current``, ``jobs``, ``compare`` and ``report`` (each
a new process, as a user runs them), the replica's lag after the writer's last flush,
and whether the replica's job totals equal the primary's.

    .venv/bin/python benchmarks/replica.py

Prints what it found; asserts nothing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sqlalchemy import text  # noqa: E402

from benchmarks.store_growth import drive  # noqa: E402
from joulestat.store import migrate  # noqa: E402
from joulestat.store.engine import make_engine  # noqa: E402
from joulestat.store.jobs import list_jobs  # noqa: E402
from tests.helpers.pg import PostgresServer, free_port, running_postgres  # noqa: E402


def start_replica(primary: PostgresServer) -> PostgresServer:
    replica = PostgresServer(primary.bin_dir, primary.root / "replica", free_port(),
                             primary.run_as)
    replica.root.mkdir()
    if primary.run_as:  # root: the server's user owns its directories
        subprocess.run(["chown", "postgres:postgres", str(replica.root)], check=True)
    done = replica._run(str(primary.bin_dir / "pg_basebackup"), "-h", "127.0.0.1", "-p",
                        str(primary.port), "-U", "postgres", "-D", str(replica.data_dir),
                        "-R", "-X", "stream", timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"pg_basebackup: {done.stderr}")
    done = replica.start()
    if done.returncode != 0:
        raise RuntimeError(f"replica start: {done.stderr}\n{replica.log_tail()}")
    return replica


def joulestat(*args: str) -> tuple[int, float, str]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "joulestat", *args], capture_output=True,
                          text=True)
    return done.returncode, time.perf_counter() - began, (done.stdout + done.stderr).strip()


def main() -> int:
    with running_postgres() as primary:
        url = primary.create_database("fleet")
        engine = make_engine(url)
        migrate.upgrade(engine)
        replica = start_replica(primary)
        try:
            replica_url = replica.url(url.rsplit("/", 1)[1])  # the name create_database gave
            start_s = float(int(time.time()) // 60 * 60 - 1800)
            # Two nodes, so that a fleet's comparison reads them in two halves sharing one
            # snapshot (pg_export_snapshot on a standby: PostgreSQL 10 and later).
            drive(engine, "node-1", 10, start_s, 1200)
            writer = drive(engine, "node-0", 10, start_s, 1200)
            flushed = time.perf_counter()
            reader = make_engine(replica_url)
            while True:  # the replica catches up: the primary's totals boundary arrives
                with reader.connect() as connection:
                    seen = connection.execute(text(
                        "SELECT totals_until_ms FROM nodes WHERE node = 'node-0'")).scalar()
                if seen is not None and seen >= (writer._settled_until_ms or 0):
                    break
                if time.perf_counter() - flushed > 30:
                    print("the replica did not catch up within 30 s")
                    return 1
                time.sleep(0.05)
            print(f"replica at port {replica.port} caught up "
                  f"{time.perf_counter() - flushed:.2f} s after the writer's last maintain")
            primary_jobs = {j.id: j.total_j for j in list_jobs(engine)}
            replica_jobs = {j.id: j.total_j for j in list_jobs(reader)}
            print(f"job totals equal on primary and replica: {primary_jobs == replica_jobs} "
                  f"({len(replica_jobs)} jobs)")
            for args in (("db", "current"), ("jobs",), ("compare", "--by", "instance_type"),
                         ("report", "node-0-job-0")):
                code, took_s, output = joulestat(*args, "--db", replica_url)
                first = output.splitlines()[0] if output else ""
                print(f"joulestat {' '.join(args)} --db <replica>: exit {code}, "
                      f"{took_s:.2f} s: {first[:100]}")
            with reader.connect() as connection:
                in_recovery = connection.execute(text("SELECT pg_is_in_recovery()")).scalar()
            print(f"the replica is a hot standby (pg_is_in_recovery): {in_recovery}")
        finally:
            replica.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
