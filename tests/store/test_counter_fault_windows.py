"""Jobs + unattributed = node through RAPL counter faults, on every tick and in the store
(issue 47, item 5).

A faulty counter's ticks are filled and stored as ``fill:rapl``, so the source of a
device's series changes where a fault starts and where it ends. The job rows of a store
window are keyed without their source (``job_energy``'s key is that of ``tick_energy``
plus the job), so a window holding both sources of one device must be cut there, or one
of its two rows collides with the other and is dropped: energy attributed to nobody,
silently. Here a fake powercap tree goes through every fault the sensor handles (a
freeze that catches up, one that does not, a reset, a jump, a zone whose directory
vanishes for a while, a package that appears) under two jobs, through the real sampler,
accounting and store writer. Expected figures come from the ticks and their shares as
attribution made them, never from the store.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.attribution.accounting import JobAccounting
from joulestat.attribution.idle import IdleBaselines
from joulestat.attribution.registry import JobRegistry
from joulestat.attribution.shares import IdlePolicy
from joulestat.core.records import NodeInfo, Share
from joulestat.core.tick import Tick, TickEntry
from joulestat.devices.rapl import open_rapl
from joulestat.pipeline.pipeline import Pipeline
from joulestat.pipeline.sampler import Sampler
from joulestat.store.nodes import unattributed_check
from joulestat.store.writer import StoreWriter
from tests.fakes.powercap import FakePowercap
from tests.fakes.procfs import FakeProc

NODE = NodeInfo("faulty-1", "m5.large", "eu-west-1", "Xeon", "0.1.0")
PACKAGE_0_UJ = 40_000_000  # 40 W, a tick of 1 s
PACKAGE_1_UJ = 30_000_000
# Job CPU seconds a tick, and the node's: the jobs keep it busy between them, so each
# gets its CPU share of every joule (idle included, under --idle-policy share).
CPU_S = {"a": 0.6, "b": 0.2}
JOB_FRACTION = {"a": 0.75, "b": 0.25}
TICKS = 66
FLUSH_EVERY = 5  # ticks: the agent flushes every 5 s; windows are cut there and at minutes


def _faulty_run(tmp_path: Path, engine: Engine) -> tuple[list[tuple[Tick, list[Share]]],
                                                          dict[str, int]]:
    """The run: each tick with its shares as attribution gave them, and the faults the
    sensor counted. Second by second, on a hand-driven clock: 11 good ticks, then a
    freeze that catches up (12-17), one that resumes where it stopped (22-25), a reset
    (30), a jump of 1e6 J (36), package-0's directory gone (42-47, back caught up) and
    package-1 appearing (52)."""
    tree = FakePowercap(tmp_path / "sys")
    tree.add_zone("intel-rapl:0", "package-0", max_energy_range_uj=10**13)
    proc = FakeProc(tmp_path / "proc")
    for pid in (100, 101):
        proc.add(pid, start_s=1000)
    proc.write()
    clock = {"s": 100.0}
    sensor = open_rapl(tree.root, now_s=clock["s"])
    assert sensor is not None
    sampler = Sampler([sensor], monotonic=lambda: clock["s"],
                      wall=lambda: 1_700_000_000.0 + clock["s"])
    registry = JobRegistry(clock=lambda: 0.5)
    accounting = JobAccounting(registry, proc.root, IdleBaselines(), IdlePolicy.SHARE)
    writer = StoreWriter(engine, NODE, sampler.describe(), raw_retention_s=600.0)
    pipeline = Pipeline(sampler, NODE, accounting, [writer], boot_id="boot")
    pipeline.start()
    for job_id, pid in (("a", 100), ("b", 101)):
        registry.register(job_id, "training", [pid], job_id=job_id).registered_boot_s = 1000.0
    counted_uj = offset_uj = 0  # what the hardware counted; what the file adds to it
    package_1_uj: int | None = None
    ticks: list[tuple[Tick, list[Share]]] = []
    for second in range(1, TICKS + 1):
        clock["s"] = 100.0 + second
        counted_uj += PACKAGE_0_UJ
        if 22 <= second < 26:
            offset_uj -= PACKAGE_0_UJ  # stopped: this energy never shows in the file
        if second == 30:
            offset_uj = -counted_uj  # reset to 0
        if second == 36:
            offset_uj += 10**12  # a jump of 1e6 J never drawn
        if second == 42:
            tree.vanish("intel-rapl:0")
        if second == 48:
            tree.reappear("intel-rapl:0")
        if second == 52:
            tree.add_zone("intel-rapl:1", "package-1")
            package_1_uj = 0
        elif package_1_uj is not None:
            package_1_uj += PACKAGE_1_UJ
            tree.set_energy_uj("intel-rapl:1", package_1_uj)
        if not (12 <= second < 18 or 22 <= second < 26 or 42 <= second < 48):
            tree.set_energy_uj("intel-rapl:0", counted_uj + offset_uj)  # else frozen, gone
        for pid, job_id in ((100, "a"), (101, "b")):
            proc.run(pid, CPU_S[job_id])
        proc.write()
        tick, result = pipeline.tick()
        assert result is not None
        ticks.append((tick, result.shares))
        if second % FLUSH_EVERY == 0:
            assert writer.flush()
    pipeline.close()  # flushes the rest
    return ticks, sensor.faults_total()


def _by_entry(shares: list[Share]) -> dict[tuple[str, str], dict[str | None, float]]:
    found: defaultdict[tuple[str, str], dict[str | None, float]] = defaultdict(dict)
    for share in shares:
        parts = found[(share.component, share.device)]
        parts[share.job] = parts.get(share.job, 0.0) + share.energy_j
    return dict(found)


def test_every_fault_keeps_jobs_plus_unattributed_equal_to_the_node(
        tmp_path: Path, engine: Engine) -> None:
    ticks, faults = _faulty_run(tmp_path, engine)
    assert (faults["frozen"], faults["backwards"], faults["jump"], faults["unreadable"]) == (
        2, 1, 1, 1), faults
    sources = [{(e.device, e.source) for e in tick.entries} for tick, _ in ticks]
    assert sum(("package-0", "fill:rapl") in found for found in sources) >= 15
    assert ("package-1", "rapl") in sources[-1]

    # On every tick: each entry is split whole, the filled ones as any other, among the
    # two jobs by their CPU share; nothing is left to unattributed, nothing to nobody.
    expected: defaultdict[tuple[str, str], float] = defaultdict(float)  # (job, source)
    for tick, shares in ticks:
        split = _by_entry(shares)
        assert set(split) == {(e.component, e.device) for e in tick.entries}
        for entry in tick.entries:
            parts = split[(entry.component, entry.device)]
            assert sum(parts.values()) == pytest.approx(entry.energy_j, rel=1e-9, abs=1e-9)
            for job_id, fraction in JOB_FRACTION.items():
                assert parts.get(job_id, 0.0) == pytest.approx(
                    fraction * entry.energy_j, rel=1e-9, abs=1e-9), (tick.t1_s, entry)
                expected[(job_id, entry.source)] += parts.get(job_id, 0.0)
            expected[("", entry.source)] += parts.get(None, 0.0)

    # And in the store: every window's job rows, the unattributed one included, sum to
    # the node's ticks it covers, and each job keeps its filled joules as filled.
    lost = [(t_end_ms, node_j - sum_j) for t_end_ms, _c, _d, node_j, sum_j
            in unattributed_check(engine, NODE.node)
            if sum_j != pytest.approx(node_j, rel=1e-9, abs=1e-9)]
    print(f"{sum(j for _, j in lost):.1f} J attributed to nobody in {len(lost)} windows")
    assert lost == []
    with engine.connect() as connection:
        stored = {(job_id, source): energy_j for job_id, source, energy_j in
                  connection.execute(text(
                      "SELECT job_id, source, sum(dynamic_j + idle_j) FROM job_energy "
                      "WHERE node = :node GROUP BY job_id, source"), {"node": NODE.node})}
    assert set(stored) == set(expected)
    for key, energy_j in expected.items():
        assert stored[key] == pytest.approx(energy_j, rel=1e-9, abs=1e-9), key


def test_a_source_change_inside_one_window_keeps_both_rows(engine: Engine) -> None:
    """The smallest case: one job, one device, one flush inside one minute, filled for
    four ticks in the middle. The window is cut where the source changes, so both
    sources' rows are stored and every row of a window still ends at one time."""
    writer = StoreWriter(engine, NODE, [], raw_retention_s=600.0)
    t0 = 1_700_000_040.0  # a minute boundary
    for second in range(1, 13):
        source = "fill:rapl" if 5 <= second < 9 else "rapl"
        tick = Tick(t0 + second - 1, t0 + second,
                    (TickEntry("cpu", "package-0", source, 40.0),))
        writer.add(tick)
        writer.add_shares(tick, [Share("a", "cpu", "package-0", source, 24.0, 6.0),
                                 Share(None, "cpu", "package-0", source, 8.0, 2.0)])
    assert writer.flush()
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT t_end_ms, job_id, source, dynamic_j + idle_j FROM job_energy "
            "ORDER BY t_end_ms, job_id")).all()
    end_ms = [round((t0 + s) * 1000) for s in (4, 8, 12)]
    assert [tuple(row) for row in rows] == [
        (end_ms[0], "", "rapl", 40.0), (end_ms[0], "a", "rapl", 120.0),
        (end_ms[1], "", "fill:rapl", 40.0), (end_ms[1], "a", "fill:rapl", 120.0),
        (end_ms[2], "", "rapl", 40.0), (end_ms[2], "a", "rapl", 120.0)]
    for *_key, node_j, sum_j in unattributed_check(engine, NODE.node):
        assert sum_j == pytest.approx(node_j, rel=1e-9)
