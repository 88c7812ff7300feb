"""The store the ``joulestat jobs`` tests read and delete from, built in this process.

It stands for what tests/system/test_jobs_command.py's module template was before the
tiers: three ``joulestat run`` jobs measured by a real agent on a replayed trace (node
``n1``, no instance type given so ``local``, the trace's CPU and DRAM package at 0.08 W
and 0.02 W, 0.1 s ticks), run at once for about half a second and ended, beside three
CodeCarbon runs brought in by ``joulestat import`` (long ids, exact energies from 45 mJ
to 3.4 MJ). The measured part is written here through the agent's own writer
(:class:`~joulestat.store.writer.StoreWriter`) and attribution
(:func:`~joulestat.attribution.shares.attribute`), as its pipeline does tick by tick:
every tick shared among the jobs running (the rest unattributed), a flush every second,
each job saved when it starts and again when it ends. The CodeCarbon runs go in through
the real ``joulestat import`` (in process, tests/helpers/cli.py). Times are now's, so
``--since 1h`` finds the measured jobs as it did the agent's.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path

from joulestat.attribution.shares import TickUsage, attribute
from joulestat.core.records import DeviceInfo, JobRecord, NodeInfo
from joulestat.core.tick import Tick, TickEntry
from joulestat.store import migrate
from joulestat.store.engine import make_engine
from joulestat.store.writer import StoreWriter
from tests.helpers.cli import invoke
from tests.helpers.job_delete_store import tables_with_job_rows

# Names as people write them: CJK (two columns a character), a combining accent (none).
MEASURED = {"训练-α": "training", "cafe\u0301": "inference", "plain": "other"}
# CodeCarbon runs: (project, run_id, end, duration s, cpu kWh) -> 45 mJ, 1.2 kJ, 3.4 MJ.
RUNS = [("tiny", "0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9", "2024-05-01T12:00:00", 10, 1.25e-8),
        ("mid", "1f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9", "2024-05-01T13:00:00", 60, 1.2e3 / 3.6e6),
        ("big", "2f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9", "2024-05-01T15:00:00", 3600,
         3.4e6 / 3.6e6)]
TRACE = "t_s,component,device,watts\n0,cpu,package-0,0.08\n0,dram,package-0,0.02\n"
NODE = "n1"
N1 = NodeInfo(NODE, "local", "", "AMD EPYC", "0.1.0")
TRACE_W = {("cpu", "package-0"): 0.08, ("dram", "package-0"): 0.02}
DEVICES = [DeviceInfo(component, device, "replay") for component, device in TRACE_W]
IDLE_W = {("cpu", "package-0"): 0.05, ("dram", "package-0"): 0.015}
TICK_S = 0.1
TICKS = 40  # 80 tick rows: assert_conserved wants over 30
FLUSH_EVERY = 10  # ticks: a flush a second, a job window each
# (first tick, last tick) each job runs: started one after another, about half a second
SPANS = {"训练-α": (8, 13), "plain": (9, 14), "cafe\u0301": (9, 14)}
# Their labels (`jobs --label`): threads=1 must not match threads=10.
LABELS = {"训练-α": {"threads": "1", "team": "nlp"}, "plain": {"threads": "10"},
          "cafe\u0301": {"threads": "1"}}
# What the training run counted, at its last tick.
UNITS = {"训练-α": {"sample": 1500.0, "step": 50.0}}


def emissions_csv(path: Path) -> Path:
    """The CodeCarbon ``emissions.csv`` of :data:`RUNS` (from France), at ``path``."""
    path.write_text("timestamp,project_name,run_id,duration,cpu_energy,gpu_energy,"
                    "ram_energy,country_iso_code\n" + "".join(
                        f"{end},{project},{run_id},{duration},{kwh!r},0,0,FRA\n"
                        for project, run_id, end, duration, kwh in RUNS))
    return path


def measure(db_url: str, start_s: float) -> None:
    """The agent's part: :data:`TICKS` ticks of the trace on ``n1`` from ``start_s``,
    :data:`MEASURED`'s jobs running over their :data:`SPANS` (and ended)."""
    engine = make_engine(db_url)
    writer = StoreWriter(engine, N1, DEVICES, raw_retention_s=3600)
    jobs = {name: JobRecord(id=uuid.uuid4().hex, name=name, kind=kind, labels=LABELS[name],
                            pids=frozenset({1000 + n}),
                            started_s=start_s + SPANS[name][0] * TICK_S + 0.01 * n,
                            origin="run",
                            agent_labels={"cpu_source": "process tree",
                                          "idle_policy": "share"})
            for n, (name, kind) in enumerate(MEASURED.items())}
    for i in range(TICKS):
        t0 = start_s + i * TICK_S
        for name, job in jobs.items():
            first, last = SPANS[name]
            if i == first:
                writer.save_job(job)
            elif i == last and name in UNITS:
                writer.add_units(job.id, t0 + TICK_S, UNITS[name])
            elif i == last + 1:
                writer.save_job(replace(job, ended_s=t0 + 0.01))
        running = tuple(job.id for name, job in jobs.items()
                        if SPANS[name][0] <= i <= SPANS[name][1])
        tick = Tick(t0, t0 + TICK_S, tuple(TickEntry(component, device, "replay", w * TICK_S)
                                           for (component, device), w in TRACE_W.items()))
        usage = TickUsage(node_busy_cpu_s=0.08,
                          job_cpu_s={job_id: 0.01 + 0.005 * n
                                     for n, job_id in enumerate(running)},
                          running_jobs=running)
        writer.add(tick)
        writer.add_shares(tick, attribute(tick, usage, IDLE_W, "share"))
        if (i + 1) % FLUSH_EVERY == 0:
            assert writer.flush()
    assert writer.flush()
    engine.dispose()


def build_jobs_store(folder: Path) -> str:
    """The store of the module doc under ``folder``; its URL."""
    db_url = f"sqlite:///{folder / 'jobs.db'}"
    engine = make_engine(db_url)
    migrate.upgrade(engine)
    engine.dispose()
    measure(db_url, time.time() - 60)
    done = invoke("import", str(emissions_csv(folder / "emissions.csv")), "--db", db_url)
    assert done.returncode == 0, done.stderr
    return db_url


def copy_store(db_url: str, path: Path) -> str:
    """A copy of the SQLite store at ``db_url`` at ``path`` (for a test that deletes)."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as source, \
            sqlite3.connect(path) as target:
        source.backup(target)
    return f"sqlite:///{path}"


def rows_of(db_url: str, job_id: str) -> dict[str, int]:
    """Rows of ``job_id`` in each table that holds a job's rows."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        return {name: connection.execute(f"SELECT count(*) FROM {name} WHERE {column} = ?",
                                         (job_id,)).fetchone()[0]
                for name, column in tables_with_job_rows().items()}


def all_counts(db_url: str) -> dict[str, int]:
    """Rows in every table of the store."""
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as connection:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: connection.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in tables}
