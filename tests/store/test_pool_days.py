"""The day sums a fleet's comparison reads (agent/store/pool_days.py) are its jobs, summed.

A node's maintain pass sums each settled UTC day of its single-node ended jobs; a
comparison by setup reads a summed day's rows instead of its jobs, the rest job by job.
Checked on SQLite and PostgreSQL: the pooled table from the sums is the per-job one
(every row, figure, mean and spread across runs), the sums are what is read, and any
change to a summed day's job (written again, deleted, a part on another node) takes the
day out of use at once (the triggers of revisions 0001 and 0004) until a later pass
sums it again. The day not over is summed up to its settle line, and a job ending after
that line leaves it summed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.engine import Engine

from joulestat.carbon.pricing import Pricer
from joulestat.reports.compare.setups import compare_setups
from joulestat.store import migrate
from joulestat.store.job_delete import delete_jobs
from joulestat.store.jobs import JobFilter, job_totals
from joulestat.store.pool_days import maybe_unsummed, summed_day_in
from joulestat.store.schema import DAY_S, JOB_NODES, JOB_POOL_DAYS, JOB_POOL_SUMS, NODES
from tests.helpers.compare_store import (
    SETTINGS,
    T0,
    assert_pooled_is_per_job,
    job,
    maintain_every_node,
    node,
    run_job,
    runs_store,
)
from tests.helpers.store_jobs import downgrade
from tests.helpers.stores import Store

RUNS = 60  # an hour apart from T0: three UTC days
LATER = T0 + 5 * DAY_S


def _summed(engine: Engine) -> dict[tuple[str, int], int]:
    """(node, day) -> parts summed."""
    days = JOB_POOL_DAYS.c
    with engine.connect() as connection:
        return {(n, int(d)): int(p) for n, d, p in connection.execute(
            select(days.node, days.day_s, days.parts))}


def _sum_every_day(engine: Engine, now_s: float = LATER) -> dict[tuple[str, int], int]:
    """Maintain passes until no day is left to sum (a pass sums two at most)."""
    summed: dict[tuple[str, int], int] = {}
    for _pass in range(5):
        maintain_every_node(engine, now_s)
        now_s += 300
        found = _summed(engine)
        if found == summed:
            break
        summed = found
    return summed


def assert_all_windows(engine: Engine, now_s: float) -> None:
    """Pooled is per-job per run and per inference, over all time and over windows
    that hold whole summed days, cut one, or end before the last day."""
    day = T0 // DAY_S * DAY_S
    for since_s, until_s in ((None, None), (day - 1, None), (day, None), (T0 + 4_000, None),
                             (day + DAY_S - 1, now_s), (None, day + 2 * DAY_S),
                             (day - DAY_S, day + DAY_S + 1)):
        for kind, unit in ((None, None), ("inference", "inference"), ("inference", None)):
            assert_pooled_is_per_job(engine, kind, unit=unit, now_s=now_s, since_s=since_s,
                                     until_s=until_s, with_ids=False)


def _row_energy_j(engine: Engine) -> float:
    found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), LATER,
                           with_ids=False)
    assert found is not None
    [row] = found.table.rows
    return row.energy_j


def test_settled_days_are_summed_and_read_as_their_jobs(store: Store) -> None:
    engine = runs_store(store.url, RUNS)
    before_j = _row_energy_j(engine)
    summed = _sum_every_day(engine)
    # Every job ended on one of both nodes' three days: all of them summed.
    assert {day for _node, day in summed} == {
        (T0 + i * 3600 + 900) // DAY_S * DAY_S for i in range(RUNS)}
    assert sum(summed.values()) == RUNS
    assert_all_windows(engine, LATER)
    assert_pooled_is_per_job(engine, "inference", unit="inference", now_s=LATER,
                             with_ids=False)
    # The comparison reads the sums, not the jobs: doubled sums double the row (a
    # window that cuts the first day reads that day job by job instead).
    with engine.begin() as connection:
        connection.execute(update(JOB_POOL_SUMS).values(energy_j=JOB_POOL_SUMS.c.energy_j * 2))
    assert _row_energy_j(engine) == 2 * before_j
    with engine.begin() as connection:
        connection.execute(update(JOB_POOL_SUMS).values(energy_j=JOB_POOL_SUMS.c.energy_j / 2))
    assert _row_energy_j(engine) == before_j
    # The same figures as the jobs' own (job_totals: what `jobs`, `report` and the job
    # API read), energy, dynamic energy and units, to the printed digits and beyond.
    jobs = job_totals(engine, JobFilter(kind="inference"))
    found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), LATER,
                           unit="inference", with_ids=False)
    assert found is not None
    [row] = found.table.rows
    assert row.energy_j == pytest.approx(sum(j.total_j for j in jobs), rel=1e-12)
    assert row.dynamic_j == pytest.approx(sum(j.dynamic_j for j in jobs), rel=1e-12)
    assert row.accelerator_j == pytest.approx(sum(j.accelerator_j for j in jobs), rel=1e-12)
    assert row.units == pytest.approx(sum(j.units["inference"] for j in jobs), rel=1e-12)
    # --json lists every job's id, so it reads them one by one: the same table.
    assert_pooled_is_per_job(engine, "inference", now_s=LATER, with_ids=True)


def test_a_change_to_a_summed_jobs_day_takes_it_out_of_use(store: Store) -> None:
    engine = runs_store(store.url, RUNS)
    summed = _sum_every_day(engine)
    first_day = min(day for _node, day in summed)

    def day_of(job_id: str) -> tuple[str, int]:
        i = int(job_id.removeprefix("j-"))
        return f"g5-{i % 2}", int((T0 + i * 3600 + 900) // DAY_S * DAY_S)

    changes = (
        # written again with a new label (the writer's upsert of the job row)
        ("j-003", lambda: run_job(engine, node("g5-1", "g5.xlarge"),
                                  replace(job("j-003", "bert-g5", "inference",
                                              T0 + 3 * 3600, 900), labels={"try": "2"}),
                                  ticks=0, gpu_j=0.0)),
        # deleted
        ("j-010", lambda: delete_jobs(engine, ["j-010"])),
        # a part on another node: now a job on two nodes, read job by job
        ("j-030", lambda: run_job(engine, node("g5-9", "g5.xlarge"),
                                  job("j-030", "bert-g5", "inference", T0 + 30 * 3600, 900),
                                  ticks=1, gpu_j=5_000.0, units={"inference": 50})),
    )
    for job_id, change in changes:
        gone = day_of(job_id)
        assert gone in _summed(engine)
        change()
        assert gone not in _summed(engine), job_id
        assert_all_windows(engine, LATER)
        assert gone in _sum_every_day(engine, LATER + 600)
        assert_all_windows(engine, LATER)
    assert first_day in {day for _node, day in _summed(engine)}
    # A summed day holds the node's single-node jobs of that day and no more.
    with engine.connect() as connection:
        runs = connection.execute(select(func.sum(JOB_POOL_SUMS.c.runs))
                                  .where(JOB_POOL_SUMS.c.unit == "")).scalar_one()
    assert runs == RUNS - 2  # j-010 deleted, j-030 on two nodes


def _unsummed(engine: Engine, since_s: float | None, until_s: float | None
              ) -> tuple[set[str], set[str]]:
    """The jobs whose part lies on no summed day of the window (exact), and those whose
    end alone may lie on none (``maybe_unsummed``, what the comparison looks at first)."""
    p = JOB_NODES.c
    with engine.connect() as connection:
        exact = set(connection.execute(select(p.job_id).where(
            ~summed_day_in(p.node, p.ended_s, since_s, until_s))).scalars())
        maybe = set(connection.execute(select(p.job_id).where(
            maybe_unsummed(p.ended_s, since_s, until_s))).scalars())
    return exact, maybe


def test_the_parts_on_no_summed_day_are_found_by_their_end(store: Store) -> None:
    engine = runs_store(store.url, RUNS)
    _sum_every_day(engine)
    day = T0 // DAY_S * DAY_S
    windows = ((None, None), (day - 1, None), (day, None), (T0 + 4_000, None),
               (day + DAY_S - 1, LATER), (None, day + 2 * DAY_S), (day - DAY_S, day + DAY_S + 1))

    def assert_found(fewer: bool) -> None:
        for since_s, until_s in windows:
            exact, maybe = _unsummed(engine, since_s, until_s)
            # Every part on no summed day that may overlap the window is looked at...
            ended = {f"j-{i:03d}" for i in range(RUNS) if since_s is None
                     or T0 + i * 3600 + 900 > since_s}
            assert exact & ended <= maybe, (since_s, until_s)
        # ...and over all time, with the days summed in a row, no summed one.
        exact, maybe = _unsummed(engine, None, None)
        assert (maybe == exact) if fewer else (exact <= maybe)

    assert _unsummed(engine, None, None) == (set(), set())  # every run ended and summed
    assert_found(fewer=True)
    # A day taken out between two summed ones, then a node's first day: their parts.
    days = sorted({d for _n, d in _summed(engine)})
    with engine.begin() as connection:
        connection.execute(delete(JOB_POOL_DAYS).where(JOB_POOL_DAYS.c.node == "g5-1",
                                                       JOB_POOL_DAYS.c.day_s == days[1]))
    exact, maybe = _unsummed(engine, None, None)
    first_day = {f"j-{i:03d}" for i in range(RUNS) if T0 + i * 3600 + 900 < days[1]}
    assert exact and not maybe & first_day  # the stretch before the gap is not looked at
    assert_found(fewer=False)
    with engine.begin() as connection:
        connection.execute(delete(JOB_POOL_DAYS).where(JOB_POOL_DAYS.c.node == "g5-0",
                                                       JOB_POOL_DAYS.c.day_s == days[0]))
    assert_found(fewer=False)
    # A node with an ended part and no summed day at all, and a running part.
    run_job(engine, node("g5-9", "g5.xlarge"), job("j-new", "bert-g5", "inference", T0, 900),
            ticks=1, gpu_j=5_000.0)
    run_job(engine, node("g5-0", "g5.xlarge"),
            replace(job("j-run", "bert-g5", "inference", LATER, 900), ended_s=None),
            ticks=1, gpu_j=5_000.0)
    exact, maybe = _unsummed(engine, None, None)
    assert {"j-new", "j-run"} <= exact
    assert_found(fewer=False)
    assert_all_windows(engine, LATER)


def _days(engine: Engine) -> dict[tuple[str, int], tuple[int, float | None]]:
    """(node, day) -> (parts summed, summed until: None for the whole day)."""
    days = JOB_POOL_DAYS.c
    with engine.connect() as connection:
        return {(n, int(d)): (int(p), u) for n, d, p, u in connection.execute(
            select(days.node, days.day_s, days.parts, days.summed_until_s))}


def test_the_day_not_over_is_summed_up_to_its_settle_line(store: Store) -> None:
    runs = 24  # j-000... an hour apart from T0 (22:14 UTC), on g5-0 and g5-1 in turn
    engine = runs_store(store.url, runs)
    ends = {f"j-{i:03d}": (f"g5-{i % 2}", T0 + i * 3600 + 900) for i in range(runs)}
    day = int((T0 + DAY_S) // DAY_S * DAY_S)  # the day after T0's
    now_s = day + 6 * 3600 + 30
    # The pass moves the totals boundary to the last whole minute less 2 minutes; the day
    # is summed up to 5 minutes before that.
    line_s = (now_s // 60 * 60 - 120) - 300
    maintain_every_node(engine, now_s)

    def members(name: str) -> int:
        """The single-node jobs of ``name`` that ended in the day up to the line."""
        return sum(1 for where, end in ends.values() if where == name and day <= end <= line_s)

    found = _days(engine)
    assert {key for key in found if key[1] == day} == {("g5-0", day), ("g5-1", day)}
    for name in ("g5-0", "g5-1"):
        assert found[(name, day)] == (members(name), line_s)
        assert found[(name, day - DAY_S)][1] is None  # T0's day: over and settled, whole
    assert 0 < members("g5-0") + members("g5-1") < sum(
        1 for _where, end in ends.values() if end >= day)  # later jobs read one by one
    assert_all_windows(engine, now_s)
    assert_pooled_is_per_job(engine, "inference", unit="inference", now_s=now_s,
                             with_ids=False)

    # The comparison reads the day so far from its sums: doubled, they add its members'
    # energy once more.
    def energy_j() -> float:
        found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), now_s,
                               with_ids=False)
        assert found is not None
        return found.table.rows[0].energy_j

    member_ids = [job_id for job_id, (_n, end) in ends.items() if day <= end <= line_s]
    member_j = sum(j.total_j for j in job_totals(engine, JobFilter(job_ids=member_ids)))
    before_j = energy_j()
    sums = JOB_POOL_SUMS.c
    with engine.begin() as connection:
        connection.execute(update(JOB_POOL_SUMS).where(sums.day_s == day)
                           .values(energy_j=sums.energy_j * 2))
    assert energy_j() == pytest.approx(before_j + member_j, rel=1e-12)
    with engine.begin() as connection:
        connection.execute(update(JOB_POOL_SUMS).where(sums.day_s == day)
                           .values(energy_j=sums.energy_j / 2))

    # A job that ends after the line is not one of the day's: its end, units and totals
    # leave the day summed. A pass 12 minutes on moves the totals boundary past its end,
    # its line not (and no other job ended in between, so the day is not summed again).
    late = job("j-late", "bert-g5", "inference", line_s + 60, 900)
    run_job(engine, node("g5-0", "g5.xlarge"), late, ticks=1, gpu_j=9_000.0,
            units={"inference": 100})
    ends["j-late"] = ("g5-0", line_s + 960)
    assert _days(engine)[("g5-0", day)] == (members("g5-0"), line_s)
    maintain_every_node(engine, now_s + 720)
    with engine.connect() as connection:
        boundary_ms = connection.execute(select(NODES.c.totals_until_ms)
                                         .where(NODES.c.node == "g5-0")).scalar_one()
    assert boundary_ms / 1000 >= line_s + 960 > boundary_ms / 1000 - 300
    assert _days(engine)[("g5-0", day)] == (members("g5-0"), line_s)
    assert_pooled_is_per_job(engine, "inference", unit="inference", now_s=now_s + 720,
                             with_ids=False)

    # A job written late that ended before the line, and a member deleted, take their
    # node's day out of use at once.
    early = job("j-early", "bert-g5", "inference", line_s - 1_000, 500)
    run_job(engine, node("g5-1", "g5.xlarge"), early, ticks=0, gpu_j=0.0)
    ends["j-early"] = ("g5-1", line_s - 500)
    assert ("g5-1", day) not in _days(engine) and ("g5-0", day) in _days(engine)
    deleted = next(job_id for job_id in member_ids if ends[job_id][0] == "g5-0")
    delete_jobs(engine, [deleted])
    del ends[deleted]
    assert ("g5-0", day) not in _days(engine)
    assert_pooled_is_per_job(engine, "inference", unit="inference", now_s=now_s + 720,
                             with_ids=False)

    # The next pass sums them again, to its own line (past j-late's end now).
    maintain_every_node(engine, now_s + 1_020)
    line_s += 1_020
    found = _days(engine)
    assert found[("g5-0", day)] == (members("g5-0"), line_s)
    assert found[("g5-1", day)] == (members("g5-1"), line_s)
    assert_all_windows(engine, now_s + 1_020)

    # Once the day is over and settled, it is summed whole.
    later_s = day + DAY_S + 900
    _sum_every_day(engine, later_s)
    found = _days(engine)
    assert found[("g5-0", day)][1] is None and found[("g5-1", day)][1] is None
    assert_all_windows(engine, later_s)
    assert_pooled_is_per_job(engine, "inference", unit="inference", now_s=later_s,
                             with_ids=False)


def test_revision_0004_down_drops_the_days_summed_so_far_and_up_again_sums_them(
        store: Store) -> None:
    engine = runs_store(store.url, 24)
    day = int((T0 + DAY_S) // DAY_S * DAY_S)
    now_s = day + 6 * 3600 + 30
    maintain_every_node(engine, now_s)
    whole = {key for key, (_parts, until) in _days(engine).items() if until is None}
    assert whole and set(_days(engine)) - whole  # both kinds of day

    downgrade(engine, "0003")  # what joulestat before 0004 reads: whole days only
    with engine.connect() as connection:
        days = {(n, int(d)) for n, d in connection.execute(
            text("SELECT node, day_s FROM job_pool_days"))}
        sums = {int(d) for d in connection.execute(
            text("SELECT DISTINCT day_s FROM job_pool_sums")).scalars()}
    assert days == whole and day not in sums
    # Its triggers take a whole day out of use for any change to a job ending in it.
    delete_jobs(engine, ["j-000"])
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM job_pool_days")
                                  ).scalar_one() == len(whole) - 1

    assert migrate.upgrade(engine) == migrate.HEAD_REVISION
    maintain_every_node(engine, now_s)
    assert {key for key, (_p, until) in _days(engine).items() if until is not None} == {
        ("g5-0", day), ("g5-1", day)}
    assert_all_windows(engine, now_s)
