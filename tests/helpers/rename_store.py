"""Migration 0006 (the component ``gpu`` becomes ``accelerator``) on any database.

tests/store/test_migrations.py runs it on SQLite and on PostgreSQL (whose raw tables are
partitioned by then). Rows are written at revision 0005 through the
real writer exactly as the agent before the rename wrote them (every accelerator
``gpu``; job rows as before 0007, which added a column to ``jobs``), rolled up, pruned
and summed into job totals, so every table with a ``component`` column holds some;
figures are read through the store's read modules (per job through the per-part reads,
which need no column of ``jobs`` and so read revision 0005 too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.devices.sensor import DeviceInfo
from joulestat.store.durability import load_checkpoint
from joulestat.store.nodes import minute_energy_rows, node_devices, node_energy_j
from joulestat.store.series import job_energy_series
from joulestat.store.writer import StoreWriter
from tests.helpers.report_checks import assert_same
from tests.helpers.store_jobs import (
    T0,
    TRAINER,
    make_tick,
    part_figures,
    shares_for,
)

TABLES = ("node_devices", "tick_energy", "minute_energy", "job_energy", "job_minute_energy",
          "job_energy_totals")
OLD_DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
               DeviceInfo("gpu", "0", "nvml_energy", model="A100", uuid="GPU-1", index=0)]
JOBS = ("a", "b")


def checkpoint(accelerator: str) -> dict[str, Any]:
    """A crash checkpoint as the agent saves it, naming the accelerator ``accelerator``."""
    return {
        "sampler": {"mono_s": 5.0,
                    "last_j": [["cpu", "0", "rapl", 1.0],
                               [accelerator, "0", "nvml_energy", 2.0]],
                    "sensors": {"replay": {"opened_s": 1.0, "last_s": 5.0,
                                           "energy_j": [[accelerator, "gpu0", 3.0]]}}},
        "accounting": {"busy_ticks": 7, "cpu_ns": {}, "process_owners": {},
                       "idle": [[accelerator, "0", 60.0], ["cpu", "0", 4.0]]},
    }


def feed_as_before(writer: StoreWriter, start_s: float, ticks: int) -> None:
    """1 s ticks and shares of JOBS as the agent wrote them before 0006: ``gpu``."""
    for i in range(ticks):
        tick = make_tick(start_s + i + 1, 20.0 + i % 7, 150.0 + i % 11)
        shares = shares_for(tick, JOBS, i)
        old = replace(tick, entries=tuple(
            replace(e, component="gpu") if e.component == "accelerator" else e
            for e in tick.entries))
        writer.add(old)
        writer.add_shares(old, [replace(s, component="gpu") if s.component == "accelerator"
                                else s for s in shares])
        for job in JOBS:
            writer.add_units(job, old.t1_s, {"tokens": 3.0})


def components(engine: Engine) -> set[str]:
    """Every component named in a table that has a ``component`` column."""
    with engine.connect() as connection:
        return {row[0] for table in TABLES for row in connection.execute(
            text(f"SELECT DISTINCT component FROM {table}"))}


def figures(engine: Engine, back: Mapping[str, str] | None = None) -> dict[tuple, Any]:
    """What the store's reads say of TRAINER and its jobs, components named through
    ``back`` (to compare a renamed store with the store before)."""
    back = back or {}

    def name(component: str) -> str:
        return back.get(component, component)

    found: dict[tuple, Any] = {}
    for job, (dynamic_j, idle_j, units) in part_figures(engine).items():
        for kind, joules in (("dynamic", dynamic_j), ("idle", idle_j)):
            for component, value in joules.items():
                found[(kind, job, name(component))] = value
        found[("units", job)] = units
    for (component, device), value in node_energy_j(engine, TRAINER.node, T0 - 60,
                                                    T0 + 10_000).items():
        found[("node", name(component), device)] = value
    for m in minute_energy_rows(engine, TRAINER.node, T0 - 60, T0 + 10_000):
        found[("minute", m.minute_start_s, name(m.component), m.device)] = [
            m.energy_j, m.covered_s, m.source]
    for d in node_devices(engine, TRAINER.node):
        found[("device", name(d.component), d.device)] = [d.source, d.model, d.uuid, d.index]
    for job_id in JOBS:
        for t_end_s, component, dynamic_j, idle_j in job_energy_series(engine, job_id):
            found[("series", job_id, t_end_s, name(component))] = [dynamic_j, idle_j]
    return found


def assert_same_figures(found: dict[tuple, Any], expected: dict[tuple, Any]) -> None:
    assert sorted(found, key=repr) == sorted(expected, key=repr)
    for key, value in expected.items():
        assert_same(value, found[key], repr(key))


def stored_checkpoint(engine: Engine) -> dict[str, Any]:
    saved = load_checkpoint(engine, TRAINER.node)
    assert saved is not None
    return saved.state


# table: (its other columns, as one row of it has them; the columns 0006 adds up)
MERGED = {
    "tick_energy": ({"t_end_ms": 60_000, "device": "0", "t_start_ms": 59_000,
                     "source": "nvml_energy"}, ("energy_j",)),
    "minute_energy": ({"minute_start_s": 0, "device": "0", "source": "nvml_energy"},
                      ("energy_j", "covered_s")),
    "job_energy": ({"job_id": "a", "t_end_ms": 60_000, "device": "0", "t_start_ms": 59_000,
                    "source": "nvml_energy"}, ("dynamic_j", "idle_j")),
    "job_minute_energy": ({"job_id": "a", "minute_start_s": 0, "device": "0"},
                          ("dynamic_j", "idle_j")),
    "job_energy_totals": ({"job_id": "a"}, ("dynamic_j", "idle_j")),
}
