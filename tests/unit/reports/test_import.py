"""Import: export on one store, import into another, report again; merging, idempotence,
bad files, CodeCarbon rows, and imports next to live, pruned nodes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from joulestat.reports.importer import ImportFileError, import_file, parse_file
from joulestat.reports.json_report import render_json, render_json_many
from joulestat.reports.model import build_report
from joulestat.store.jobs import job_detail, list_jobs
from joulestat.store.nodes import unattributed_check
from joulestat.store.writer import StoreWriter
from tests.helpers.report_checks import assert_same, assert_same_figures, dump
from tests.helpers.report_store import (
    LOADER,
    NOW,
    SECRET_LABELS,
    T0,
    Totals,
    filled_store,
    new_store,
    node_devices,
)

JOBS = ("dist-1", "solo", "secretive")
CODECARBON_HEADER = ("timestamp,project_name,run_id,experiment_id,duration,emissions,"
                     "cpu_power,gpu_power,ram_power,cpu_energy,gpu_energy,ram_energy,"
                     "energy_consumed,country_name,country_iso_code,region,cloud_provider,"
                     "cloud_region,codecarbon_version,cpu_model,on_cloud,pue\n")


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Engine, Totals]:
    return filled_store(tmp_path)


def export(engine: Engine, path: Path, jobs: tuple[str, ...] = JOBS) -> Path:
    reports = [build_report(engine, job, now_s=NOW) for job in jobs]
    path.write_text(render_json_many(reports))
    return path


def test_export_import_report_again_gives_the_same_figures(
        filled: tuple[Engine, Totals], tmp_path: Path) -> None:
    source, _ = filled
    exported = export(source, tmp_path / "all.json")
    target = new_store(tmp_path / "target.db")
    result = import_file(target, exported)
    assert (result.kind, result.jobs, result.nodes) == ("joulestat", list(JOBS), 4)
    for job in JOBS:
        original = build_report(source, job, now_s=NOW)
        again = build_report(target, job, now_s=NOW + 5000)
        assert_same_figures(original, again)
        originals = {n["node"]: n["sources"] for n in original["nodes"]}
        for node in again["nodes"]:
            for component, sources in node["sources"].items():
                kept = ",".join(originals[node["node"]][component])
                assert sources == [f"import:joulestat/{kept}"]
    assert job_detail(target, "dist-1").status == "ended"
    # the running job was imported as held until its report was made
    assert job_detail(target, "solo").per_node[0].ended_s == NOW
    # imported rows keep the conservation identity: node rows = job rows
    for node in ("loader-1", "trainer-1", "odd-1"):
        for *_key, node_j, sum_j in unattributed_check(target, node):
            assert sum_j == pytest.approx(node_j)


def test_importing_twice_changes_nothing(filled: tuple[Engine, Totals],
                                         tmp_path: Path) -> None:
    source, _ = filled
    exported = export(source, tmp_path / "all.json")
    target = new_store(tmp_path / "target.db")
    import_file(target, exported)
    first = dump(target)
    import_file(target, exported)
    assert dump(target) == first
    # and exporting the imported jobs and importing that again is stable too
    again = export(target, tmp_path / "again.json")
    import_file(target, again)
    assert dump(target) == first


def test_entries_of_one_job_merge_into_one_multi_node_job(
        filled: tuple[Engine, Totals], tmp_path: Path) -> None:
    source, _ = filled
    report = build_report(source, "dist-1", now_s=NOW)
    loader_only = {**report, "nodes": [report["nodes"][0]],
                   "job": {**report["job"], "labels": {"team": "nlp"}}}
    trainer_only = {**report, "nodes": [report["nodes"][1]],
                    "job": {**report["job"], "labels": {"run": "42"}}}
    (tmp_path / "a.json").write_text(render_json(loader_only))
    (tmp_path / "b.json").write_text(render_json(trainer_only))
    target = new_store(tmp_path / "target.db")
    import_file(target, tmp_path / "a.json")
    [only] = list_jobs(target)
    assert only.nodes == (("loader-1", "c5.4xlarge"),)
    import_file(target, tmp_path / "b.json")
    assert_same_figures(report, build_report(target, "dist-1", now_s=NOW))
    # both halves in one file merge the same way
    (tmp_path / "both.json").write_text(render_json_many([loader_only, trainer_only]))
    other = new_store(tmp_path / "other.db")
    import_file(other, tmp_path / "both.json")
    assert_same_figures(report, build_report(other, "dist-1", now_s=NOW))


def test_agent_labels_import_apart_from_the_labels(
        filled: tuple[Engine, Totals], tmp_path: Path) -> None:
    """A report carries what joulestat recorded (``job.agent_labels``) apart from the
    labels, and they import apart. Entries of one job attributed under two idle
    policies import as ``mixed``."""
    source, _ = filled
    report = build_report(source, "dist-1", now_s=NOW)
    assert report["job"]["labels"] == {"run": "42", "team": "nlp"}
    assert report["job"]["agent_labels"] == {"cpu_source": "process tree",
                                             "idle_policy": "share"}
    (tmp_path / "dist.json").write_text(render_json(report))
    target = new_store(tmp_path / "target.db")
    import_file(target, tmp_path / "dist.json")
    imported = job_detail(target, "dist-1")
    assert imported.labels == report["job"]["labels"]
    assert imported.agent_labels == report["job"]["agent_labels"]

    # the same job's nodes, each attributed under another policy
    halves = [{**report, "nodes": [node], "job": {**report["job"], "agent_labels": {
        "idle_policy": policy}}} for node, policy in zip(report["nodes"], ("share", "exclude"),
                                                        strict=True)]
    (tmp_path / "halves.json").write_text(render_json_many(halves))
    other = new_store(tmp_path / "other.db")
    import_file(other, tmp_path / "halves.json")
    assert job_detail(other, "dist-1").agent_labels == {"idle_policy": "mixed"}
    (tmp_path / "first.json").write_text(render_json(halves[0]))
    (tmp_path / "second.json").write_text(render_json(halves[1]))
    third = new_store(tmp_path / "third.db")
    import_file(third, tmp_path / "first.json")
    assert job_detail(third, "dist-1").agent_labels == {"idle_policy": "share"}
    import_file(third, tmp_path / "second.json")
    assert job_detail(third, "dist-1").agent_labels == {"idle_policy": "mixed"}

    bad = {**report, "job": {**report["job"], "agent_labels": {"idle_policy": "most"}}}
    (tmp_path / "bad.json").write_text(render_json(bad))
    with pytest.raises(ImportFileError, match="agent_labels.idle_policy: expected one of"):
        import_file(new_store(tmp_path / "bad.db"), tmp_path / "bad.json")


def test_importing_into_the_measuring_store_never_counts_twice(
        filled: tuple[Engine, Totals], tmp_path: Path) -> None:
    source, _ = filled
    before = dump(source)
    result = import_file(source, export(source, tmp_path / "all.json"))
    assert result.nodes == 0 and len(result.skipped) == 4
    assert "measured" in result.skipped[0]
    assert dump(source) == before
    # the report's "[redacted]" placeholders did not overwrite the stored secrets
    assert job_detail(source, "secretive").labels == SECRET_LABELS


def test_an_import_older_than_a_live_nodes_prune_boundary_still_counts(
        filled: tuple[Engine, Totals], tmp_path: Path) -> None:
    """A node name that is live (and pruned) in the target store: the aggregate goes to
    the minute tables, where queries look for rows that old."""
    source, _ = filled
    report = build_report(source, "dist-1", now_s=NOW)
    report = {**report, "job": {**report["job"], "id": "dist-copy"}}
    (tmp_path / "copy.json").write_text(render_json(report))
    target = new_store(tmp_path / "target.db")
    writer = StoreWriter(target, LOADER, node_devices(LOADER), raw_retention_s=120)
    from tests.helpers.report_store import write_ticks

    write_ticks(writer, LOADER, T0 - 600, 30, (), {})  # nothing attributed, just ticks
    assert writer.flush() and writer.maintain(T0 + 3600).raw_pruned_until_ms > T0 * 1000
    import_file(target, tmp_path / "copy.json")
    again = build_report(target, "dist-copy", now_s=NOW)
    for key in ("energy_j", "co2e_g", "cost_usd", "work_units"):
        assert_same(report[key], again[key], key)
    with target.connect() as connection:
        rolled = connection.execute(text(
            "SELECT count(*) FROM job_minute_energy WHERE job_id = 'dist-copy'")).scalar_one()
        settled = connection.execute(text(
            "SELECT count(*) FROM job_energy_totals WHERE job_id = 'dist-copy'")).scalar_one()
    assert rolled == 4  # cpu and dram of the loader's part, in each of its two minutes
    assert settled == 2  # and, older than the totals boundary, in the job totals too
    # Importing again replaces the part, and the agent's next pass does not re-add it.
    import_file(target, tmp_path / "copy.json")
    assert writer.maintain(T0 + 7200) is not None
    for key in ("energy_j", "co2e_g", "cost_usd", "work_units"):
        assert_same(report[key], build_report(target, "dist-copy", now_s=NOW)[key], key)


@pytest.mark.parametrize(("content", "expected"), [
    ('{"format": "joulestat-report",\n "job": {', r"line 2 column \d+: not valid JSON"),
    ('[{"format": "something-else"}]', r"entry 0: format: expected 'joulestat-report'"),
    ('{"format": "joulestat-report", "schema_version": 99}',
     r"schema_version: this joulestat reads versions 2 and 3, got 99"),
    ('{"format": "joulestat-report", "schema_version": true}',
     r"reads versions 2 and 3, got true"),
    ('{"format": "joulestat-report", "schema_version": "2"}',
     r"reads versions 2 and 3, got \"2\""),
])
def test_bad_json_files_are_named(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ImportFileError, match=f"^{path}: .*{expected}"):
        parse_file(path)


@pytest.mark.parametrize(("change", "expected"), [
    (lambda r: r["nodes"][1]["components"]["accelerator"].update(idle_j="lots"),
     r"entry 1: nodes\[1\]\.components\.accelerator\.idle_j: expected a number, got \"lots\""),
    (lambda r: r["nodes"][0]["components"]["cpu"].update(dynamic_j=-1.0),
     r"entry 1: nodes\[0\]\.components\.cpu\.dynamic_j: expected a finite number >= 0"),
    (lambda r: r["nodes"][0].pop("started_s"), r"entry 1: nodes\[0\]\.started_s: missing"),
    (lambda r: r["job"].update(kind="batch"), r"entry 1: job: kind: expected one of"),
    (lambda r: r["nodes"][0]["work_units"].update(Bad=1), r"entry 1: nodes\[0\]\.work_units"),
    (lambda r: r["nodes"][0].update(ended_s=r["nodes"][0]["started_s"] - 10),
     r"entry 1: nodes\[0\]\.ended_s: ends"),
    # Physical plausibility (joulestat.core.plausible): the field and the limit named.
    (lambda r: r["nodes"][0]["components"]["cpu"].update(idle_j=1e308),
     r"entry 1: nodes\[0\]\.components\.cpu\.idle_j: 1e\+308 J is over the limit of "
     r"1e\+12 J per node"),
    (lambda r: r["nodes"][0]["components"]["cpu"].update(dynamic_j=1e11),
     r"entry 1: nodes\[0\]\.components\.cpu\.dynamic_j: .* W, over the limit of "
     r"100000 W per node"),
    (lambda r: r["nodes"][0].update(started_s=1.0),
     r"entry 1: nodes\[0\]\.started_s: 1\.0 is before 2000-01-01"),
    (lambda r: r.update(generated_s=4e9), r"entry 1: generated_s: .* days ahead"),
    (lambda r: r["job"].update(name="evil\u202egpj.exe"),
     r"entry 1: job: name: .*bidirectional control character U\+202E"),
    # Formats of joulestat's development before its first release, refused by name: the
    # schema (the CLI's test imports a real one) and a job without its agent labels.
    (lambda r: r.update(schema_version=1), r"entry 1: schema_version: 1\b.*2 and 3"),
    (lambda r: r["job"].pop("agent_labels"), r"entry 1: job\.agent_labels: missing"),
])
def test_a_bad_entry_imports_nothing_of_its_file(
        filled: tuple[Engine, Totals], tmp_path: Path, change: Any, expected: str) -> None:
    source, _ = filled
    good = build_report(source, "solo", now_s=NOW)
    bad = build_report(source, "dist-1", now_s=NOW)
    change(bad)
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([good, bad]))
    target = new_store(tmp_path / "target.db")
    empty = dump(target)
    with pytest.raises(ImportFileError, match=f"^{path}: {expected}"):
        import_file(target, path)
    assert dump(target) == empty  # not even the good first entry


def test_a_conflicting_job_imports_nothing(filled: tuple[Engine, Totals],
                                           tmp_path: Path) -> None:
    source, _ = filled
    target = new_store(tmp_path / "target.db")
    import_file(target, export(source, tmp_path / "dist.json", ("dist-1",)))
    before = dump(target)
    report = build_report(source, "solo", now_s=NOW)
    renamed = {**report, "job": {**report["job"], "id": "dist-1"}}  # another job's id
    path = tmp_path / "clash.json"
    path.write_text(render_json_many([build_report(source, "secretive", now_s=NOW),
                                      renamed]))
    with pytest.raises(ImportFileError, match="already in the store as training job"):
        import_file(target, path)
    assert dump(target) == before  # secretive, valid on its own, was rolled back too


def codecarbon_row(run_id: str, cpu_kwh: str = "0.001", gpu_kwh: str = "0.002",
                   ram_kwh: str = "0.0005", pue: str = "1.0", country: str = "FRA",
                   region: str = "", cloud: str = "N", cloud_region: str = "") -> str:
    return (f"2024-05-01T12:00:00+00:00,proj/a,{run_id},exp-1,3600,0.1,10,20,5,{cpu_kwh},"
            f"{gpu_kwh},{ram_kwh},0.0035,France,{country},{region},,{cloud_region},3.3.2,"
            f"Xeon,{cloud},{pue}\n")


def test_codecarbon_rows_become_jobs(tmp_path: Path) -> None:
    path = tmp_path / "emissions.csv"
    path.write_text(CODECARBON_HEADER + codecarbon_row("r1", cpu_kwh="0.0001")
                    + codecarbon_row("r2", region="virginia", country="USA", pue="1.25")
                    + codecarbon_row("r1")  # a later snapshot of r1: it wins
                    + codecarbon_row("r3", cloud="Y", cloud_region="europe-west1"))
    target = new_store(tmp_path / "target.db")
    result = import_file(target, path)
    assert result.kind == "codecarbon" and sorted(result.jobs) == [
        "codecarbon:r1", "codecarbon:r2", "codecarbon:r3"]
    one = job_detail(target, "codecarbon:r1")
    assert (one.name, one.kind, one.status) == ("codecarbon:proj-a", "other", "ended")
    assert one.dynamic_j == pytest.approx({"cpu": 3600.0, "accelerator": 7200.0, "dram": 1800.0})
    assert set(one.idle_j.values()) == {0.0}
    assert one.labels["experiment_id"] == "exp-1"
    [part] = one.per_node
    assert (part.ended_s - part.started_s, part.region, part.instance_type) == (
        3600, "FRA", "local")
    assert math.isclose(part.ended_s, 1714564800.0)
    two = job_detail(target, "codecarbon:r2")
    assert two.per_node[0].region == "US-VA"  # the state's eGRID figure, not the country's
    assert two.total_j == pytest.approx(0.0035 * 3.6e6 / 1.25)  # CodeCarbon's PUE divided out
    three = build_report(target, "codecarbon:r3", now_s=NOW)
    assert three["provenance"][0]["intensity_level"] == "cloud region"
    assert three["cost_usd"] is None and three["sources"] == {
        "cpu": ["import:codecarbon"], "dram": ["import:codecarbon/model:codecarbon-ram"],
        "accelerator": ["import:codecarbon/nvml_energy"]}
    assert three["external_co2e"][0]["co2e_g"] == pytest.approx(100.0)  # emissions 0.1 kg
    before = dump(target)
    import_file(target, path)
    assert dump(target) == before


@pytest.mark.parametrize(("row", "expected"), [
    (codecarbon_row("r9", gpu_kwh="abc"), r"line 3: gpu_energy: expected a number, got 'abc'"),
    (codecarbon_row("r9", ram_kwh="-1"), r"line 3: ram_energy: expected a finite number"),
    (codecarbon_row("r9").replace("2024-05-01T12:00:00+00:00", "yesterday"),
     r"line 3: timestamp: expected an ISO 8601 time"),
    (codecarbon_row("r9").rstrip("\n") + ",extra\n", r"line 3: 23 fields, the header has 22"),
    # docs/reports.md's limits: 1e12 J and 100 kW per node, 2000-01-01 to a day ahead.
    (codecarbon_row("r9", gpu_kwh="1e300"), r"line 3: gpu_energy: .* over the limit of 1e\+12 J"),
    (codecarbon_row("r9", gpu_kwh="300"), r"line 3: gpu_energy: .* 300000 W, over the limit of "
                                          r"100000 W"),
    (codecarbon_row("r9").replace("2024-05-01T12:00:00+00:00", "1990-01-01T00:00:00+00:00"),
     r"line 3: timestamp: .* before 2000-01-01"),
    (codecarbon_row("r9").replace("2024-05-01T12:00:00+00:00", "2999-01-01T00:00:00+00:00"),
     r"line 3: timestamp: .* days ahead of this machine's clock"),
])
def test_a_bad_codecarbon_row_imports_nothing(tmp_path: Path, row: str, expected: str) -> None:
    path = tmp_path / "emissions.csv"
    path.write_text(CODECARBON_HEADER + codecarbon_row("r1") + row)
    target = new_store(tmp_path / "target.db")
    with pytest.raises(ImportFileError, match=f"^{path}: {expected}"):
        import_file(target, path)
    assert list_jobs(target) == []


def test_neither_format(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello,world\n1,2\n")
    with pytest.raises(ImportFileError, match=f"^{path}: line 1: neither"):
        parse_file(path)
