"""Migration 0006 (the component ``gpu`` becomes ``accelerator``) on any database.

:func:`check_rename_keeps_figures` runs on SQLite in tests/unit/test_accelerator_rename.py
and on a real PostgreSQL (whose raw tables are partitioned by then) in
tests/integration/test_store_postgres.py. Rows are written at revision 0005 through the
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

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.devices.sensor import DeviceInfo
from joulestat.store import migrate
from joulestat.store.durability import load_checkpoint
from joulestat.store.nodes import minute_energy_rows, node_devices, node_energy_j
from joulestat.store.series import job_energy_series
from joulestat.store.writer import StoreWriter
from tests.helpers.report_checks import assert_same
from tests.helpers.store_jobs import (
    DEVICES,
    RETENTION_S,
    T0,
    TRAINER,
    count,
    downgrade,
    feed,
    make_job,
    make_tick,
    part_figures,
    save_jobs_before_0007,
    shares_for,
    totals_before_0010,
    written_before_0014,
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


@written_before_0014
def check_rename_keeps_figures(engine: Engine) -> None:
    """``engine`` points at an empty database. Rows at 0005 under ``gpu``; up to head
    they are ``accelerator`` with every figure the same; down to 0005 they are ``gpu``
    again, the same; then rows under both names (today's writer on the downgraded store)
    are merged by the next upgrade, their joules added."""
    assert migrate.upgrade(engine, "0005") == "0005"
    writer = StoreWriter(engine, TRAINER, OLD_DEVICES, raw_retention_s=RETENTION_S)
    save_jobs_before_0007(engine, [make_job(job, T0) for job in JOBS])
    feed_as_before(writer, T0, 600)
    writer.save_checkpoint(checkpoint("gpu"), "boot-1", T0 + 600)
    # Prunes minutes 0..4 (rolled up) and sums all ten into the job totals (today's
    # writer then rolls their job windows into minutes and deletes them: 0009).
    with totals_before_0010():  # the store's totals have no source yet
        assert writer.maintain(T0 + 600 + RETENTION_S - 270) is not None
    assert all(count(engine, table) > 0 for table in TABLES if table != "job_energy")
    assert components(engine) == {"cpu", "gpu"}
    before = figures(engine)

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    assert_same_figures(figures(engine, {"accelerator": "gpu"}), before)
    assert stored_checkpoint(engine) == checkpoint("accelerator")

    downgrade(engine, "0005")
    assert components(engine) == {"cpu", "gpu"}
    assert_same_figures(figures(engine), before)
    assert stored_checkpoint(engine) == checkpoint("gpu")

    # Today's writer on the downgraded store: the same job and node under both names.
    writer = StoreWriter(engine, TRAINER, DEVICES, raw_retention_s=RETENTION_S)
    feed(writer, T0 + 960, 120, JOBS)
    with totals_before_0010():
        assert writer.maintain(T0 + 1080 + RETENTION_S - 270) is not None
    assert components(engine) == {"cpu", "gpu", "accelerator"}
    jobs = part_figures(engine)
    node = node_energy_j(engine, TRAINER.node, T0 - 60, T0 + 10_000)
    assert all(jobs[job][0]["gpu"] > 0 < jobs[job][0]["accelerator"] for job in JOBS)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    merged = part_figures(engine)
    for job in JOBS:
        for kind in (0, 1):  # dynamic, idle
            was, now = jobs[job][kind], merged[job][kind]
            assert now == pytest.approx({"cpu": was["cpu"],
                                         "accelerator": was["gpu"] + was["accelerator"]},
                                        rel=1e-12), (job, kind)
        assert merged[job][2] == jobs[job][2]
    assert node_energy_j(engine, TRAINER.node, T0 - 60, T0 + 10_000) == pytest.approx(
        {("cpu", "0"): node[("cpu", "0")],
         ("accelerator", "0"): node[("gpu", "0")] + node[("accelerator", "0")]}, rel=1e-12)
    # one description of the device: today's writer's, which registered it last
    assert [(d.component, d.device) for d in node_devices(engine, TRAINER.node)] == [
        ("accelerator", "0"), ("cpu", "0")]


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


@written_before_0014
def check_both_names_merge(engine: Engine) -> None:
    """Every table holding one key under both names at 0005 (never written so by an
    agent, but possible in a downgraded store): the upgrade adds the old row's joules
    (and covered seconds) to the new row's and drops the old one; a key under the old
    name alone is renamed."""
    assert migrate.upgrade(engine, "0005") == "0005"
    StoreWriter(engine, TRAINER, OLD_DEVICES, raw_retention_s=RETENTION_S)  # as "gpu"
    StoreWriter(engine, TRAINER, DEVICES, raw_retention_s=RETENTION_S)  # "accelerator"
    with engine.begin() as connection:
        for table, (row, summed) in MERGED.items():
            alone = {"job_id": "b"} if "job_id" in row else {"device": "1"}
            for component, value, other in (("gpu", 1.0, {}), ("accelerator", 2.0, {}),
                                            ("gpu", 4.0, alone)):
                values = {**row, **other, "node": TRAINER.node, "component": component,
                          **dict.fromkeys(summed, value)}
                connection.execute(text(
                    f"INSERT INTO {table} ({', '.join(values)}) "
                    f"VALUES ({', '.join(':' + k for k in values)})"), values)
    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    assert components(engine) == {"cpu", "accelerator"}
    with engine.connect() as connection:
        for table, (row, summed) in MERGED.items():
            key = "job_id" if "job_id" in row else "device"
            found = connection.execute(text(
                f"SELECT {key}, component, {', '.join(summed)} FROM {table} "
                f"ORDER BY {key}")).all()
            assert [tuple(r) for r in found] == [
                (row.get(key, "0"), "accelerator", *[3.0] * len(summed)),
                ("b" if key == "job_id" else "1", "accelerator", *[4.0] * len(summed))], table
    assert [(d.component, d.device, d.model) for d in node_devices(engine, TRAINER.node)] == [
        ("accelerator", "0", "A100"), ("cpu", "0", "")]
