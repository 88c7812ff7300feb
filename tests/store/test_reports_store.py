"""The report reads (:mod:`joulestat.store.series`, :mod:`~joulestat.store.provenance`,
:mod:`~joulestat.store.jobs`) on the stores of :mod:`tests.helpers.report_store`, on
SQLite and on PostgreSQL: sources per component and node, energy rows, jobs active since a
time."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from joulestat.store.jobs import job_ids_active_since
from joulestat.store.provenance import job_sources
from joulestat.store.series import job_energy_rows
from joulestat.store.writer import StoreWriter
from tests.helpers.report_store import (
    LOADER,
    T0,
    Totals,
    fill_store,
    job_energy,
    node_devices,
)


def test_sources_are_per_component_and_node(filled: tuple[Engine, Totals]) -> None:
    engine, _totals = filled
    assert job_sources(engine, "dist-1") == {
        "cpu": ["model:tdp-curve", "rapl"], "dram": ["rapl"], "accelerator": ["nvml_energy"]}
    assert job_sources(engine, "dist-1", "loader-1") == {
        "cpu": ["model:tdp-curve"], "dram": ["rapl"]}
    assert job_sources(engine, "nope") == {}


def test_sources_survive_the_minute_rollup(engine: Engine) -> None:
    totals = fill_store(engine)
    writer = StoreWriter(engine, LOADER, node_devices(LOADER), raw_retention_s=120)
    result = writer.maintain(T0 + 3600)  # everything is older than the retention now
    assert result is not None and result.raw_pruned_until_ms is not None
    assert job_sources(engine, "dist-1", "loader-1") == {
        "cpu": ["model:tdp-curve"], "dram": ["rapl"]}
    rows = job_energy_rows(engine, "dist-1")
    loader_rows = [r for r in rows if r[0] == "loader-1"]
    # Whole minutes now, the last one clipped to the part's end at T0 + 90.
    assert {r[2] - r[1] for r in loader_rows} == {60.0, 30.0}
    assert sum(r[4] for r in loader_rows) == pytest.approx(
        job_energy(totals, "dist-1", "loader-1"), rel=1e-12)


def test_energy_rows_keep_each_rows_span(filled: tuple[Engine, Totals]) -> None:
    engine, totals = filled
    rows = job_energy_rows(engine, "dist-1")
    # One flush of each node: a window a minute (migration 0009), each kept to the time
    # the job ran there (loader-1 to T0 + 90, trainer-1 to T0 + 100).
    assert {r[2] - r[1] for r in rows} == {60.0, 30.0, 40.0}
    assert min(r[1] for r in rows) == T0 and max(r[2] for r in rows) == T0 + 100
    assert sum(r[4] for r in rows) == pytest.approx(job_energy(totals, "dist-1"), rel=1e-12)
    assert {r[3] for r in rows if r[0] == "loader-1"} == {"cpu", "dram"}


def test_jobs_active_since(filled: tuple[Engine, Totals]) -> None:
    engine, _totals = filled
    assert job_ids_active_since(engine) == ["dist-1", "solo", "secretive"]
    # dist-1 ended at T0 + 100, secretive at T0 + 120; solo still runs
    assert job_ids_active_since(engine, T0 + 100) == ["dist-1", "solo", "secretive"]
    assert job_ids_active_since(engine, T0 + 110) == ["solo", "secretive"]
    assert job_ids_active_since(engine, T0 + 1e6) == ["solo"]


@pytest.fixture
def filled(engine: Engine) -> tuple[Engine, Totals]:
    """A store with :func:`tests.helpers.report_store.fill_store`'s jobs."""
    return engine, fill_store(engine)

