"""``joulestat import`` as a user runs it: a store's ``report --all`` export imported into
another store reports the same figures (and importing it again changes nothing, and says
so); a report of schema 2 (tests/fixtures/) comes back with today's figures, one of
schema 1 (joulestat's development before its first release) is refused; a bad file
exits 2 naming the file, line and field and imports nothing of itself; ``--name``,
``--kind`` and ``--label`` set what they say. The real commands run in this process
(tests/helpers/cli.py) on stores filled through the store API
(:mod:`tests.helpers.report_store`). A CodeCarbon file made by CodeCarbon itself is
imported in tests/system/test_report_cli.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joulestat.core import units
from tests.helpers.cli import cli_env, invoke
from tests.helpers.report_checks import (
    SCHEMA_1,
    SCHEMA_2,
    assert_same_figures,
    report_ok,
    validate,
)
from tests.helpers.report_store import Totals

ENDED = ("dist-1", "secretive")
Env = tuple[dict[str, str], Totals]


def target_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a second store, ``target.db``, made by ``joulestat db upgrade``.

    An import into a store that does not exist yet creates its schema in a child
    process (agent/store/engine.py ``check_writer_store``), which this tier may not
    start: tests/system/test_report_cli.py imports into a new store."""
    env = cli_env(JOULESTAT_DB=f"sqlite:///{tmp_path / 'target.db'}")
    made = invoke("db", "upgrade", env=env)
    assert made.returncode == 0, made.stderr
    return env


def test_export_import_report_again(report_env: Env, tmp_path: Path) -> None:
    env, _ = report_env
    exported = tmp_path / "all.json"
    report_ok(env, "--all", "--format", "json", "-o", str(exported))
    target = target_env(tmp_path)
    result = invoke("import", str(exported), env=target)
    assert result.returncode == 0, result.stderr
    assert "3 job(s), 4 node part(s) written: dist-1, solo, secretive" in result.stdout
    again = invoke("import", str(exported), env=target)  # changes nothing, and says so
    assert again.returncode == 0, again.stderr
    assert ("3 job(s) unchanged: already in the store exactly so: dist-1, solo, secretive"
            in again.stdout), again.stdout
    assert "written" not in again.stdout
    originals = {r["job"]["id"]: r for r in json.loads(exported.read_text())}
    for job in ENDED:
        figures = json.loads(report_ok(target, job).stdout)
        assert_same_figures(originals[job], figures)
    jobs = json.loads(invoke("jobs", "--json", env=target).stdout)
    assert sorted(j["id"] for j in jobs) == ["dist-1", "secretive", "solo"]


def test_a_schema_1_report_exits_2_naming_the_schema_and_imports_nothing(
        tmp_path: Path) -> None:
    """A report written during joulestat's development, before its first release, when
    the accelerator component was ``gpu`` (tests/fixtures/README.md): refused by the real
    CLI, its file and schema named, nothing written. So is a version yet to come."""
    assert json.loads(SCHEMA_1.read_text())["schema_version"] == 1
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**json.loads(SCHEMA_2.read_text()), "schema_version": 4}))
    env = target_env(tmp_path)
    for path, value in ((SCHEMA_1, 1), (future, 4)):
        refused = invoke("import", str(path), env=env)
        assert refused.returncode == 2, refused.stderr
        assert f"{path}: entry 0: schema_version: " in refused.stderr
        assert str(value) in refused.stderr and "2 and 3" in refused.stderr
        assert "nothing of this file" in refused.stderr
        assert json.loads(invoke("jobs", "--json", env=env).stdout) == []


def test_a_schema_2_report_imports_and_its_figures_gain_bounds(tmp_path: Path) -> None:
    """A report written before figures carried bounds (tests/fixtures/README.md): imported
    through the real CLI, its figures are the same, and the report of the imported job
    (schema 3) bounds them from the sources the import kept: RAPL and NVML within a few
    percent, the tdp-curve estimate as wide as its measured error."""
    old = json.loads(SCHEMA_2.read_text())
    assert old["schema_version"] == 2 and "energy_bounds_j" not in old
    env = target_env(tmp_path)
    result = invoke("import", str(SCHEMA_2), env=env)
    assert result.returncode == 0, result.stderr
    again = json.loads(report_ok(env, "dist-1", "--format", "json").stdout)
    validate(again)
    assert again["schema_version"] == 3
    for key in ("energy_j", "dynamic_energy_j", "idle_energy_j"):
        assert again[key] == pytest.approx(old[key], rel=1e-12), key
    assert again["co2e_g"] == pytest.approx(old["co2e_g"], rel=1e-12)
    bounds = again["energy_bounds_j"]
    for component in ("cpu", "dram", "accelerator", "total"):
        low, high = bounds[component]
        assert low <= again["energy_j"][component] <= high, component
    # the accelerator (nvml_energy) within +/-10 %, the CPU (partly model:tdp-curve) wider
    low, high = bounds["accelerator"]
    assert 0.9 * again["energy_j"]["accelerator"] <= low < high <= (
        1.1 * again["energy_j"]["accelerator"])
    sources = again["bounds"]["sources"]
    assert sources["import:joulestat/model:tdp-curve"]["basis"] == "measured"
    assert sources["import:joulestat/nvml_energy"]["high_pct"] == pytest.approx(5.0)
    for unit, figures in again["per_unit"].items():
        low, high = figures["energy_bounds_j"]
        assert low <= figures["energy_j"] <= high, unit
        assert low * again["work_units"][unit] == pytest.approx(bounds["total"][0]), unit
    low, high = again["co2e_bounds_g"]
    assert low < again["co2e_g"] < high
    assert "publishes no uncertainty" in again["bounds"]["co2e"]
    html = report_ok(env, "dist-1", "--format", "html").stdout
    assert units.energy_range(*bounds["total"]) in html


def bad_files(tmp_path: Path, env: dict[str, str]) -> list[tuple[Path, str]]:
    """(file, what the error must say) for one file of each kind of fault."""
    good = json.loads(report_ok(env, "dist-1").stdout)
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps(good, indent=1)[:400])
    wrong = dict(good, nodes=[dict(good["nodes"][0], started_s="yesterday")])
    wrong_types = tmp_path / "wrong-types.json"
    wrong_types.write_text(json.dumps([good, wrong]))
    emissions = tmp_path / "emissions.csv"
    emissions.write_text("timestamp,project_name,run_id,duration,cpu_energy,gpu_energy,"
                         "ram_energy\n2024-05-01T12:00:00,p,r1,10,0.001,0,0.0001\n"
                         "2024-05-01T12:01:00,p,r2,10,0.001,lots,0.0001\n")
    return [(malformed, f"{malformed}: line "), (wrong_types,
             f"{wrong_types}: entry 1: nodes[0].started_s: expected a number"),
            (emissions, f"{emissions}: line 3: gpu_energy: expected a number, got 'lots'")]


def test_bad_files_exit_2_and_import_nothing(report_env: Env, tmp_path: Path) -> None:
    env, _ = report_env
    target = target_env(tmp_path)
    for path, message in bad_files(tmp_path, env):
        result = invoke("import", str(path), env=target)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "nothing of this file" in result.stderr
        assert json.loads(invoke("jobs", "--json", env=target).stdout) == []
    # a good file beside a bad one: the good one goes in, the exit status says one failed
    good = tmp_path / "solo.json"
    good.write_text(report_ok(env, "solo").stdout)
    result = invoke("import", str(good), str(tmp_path / "emissions.csv"), env=target)
    assert result.returncode == 2 and "1 job(s)" in result.stdout
    assert [j["id"] for j in json.loads(invoke("jobs", "--json", env=target).stdout)] == [
        "solo"]


def test_import_sets_name_kind_and_labels(tmp_path: Path) -> None:
    from tests.helpers.honest_store import CODECARBON_HEADER, codecarbon_row

    emissions = tmp_path / "emissions.csv"
    emissions.write_text(CODECARBON_HEADER + codecarbon_row("r1", "2024-05-01T12:00:00"))
    env = target_env(tmp_path)
    result = invoke("import", str(emissions), "--name", "mlp-train-cc", "--kind", "training",
                    "--label", "team=vision", env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(report_ok(env, "codecarbon:r1").stdout)
    assert (data["job"]["name"], data["job"]["kind"]) == ("mlp-train-cc", "training")
    assert data["job"]["labels"]["team"] == "vision"
    bad = invoke("import", str(emissions), "--label", "oops", env=env)
    assert bad.returncode == 2 and "--label 'oops': expected KEY=VALUE" in bad.stderr
