"""Reports and imports on SQLite and on PostgreSQL: an export of a measured SQLite store
imports with the same figures (twice: idempotent), a bad file rolls back whole, a job
measured here is never imported twice, sources survive rolled-up minutes, and the reads of
imported and honest figures (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from joulestat.reports.importer import ImportFileError, import_file
from joulestat.reports.json_report import render_json_many
from joulestat.reports.model import build_report
from joulestat.store.jobs import job_detail, job_ids_active_since
from joulestat.store.provenance import job_sources
from joulestat.store.writer import StoreWriter
from tests.helpers.report_checks import assert_same_figures, dump
from tests.helpers.report_store import (
    LOADER,
    NOW,
    SECRET_LABELS,
    T0,
    fill_store,
    new_store,
    node_devices,
)

JOBS = ("dist-1", "solo", "secretive")


def test_a_sqlite_export_imports_with_the_same_figures(
        engine: Engine, tmp_path: Path) -> None:
    sqlite = new_store(tmp_path / "measured.db")
    fill_store(sqlite)
    exported = tmp_path / "all.json"
    exported.write_text(render_json_many([build_report(sqlite, j, now_s=NOW)
                                          for j in JOBS]))
    import_file(engine, exported)
    first = dump(engine)
    import_file(engine, exported)
    assert dump(engine) == first
    for job in JOBS:
        assert_same_figures(build_report(sqlite, job, now_s=NOW),
                            build_report(engine, job, now_s=NOW + 10))
    assert job_ids_active_since(engine, T0 + 110) == ["solo", "secretive"]


def test_a_store_reports_and_refuses_a_bad_file(engine: Engine, tmp_path: Path) -> None:
    fill_store(engine)
    report = build_report(engine, "dist-1", now_s=NOW)
    assert report["sources"]["cpu"] == ["model:tdp-curve", "rapl"]
    writer = StoreWriter(engine, LOADER, node_devices(LOADER), raw_retention_s=120)
    assert writer.maintain(T0 + 3600) is not None  # the loader's rows are minutes now
    assert job_sources(engine, "dist-1", "loader-1") == {"cpu": ["model:tdp-curve"],
                                                         "dram": ["rapl"]}
    assert build_report(engine, "dist-1", now_s=NOW)["energy_j"]["total"] == (
        pytest.approx(report["energy_j"]["total"], rel=1e-12))
    before = dump(engine)
    exported = tmp_path / "self.json"
    exported.write_text(render_json_many([report]))
    assert import_file(engine, exported).nodes == 0  # measured here: never counted twice
    assert dump(engine) == before
    secretive = build_report(engine, "secretive", now_s=NOW)
    broken = dict(secretive, job=dict(secretive["job"], id="dist-1"))  # clashes on kind
    exported.write_text(render_json_many([secretive, broken]))
    with pytest.raises(ImportFileError, match="already in the store"):
        import_file(engine, exported)
    assert dump(engine) == before
    assert job_detail(engine, "secretive").labels == SECRET_LABELS


def test_issue_11_reads(engine: Engine, tmp_path: Path) -> None:
    """The reads issue 11 added: imported nodes, profiles kept by import,
    a re-import found unchanged, CodeCarbon's own CO2e, the untracked CPU share and a
    flat series of a steady job."""
    from joulestat.store.provenance import imported_nodes
    from joulestat.store.series import job_power_series
    from tests.helpers.honest_store import STEADY_W, fill

    files = fill(engine, tmp_path)
    assert imported_nodes(engine) == {"vm-remote-1", "codecarbon:cc-run-1"}
    steady = build_report(engine, "steady")
    watts = [p["power_w"] for p in steady["power_series"]]
    assert watts == pytest.approx([STEADY_W] * len(watts), rel=1e-6)
    assert steady["nodes"][0]["untracked_cpu_share"] == pytest.approx(0.0, abs=1e-9)
    series = [p.power_w for p in job_power_series(engine, "steady", 1)]
    assert series == pytest.approx([STEADY_W] * len(series), rel=1e-6)
    ramp = build_report(engine, "vm-ramp")
    assert len(ramp["nodes"][0]["energy_series"]) > 20
    assert import_file(engine, files["report"]).unchanged == 1
    assert import_file(engine, files["codecarbon"]).unchanged == 1
    codecarbon = build_report(engine, "codecarbon:cc-run-1")
    assert codecarbon["external_co2e"][0]["co2e_g"] == pytest.approx(17.4e-3)
