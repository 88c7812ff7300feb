"""A comparison by setup from the store's pooled sums is the per-job comparison.

``compare_setups`` (agent/reports/compare/setups.py) adds up single-node jobs per
instance type in SQL and reads jobs on several nodes one by one; ``compare(figures,
by="instance_type")`` builds a record per job. Every row, figure and note must agree
(floats to 1e-9 of their size: only the order of additions differs), on stores that
hold what makes the pooled path differ if it is wrong: a job on two nodes of different
types and one on two nodes of one type (which joins the single-node jobs' pool), an
unpriced instance type (a note, an unknown cost), jobs that count nothing (per-run
rows), a running job, idle policies recorded or not, estimated and measured sources; on
SQLite and on PostgreSQL. Where the pooled sums cannot give the table (served latency,
live intensity), ``compare_setups`` answers None.

A running job is counted as its own page counts it, to its last flush, whatever its
node's totals boundary: the per-job path's figures are taken at the same ``now_s``.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from joulestat.carbon.footprint import CarbonSettings
from joulestat.carbon.pricing import Pricer
from joulestat.core.records import JobRecord
from joulestat.demo import sample_store as sample
from joulestat.reports.compare.figures import figures_for
from joulestat.reports.compare.groups import CompareError
from joulestat.reports.compare.setups import compare_setups
from joulestat.store.engine import dialect_insert
from joulestat.store.fleet_halves import NodeRange, read_by_node
from joulestat.store.job_delete import delete_jobs
from joulestat.store.jobs import JobFilter, JobRef
from joulestat.store.maintenance import maintain_node
from joulestat.store.schema import JOB_NODES, NODES
from tests.helpers.compare_store import (
    NOW,
    PINNED,
    SETTINGS,
    T0,
    assert_pooled_is_per_job,
    compare_invoke,
    fill_compare_store,
    job,
    maintain_every_node,
    node,
    run_job,
    settle,
)
from tests.helpers.stores import Store

LIVE = replace(job("j-g5-live", "bert-g5", "inference", T0 + 40_000, 0), ended_s=None,
               agent_labels={"idle_policy": "share"})


def _two_nodes(engine: Engine, pair: JobRecord, instance_type: str, gpu_j: float,
               units: dict[str, float]) -> None:
    """``pair`` on two new nodes of one ``instance_type``, two ticks on each: a job on
    several nodes whose setup is a single-node setup's."""
    for name in (f"{pair.id}-a", f"{pair.id}-b"):
        run_job(engine, node(name, instance_type), pair, ticks=2, gpu_j=gpu_j, units=units)


def mixed_store(store: Store) -> Engine:
    """The compare store, plus two g5 jobs on one node each and one on two g5 nodes (all
    one setup, g5.xlarge), and a g5 job still running, its node's totals up to NOW."""
    fill_compare_store(store.url)
    engine = store.engine
    run_job(engine, node("g5-2", "g5.xlarge"),
            job("j-g5-b", "bert-g5", "inference", T0 + 20_000, 1800), ticks=2,
            gpu_j=80_000.0, units={"inference": 2_000})
    _two_nodes(engine, job("j-g5-pair", "bert-g5-pair", "inference", T0 + 30_000, 1800),
               "g5.xlarge", 70_000.0, {"inference": 1_500})
    run_job(engine, node("g5-1", "g5.xlarge"), LIVE, ticks=3, gpu_j=60_000.0,
            units={"inference": 900})
    settle(engine, "g5-1", NOW)  # all its rows in its node's totals: counted to NOW
    return engine


def test_pooled_setups_are_the_per_job_comparison(store: Store) -> None:
    engine = mixed_store(store)
    for kind in ("inference", "training", None):
        assert_pooled_is_per_job(engine, kind)
    assert_pooled_is_per_job(engine, None, unit="inference", baseline="inf2.xlarge",
                             sla_units_per_hour=100_000)
    assert_pooled_is_per_job(engine, "training", unit="sample")
    with pytest.raises(CompareError) as error:
        compare_setups(engine, JobFilter(kind="training"), Pricer(SETTINGS), NOW,
                       unit="inference")
    assert error.value.argument == "unit"
    assert "sample" in str(error.value)
    found = compare_setups(engine, JobFilter(kind="inference"), Pricer(SETTINGS), NOW,
                           with_ids=False)
    assert found is not None and all(row.job_ids == () for row in found.table.rows)


def test_a_running_job_counts_to_its_last_flush_as_on_its_page(store: Store) -> None:
    """A running job's rows after its node's totals boundary count at once, in the
    pooled table as on its own page (figures_for); so does a job with nothing settled
    yet; the nodes' maintain passes, which move the boundary past them, change no
    figure; nor does the job's end."""
    engine = mixed_store(store)
    where, pricer = JobFilter(kind="inference"), Pricer(SETTINGS)
    later = NOW + 3_600

    def g5_energy_j(now_s: float) -> float:
        found = compare_setups(engine, where, pricer, now_s)
        assert found is not None
        [row] = [row for row in found.table.rows if row.group == "g5.xlarge"]
        return row.energy_j

    def live_energy_j(now_s: float) -> float:
        ref = JobRef(LIVE.id, "", "", "", 0.0, None)
        return figures_for(engine, [ref], SETTINGS, now_s=now_s)[0].energy_j

    before_j = g5_energy_j(NOW)
    # Two ticks more, after the boundary (NOW): the job's own figures and the row's grow
    # alike.
    energy_j = live_energy_j(NOW)
    run_job(engine, node("g5-1", "g5.xlarge"), LIVE, ticks=2, gpu_j=50_000.0,
            units={"inference": 700}, from_s=NOW)
    assert math.isclose(live_energy_j(later), energy_j + 100_000.0)
    assert math.isclose(g5_energy_j(later), before_j + 100_000.0)
    # A job started after its node's boundary: nothing settled, counted all the same.
    fresh = replace(job("j-g5-fresh", "bert-g5", "inference", NOW + 600, 0), ended_s=None)
    run_job(engine, node("g5-2", "g5.xlarge"), fresh, ticks=1, gpu_j=40_000.0,
            units={"inference": 500}, from_s=NOW + 600)
    assert compare_setups(engine, where, pricer, later).jobs == 7
    assert_pooled_is_per_job(engine, "inference", now_s=later)
    # The nodes' maintain passes move their boundaries past every row: the same figures.
    for name in ("g5-1", "g5-2"):
        with engine.begin() as connection:
            result = maintain_node(connection, dialect_insert(engine), name, later + 120,
                                   30 * 86_400)
        assert result.totals_until_ms == later * 1000
    assert math.isclose(g5_energy_j(later), before_j + 140_000.0)
    assert_all_windows(engine, later)
    # The live job ends: read to its last window, as before.
    run_job(engine, node("g5-1", "g5.xlarge"), replace(LIVE, ended_s=later - 600), ticks=0,
            gpu_j=0.0)
    assert_all_windows(engine, later)
    # The command prints no note about running jobs: there is nothing to excuse.
    listed = compare_invoke(store.url, "--by", "instance_type", "--kind", "inference",
                            "--json", *PINNED)
    assert listed.returncode == 0, listed.stderr
    assert not any("running" in note for note in json.loads(listed.stdout)["notes"])


def test_the_command_lists_a_pooled_rows_jobs_in_json(store: Store) -> None:
    """``joulestat compare --by instance_type --json`` (the pooled path) lists each row's
    jobs by start, a job on two nodes of one type among the single-node ones."""
    url = store.url
    fill_compare_store(url)
    engine = store.engine
    _two_nodes(engine, job("j-g5-pair", "bert-g5-pair", "inference", T0 + 1800, 1800),
               "g5.xlarge", 70_000.0, {"inference": 1_500})
    run_job(engine, node("g5-2", "g5.xlarge"),
            job("j-g5-b", "bert-g5", "inference", T0 + 20_000, 1800), ticks=2,
            gpu_j=80_000.0, units={"inference": 2_000})
    result = compare_invoke(url, "--by", "instance_type", "--kind", "inference", "--json",
                         *PINNED)
    assert result.returncode == 0, result.stderr
    rows = {row["group"]: row for row in json.loads(result.stdout)["rows"]}
    assert rows["g5.xlarge"]["job_ids"] == ["j-g5", "j-g5-pair", "j-g5-b"]
    assert rows["g5.xlarge"]["runs"] == 3
    assert rows["inf2.xlarge"]["job_ids"] == ["j-inf2"]
    text = compare_invoke(url, "--by", "instance_type", "--kind", "inference", *PINNED)
    assert text.returncode == 0, text.stderr
    assert "g5.xlarge" in text.stdout and "inf2.xlarge" in text.stdout


def test_pooled_setups_over_the_sample_store(engine: Engine) -> None:
    """The dashboard's sample data: several setups, estimated and measured sources, a
    loader-fed trainer on two types; its serving jobs carry no latency histograms."""
    end_s = T0 + 30 * 86_400
    sample.fill(engine, end_s=end_s)
    with engine.connect() as connection:
        names = list(connection.execute(select(NODES.c.node)).scalars())
    for name in names:  # its running jobs counted to the end, all their rows settled
        settle(engine, name, end_s + 60)
    for kind in ("inference", "training", None):
        assert_pooled_is_per_job(engine, kind, now_s=end_s + 60)


def test_what_pooled_sums_cannot_give_is_left_to_the_per_job_path(store: Store) -> None:
    fill_compare_store(store.url)
    live = CarbonSettings(electricity_maps_token="token")  # CO2e depends on when it ran
    assert compare_setups(store.engine, JobFilter(), Pricer(live), NOW) is None


def test_a_pair_on_one_type_pools_and_maintain_passes_change_nothing(store: Store) -> None:
    fill_compare_store(store.url)
    engine = store.engine
    _two_nodes(engine, job("j-p4d-pair", "resnet-pair", "training", T0 + 30_000, 1800),
               "p4d.24xlarge", 2_000_000.0, {"sample": 90_000})
    for kind in ("inference", "training", None):
        assert_pooled_is_per_job(engine, kind)
    # The nodes' maintain passes roll every job up into minutes and totals: the same
    # tables.
    maintain_every_node(engine, NOW + 2 * 86_400)
    assert_all_windows(engine, NOW + 2 * 86_400)


def assert_all_windows(engine: Engine, now_s: float) -> None:
    """Pooled is per-job for each kind and unit, over all time and over windows that
    cut the first day or end before the last start."""
    for kind in ("inference", "training", None):
        assert_pooled_is_per_job(engine, kind, now_s=now_s, with_ids=False)
    assert_pooled_is_per_job(engine, None, unit="inference", now_s=now_s, with_ids=False,
                             baseline="g5.xlarge", sla_units_per_hour=100_000)
    assert_pooled_is_per_job(engine, "training", unit="sample", now_s=now_s, with_ids=False)
    for since_s, until_s in ((T0, None), (T0 + 4_000, None), (T0 + 7_000, None),
                             (None, T0 + 25_000),
                             (T0 - 86_400, now_s)):
        assert_pooled_is_per_job(engine, None, unit="inference", now_s=now_s,
                                 since_s=since_s, until_s=until_s, with_ids=False)
        assert_pooled_is_per_job(engine, "training", now_s=now_s, since_s=since_s,
                                 until_s=until_s, with_ids=False)


def test_written_again_and_deleted_jobs_compare_as_per_job(store: Store) -> None:
    """After maintain passes, a job written again (new labels) and a job deleted: the
    pooled table is still the per-job one, in every window."""
    engine = mixed_store(store)
    run_job(engine, node("g5-2", "g5.xlarge"),
            job("j-g5-c", "bert-g5", "inference", T0 + 90_000, 1800), ticks=2,
            gpu_j=85_000.0, units={"inference": 2_100})
    now_s = T0 + 3 * 86_400
    maintain_every_node(engine, now_s)
    assert_all_windows(engine, now_s)
    writer_job = job("j-g5-b", "bert-g5", "inference", T0 + 20_000, 1800)
    run_job(engine, node("g5-2", "g5.xlarge"), replace(writer_job, labels={"try": "2"}),
            ticks=0, gpu_j=0.0)
    run_job(engine, node("g5-3", "g5.xlarge"),
            job("j-g5-c", "bert-g5", "inference", T0 + 90_000, 1800), ticks=1,
            gpu_j=10_000.0, units={"inference": 100})  # now on two nodes: per job
    assert_all_windows(engine, now_s)
    delete_jobs(engine, ["j-inf2"])
    assert_all_windows(engine, now_s)
    maintain_every_node(engine, now_s + 1200)
    assert_all_windows(engine, now_s)


def test_a_pool_on_nodes_either_side_of_the_middle_one_adds_up(store: Store) -> None:
    """On PostgreSQL a fleet's read (the day sums stand in) is two statements, over the
    nodes named below the middle one and from it (``read_by_node``): a pool whose nodes
    are on both sides (every g5 here, however the nodes split) adds its sums, regions
    and spread of both, in every window, before and after the maintain passes."""
    fill_compare_store(store.url)
    engine = store.engine
    for index, name in enumerate(("g5-a", "g5-m", "g5-x", "g5-z")):
        run_job(engine, node(name, "g5.xlarge"),
                job(f"j-{name}", "bert-g5", "inference", T0 + 1_000 * index, 1800), ticks=2,
                gpu_j=60_000.0 + 7_000.0 * index, units={"inference": 1_000 + 300 * index})
        running = replace(job(f"j-{name}-live", "bert-g5", "inference",
                              T0 + 40_000 + index, 0), ended_s=None)
        run_job(engine, node(name, "g5.xlarge"), running, ticks=1,
                gpu_j=30_000.0 + 1_000.0 * index, units={"inference": 500 + index})
    now_s = T0 + 2 * 86_400
    assert_all_windows(engine, now_s)
    maintain_every_node(engine, now_s)
    assert_all_windows(engine, now_s)


def test_the_halves_of_a_fleet_read_see_one_moment_on_postgresql(pg_store: Store) -> None:
    """The two statements of a fleet's read share one snapshot: a part written after the
    read began is in neither half, though the second half's statement starts after it
    was committed."""
    engine = pg_store.engine
    for name in ("n-a", "n-b", "n-c", "n-d"):
        run_job(engine, node(name, "g5.xlarge"), job(f"j-{name}", "bert", "inference", T0,
                                                     600), ticks=1, gpu_j=1_000.0)
    parts = JOB_NODES.c

    def count_parts(nodes: NodeRange) -> Any:
        if nodes.first is not None:  # the second half: a part on its nodes, committed now
            run_job(engine, node("n-z", "g5.xlarge"), job("j-late", "bert", "inference",
                                                          T0, 600), ticks=1, gpu_j=1_000.0)
        return select(func.count()).select_from(JOB_NODES).where(nodes.holds(parts.node))

    halves = [int(count) for (count,) in read_by_node(engine, True, count_parts)]
    assert len(halves) == 2 and sum(halves) == 4
    with engine.connect() as connection:  # it was committed, and a new read sees it
        assert connection.execute(select(func.count()).select_from(JOB_NODES)).scalar() == 5
