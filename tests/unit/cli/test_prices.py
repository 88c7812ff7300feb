"""Prices and instance types as a user meets them: the real CLI, run in this process
(tests/helpers/cli.py).

``--prices FILE`` on ``compare`` and ``report`` over a SageMaker training job imported
from two nodes' JSON reports (what two stores export), its precedence against
``--price-per-hour``, the env variable and the TOML key; a bad file; ``joulestat
instances``; and the file handed on to the dashboard. Every expected cost is worked out
here from the prices file's rates and the hours each node was held. The warning for an
instance type the catalog does not know, from ``joulestat run`` and the agent, is in
tests/system/test_prices_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from joulestat.carbon.catalog import lookup
from tests.helpers.cli import cli_env, invoke
from tests.helpers.compare_store import PINNED, compare_invoke

T0 = 1_700_000_040.0
JOB = "sm-bert-1"
# The job: a trainer on ml.p4d.24xlarge held 2 h counting 3 000 steps, a data node on
# ml.g5.12xlarge held 1.5 h; the negotiated rates below, not the list prices, pay them.
P4D_USD, G5_USD = 25.10, 5.00
P4D_H, G5_H = 2.0, 1.5
STEPS = 3_000
PRICES = f"""\
# our SageMaker Savings Plan rates, us-east-1
instance_type,usd_per_hour
ML.P4D.24XLARGE,{P4D_USD}
ml.g5.12xlarge,{G5_USD}
"""
EXPECTED_COST = P4D_USD * P4D_H + G5_USD * G5_H


def node_report(node: str, instance_type: str, held_h: float, gpu_j: float,
                units: dict[str, float]) -> dict[str, Any]:
    """One node's joulestat JSON report of the job, as its own store would export it."""
    return {
        "format": "joulestat-report", "schema_version": 2, "agent_version": "0.1.0",
        "generated_s": T0 + 86_400,
        "job": {"id": JOB, "name": "bert-sagemaker", "kind": "training", "labels": {},
                "agent_labels": {}, "started_s": T0},
        "nodes": [{
            "node": node, "instance_type": instance_type, "region": "us-east-1",
            "started_s": T0, "ended_s": T0 + held_h * 3600,
            "components": {"accelerator": {"dynamic_j": 0.8 * gpu_j, "idle_j": 0.2 * gpu_j},
                           "cpu": {"dynamic_j": 1_000.0, "idle_j": 0.0}},
            "work_units": units, "sources": {"accelerator": ["nvml_energy"], "cpu": ["rapl"]},
        }],
    }


@pytest.fixture
def imported(tmp_path: Path) -> tuple[str, Path]:
    """A fresh store holding the job imported from both nodes' reports, and the prices."""
    files = []
    for name, itype, held_h, gpu_j, units in (
            ("algo-1", "ml.p4d.24xlarge", P4D_H, 9_000_000.0, {"step": STEPS}),
            ("algo-2", "ml.g5.12xlarge", G5_H, 700_000.0, {})):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(node_report(name, itype, held_h, gpu_j, units)))
        files.append(str(path))
    url = f"sqlite:///{tmp_path / 'imported.db'}"
    # made first: an import creating a store does so in a child process (system tier)
    assert invoke("db", "upgrade", "--db", url).returncode == 0
    result = invoke("import", *files, env=cli_env(JOULESTAT_DB=url))
    assert result.returncode == 0, result.stderr
    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES)
    return url, prices


def compare_json(url: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = invoke("compare", "--db", url, "--json", *PINNED, *args, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compare_prices_an_imported_two_node_sagemaker_job_per_step(
        imported: tuple[str, Path]) -> None:
    """Acceptance: cost per step from the prices file's rates x each node's held hours."""
    url, prices = imported
    out = compare_json(url, "--prices", str(prices))
    [row] = out["rows"]
    assert (row["job_id"], row["unit"], row["basis"]) == (JOB, "step", "unit")
    assert sorted(row["instance_types"]) == ["ml.g5.12xlarge", "ml.p4d.24xlarge"]
    assert row["instance_hours"] == pytest.approx(P4D_H + G5_H)
    assert row["cost_usd"] == pytest.approx(EXPECTED_COST)
    assert row["cost_per_unit_usd"] == pytest.approx(EXPECTED_COST / STEPS)
    assert row["cost_per_million_usd"] == pytest.approx(EXPECTED_COST / STEPS * 1e6)
    source = f"prices file {prices.resolve()}"
    assert {p["instance_type"]: (p["usd_per_hour"], p["source"]) for p in out["prices"]} == {
        "ml.p4d.24xlarge": (P4D_USD, source), "ml.g5.12xlarge": (G5_USD, source)}
    # the catalog's SageMaker list prices would give another figure: the file was used
    catalog = (lookup("ml.p4d.24xlarge").sagemaker_usd_per_hour * P4D_H
               + lookup("ml.g5.12xlarge").sagemaker_usd_per_hour * G5_H)
    assert compare_json(url)["rows"][0]["cost_usd"] == pytest.approx(catalog)
    assert catalog != pytest.approx(EXPECTED_COST)

    text = compare_invoke(url, "--prices", str(prices), "--wide", *PINNED)  # a line each
    assert text.returncode == 0, text.stderr
    assert "prices (USD per instance-hour):" in text.stdout
    [p4d_line] = [line for line in text.stdout.splitlines()
                  if line.strip().startswith("ml.p4d.24xlarge ")]
    assert "25.10" in p4d_line and source in p4d_line, text.stdout
    assert "USD/1M steps" in text.stdout


def test_price_per_hour_beats_the_file(imported: tuple[str, Path]) -> None:
    url, prices = imported
    out = compare_json(url, "--prices", str(prices), "--price-per-hour", "3")
    [row] = out["rows"]
    assert row["cost_usd"] == pytest.approx(3 * (P4D_H + G5_H))
    assert {p["source"] for p in out["prices"]} == {"override"}


def test_env_and_toml_as_documented(imported: tuple[str, Path], tmp_path: Path) -> None:
    """flag > JOULESTAT_PRICES > ``prices`` in the --config file > the catalog."""
    url, prices = imported
    cheap = tmp_path / "cheap.csv"
    cheap.write_text("instance_type,usd_per_hour\nml.p4d.24xlarge,1\nml.g5.12xlarge,1\n")
    toml = tmp_path / "joulestat.toml"
    toml.write_text(f'[joulestat]\nprices = "{cheap}"\n')

    def cost(*args: str, **env: str) -> float:
        return compare_json(url, *args, env=cli_env(**env))["rows"][0]["cost_usd"]

    assert cost("--config", str(toml)) == pytest.approx(P4D_H + G5_H)  # TOML
    assert cost(JOULESTAT_PRICES=str(prices)) == pytest.approx(EXPECTED_COST)  # env
    assert cost("--config", str(toml), JOULESTAT_PRICES=str(prices)) == pytest.approx(
        EXPECTED_COST)  # env beats the file
    assert cost("--prices", str(cheap), JOULESTAT_PRICES=str(prices)) == pytest.approx(
        P4D_H + G5_H)  # the flag beats env


@pytest.mark.parametrize(("text", "line", "problem"), [
    ("instance_type,price\nml.p4d.24xlarge,1\n", 1, "expected a header"),
    ("# rates\ninstance_type,usd_per_hour\nml.p4d.24xlarge,lots\n", 3, "not a number"),
    ("instance_type,usd_per_hour\nml.p4d.24xlarge,-2\n", 2, ">= 0"),
    ("instance_type,usd_per_hour\nml.p4d.24xlarge,nan\n", 2, ">= 0"),
    ("instance_type,usd_per_hour\nml.p4d.24xlarge,1\nml.P4D.24xlarge,2\n", 3, "line 2"),
])
def test_a_bad_prices_file_exits_2_naming_file_and_line(
        imported: tuple[str, Path], tmp_path: Path, text: str, line: int, problem: str
) -> None:
    url, _ = imported
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    for command in (("compare", "--db", url), ("report", JOB, "--db", url),
                    ("instances",)):
        result = invoke(*command, "--prices", str(bad))
        assert result.returncode == 2, (command, result.stdout)
        assert f"--prices: {bad.resolve()} line {line}:" in result.stderr, result.stderr
        assert problem in result.stderr and not result.stdout
    from_env = invoke("compare", "--db", url, env=cli_env(JOULESTAT_PRICES=str(bad)))
    assert from_env.returncode == 2 and f"JOULESTAT_PRICES: {bad.resolve()}" in (
        from_env.stderr)


def test_report_names_the_prices_file_in_its_price_provenance(
        imported: tuple[str, Path]) -> None:
    url, prices = imported
    result = invoke("report", JOB, "--db", url, "--prices", str(prices))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cost_usd"] == pytest.approx(EXPECTED_COST)
    assert data["per_unit"]["step"]["cost_usd"] == pytest.approx(EXPECTED_COST / STEPS)
    by_node = {p["node"]: p for p in data["provenance"]}
    for node, usd in (("algo-1", P4D_USD), ("algo-2", G5_USD)):
        assert by_node[node]["price_usd_per_hour"] == usd
        assert by_node[node]["price_source"] == f"prices file {prices.resolve()}"
        assert "--prices" in by_node[node]["price_note"]


# -- joulestat instances -------------------------------------------------------------------


def test_instances_lists_the_catalog() -> None:
    result = invoke("instances")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["instance", "type", "provider"]
    [p4d] = [line for line in lines if line.startswith("p4d.24xlarge ")]
    assert "8 x NVIDIA A100" in p4d and "37.688" in p4d and "21.96" in p4d
    assert any(line.startswith("Standard_NC24ads_A100_v4 ") for line in lines)


def test_instances_json_substring_and_glob() -> None:
    result = invoke("instances", "--json", "g5")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found and all("g5" in r["instance_type"] for r in found)
    g5 = {r["instance_type"]: r for r in found}["g5.xlarge"]
    spec = lookup("g5.xlarge")
    assert (g5["vcpus"], g5["memory_gib"], g5["accelerator_count"]) == (4, 16, 1)
    assert (g5["usd_per_hour"], g5["sagemaker_usd_per_hour"]) == (
        spec.usd_per_hour, spec.sagemaker_usd_per_hour)
    assert g5["source"].startswith("https://") and g5["date"]

    glob = json.loads(invoke("instances", "--json", "G5.*XLARGE").stdout)
    assert {r["instance_type"] for r in glob} == {
        "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.12xlarge", "g5.16xlarge",
        "g5.24xlarge", "g5.48xlarge"}
    sagemaker = json.loads(invoke("instances", "--json", "ml.inf2.*").stdout)
    assert [r["instance_type"] for r in sagemaker] == [
        "inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"]


def test_instances_with_a_prices_file_shows_the_override(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES + "c5.larg,1\n")
    result = invoke("instances", "--json", "--prices", str(prices), "p4d")
    assert result.returncode == 0, result.stderr
    [p4d] = json.loads(result.stdout)
    assert p4d["prices_file_sagemaker_usd_per_hour"] == P4D_USD
    assert p4d["prices_file_usd_per_hour"] is None
    assert p4d["prices_file"] == str(prices.resolve())
    assert "c5.larg" in result.stderr  # a row that prices nothing the catalog knows
    text = invoke("instances", "--prices", str(prices), "p4d").stdout
    assert "your USD/h" in text and "ml 25.1" in text


def test_instances_no_match_exits_1() -> None:
    result = invoke("instances", "c5.larg*x")
    assert result.returncode == 1 and not result.stdout
    assert "no instance type in the catalog matches 'c5.larg*x'" in result.stderr
    as_json = invoke("instances", "--json", "nothing-like-this")
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == []


# -- the dashboard --------------------------------------------------------------------------


def test_dashboard_hands_the_checked_file_to_streamlit(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    from tests.helpers.dashboard_command import run

    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES)
    monkeypatch.delenv("JOULESTAT_PRICES", raising=False)
    _args, env = run(["--db", "sqlite:////tmp/x.db", "--prices", str(prices)], monkeypatch)
    assert env["JOULESTAT_PRICES"] == str(prices.resolve())
    assert str(prices.resolve()) in capsys.readouterr().out
    _args, env = run(["--db", "sqlite:////tmp/x.db"], monkeypatch)
    assert "JOULESTAT_PRICES" not in env
    bad = tmp_path / "bad.csv"
    bad.write_text("instance_type,usd_per_hour\nml.p4d.24xlarge,x\n")
    result = invoke("dashboard", "--prices", str(bad))
    assert result.returncode == 2 and f"{bad.resolve()} line 2" in result.stderr
