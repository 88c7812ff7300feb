"""Deleting jobs (:mod:`joulestat.store.job_delete`), on SQLite and on PostgreSQL: the
node keeps its energy (the job's moves to the unattributed remainder) and every other
total stays."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.store.import_writer import write_imported_jobs
from joulestat.store.job_delete import JobsNotDeleted, delete_jobs
from joulestat.store.jobs import list_jobs
from joulestat.store.nodes import node_energy_j
from tests.helpers.job_delete_store import (
    TICKS,
    WINDOW,
    counts,
    imported,
    remainder_rows_sum,
    remainder_totals,
    rows_of,
    settled_totals,
    tables_with_job_rows,
)
from tests.helpers.store_jobs import (
    RETENTION_S,
    T0,
    TRAINER,
    assert_conserved,
    feed,
    job_total,
    make_job,
    writer_for,
)


def test_delete_keeps_node_energy_and_every_total(engine: Engine) -> None:
    node = TRAINER.node
    writer = writer_for(engine)
    writer.save_job(make_job("a", T0, ended_s=T0 + TICKS))
    writer.save_job(make_job("b", T0, ended_s=T0 + TICKS))
    writer.save_job(make_job("live", T0))
    totals = feed(writer, T0, TICKS, ("a", "b", "live"), units={"tokens": 3.0})
    assert writer.flush()
    # Prunes minutes 0..4 (rollups only), keeps 5..9 raw; settles totals up to minute 8.
    result = writer.maintain(T0 + TICKS + RETENTION_S - 270)
    assert result is not None and result.raw_pruned_until_ms == round((T0 + 300) * 1000)
    totals_until = result.totals_until_ms
    assert totals_until is not None and totals_until > result.raw_pruned_until_ms
    # An import elsewhere (its own node) and one onto this node, which keeps its data.
    write_imported_jobs(engine, [imported("cc-1", "codecarbon:1", T0),
                                 imported("cc-2", node, T0 - 1800.0)])

    node_before = node_energy_j(engine, node, *WINDOW)
    b_before = {s.id: s for s in list_jobs(engine)}["b"]
    remainder_before = remainder_totals(engine, node)
    a_settled = settled_totals(engine, "a", node)
    assert a_settled and rows_of(engine, "a")["job_minute_energy"] > 0
    # Its raw windows went with the totals, rolled into minutes (migration 0009).
    # Its unit rows too, merged a row a minute (migration 0014).
    assert all(rows_of(engine, "a")[t] > 0 for t in ("job_energy_totals",
                                                     "job_minute_units", "job_unit_totals"))
    assert rows_of(engine, "a")["job_units"] == 0
    before = counts(engine)

    # A missing id, or a running job without force: nothing is deleted.
    with pytest.raises(JobsNotDeleted) as missing:
        delete_jobs(engine, ["a", "nope"])
    assert missing.value.missing == ("nope",)
    with pytest.raises(JobsNotDeleted) as running:
        delete_jobs(engine, ["a", "live"])
    assert running.value.running == (("live", "name-live"),)
    assert counts(engine) == before

    [deleted] = delete_jobs(engine, ["a"])
    assert (deleted.id, deleted.name, deleted.status) == ("a", "name-a", "ended")
    assert deleted.unattributed_j == pytest.approx(job_total(totals, "a"), rel=1e-9)
    assert deleted.removed_j == 0
    assert rows_of(engine, "a") == dict.fromkeys(tables_with_job_rows(), 0)
    assert deleted.rows["jobs"] == 1 and deleted.rows["job_minute_energy"] > 0
    assert deleted.rows["job_minute_units"] == 10
    # The node's energy is what was measured; jobs + unattributed = node, per tick and
    # per minute; the other jobs keep theirs.
    assert node_energy_j(engine, node, *WINDOW) == node_before
    # Per minute (ten, both components: the job side is rolled up) + cc-2's one row.
    assert_conserved(engine, node, expected_rows=2 * 10 + 1)
    b_after = {s.id: s for s in list_jobs(engine)}["b"]
    assert (b_after.total_j, b_after.units) == (b_before.total_j, b_before.units)
    # The remainder's totals took the job's, and are its rows' sums still.
    after = remainder_totals(engine, node)
    for component, joules in a_settled.items():
        assert after[component] == pytest.approx(
            remainder_before.get(component, 0.0) + joules, rel=1e-12)
    expected = remainder_rows_sum(engine, node, totals_until)
    assert after == pytest.approx(expected, rel=1e-9)

    # Later maintain passes roll up and settle the moved rows like any others.
    feed(writer, T0 + TICKS, 180, ("b", "live"))
    assert writer.flush()
    result = writer.maintain(T0 + TICKS + 180 + RETENTION_S)
    assert result is not None and result.totals_until_ms > totals_until
    assert_conserved(engine, node)
    assert remainder_totals(engine, node) == pytest.approx(
        remainder_rows_sum(engine, node, result.totals_until_ms), rel=1e-9)

    # A running job goes with force; imported jobs take their own node rows.
    live_j = {s.id: s for s in list_jobs(engine)}["live"].total_j
    node_before = node_energy_j(engine, node, *WINDOW)
    done = delete_jobs(engine, ["live", "cc-1", "cc-2"], force=True)
    assert [job.id for job in done] == ["live", "cc-1", "cc-2"]
    assert done[0].unattributed_j == pytest.approx(live_j, rel=1e-9)
    assert (done[1].removed_j, done[2].removed_j) == (300.0, 300.0)
    assert done[1].rows["nodes"] == 1 and "nodes" not in done[2].rows
    for job_id in ("live", "cc-1", "cc-2"):
        assert rows_of(engine, job_id) == dict.fromkeys(tables_with_job_rows(), 0)
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT count(*) FROM tick_energy WHERE device LIKE 'import:%'")).scalar_one() == 0
        assert connection.execute(text(
            "SELECT count(*) FROM job_energy WHERE device LIKE 'import:%'")).scalar_one() == 0
        assert connection.execute(text(
            "SELECT node FROM nodes ORDER BY node")).scalars().all() == [node]
    # The measured energy stays; only the imported job's own node row went.
    assert node_before.pop(("cpu", "import:cc-2")) == 300.0
    assert node_energy_j(engine, node, *WINDOW) == node_before
    assert_conserved(engine, node)
    assert [s.id for s in list_jobs(engine)] == ["b"]
