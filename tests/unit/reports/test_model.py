"""The report model on real stored jobs: figures, schema, redaction, provenance, series.

Expected energies come from the shares :func:`fill_store` wrote; expected carbon and
cost are recomputed here from the catalog and intensity tables, per node.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from sqlalchemy.engine import Engine

from joulestat.carbon.catalog import price_per_hour
from joulestat.carbon.footprint import CarbonSettings
from joulestat.carbon.intensity import resolve_intensity
from joulestat.carbon.pue import pue_for
from joulestat.cli.report import REPORT_OPTIONS
from joulestat.core.redact import REDACTED, redact_labels
from joulestat.reports.model import build_report
from joulestat.runtime.settings import resolve
from joulestat.store.jobs import UnknownJobError
from tests.helpers.report_checks import SCHEMA, validate
from tests.helpers.report_store import (
    LOADER,
    NOW,
    ODD,
    SECRET_LABELS,
    T0,
    TRAINER,
    Totals,
    job_energy,
)


def test_every_stored_job_makes_a_valid_report(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    for job_id in ("dist-1", "solo", "secretive"):
        report = build_report(engine, job_id, now_s=NOW)
        validate(report)
        json.dumps(report, allow_nan=False)  # plain JSON, nothing exotic


def test_schema_rejects_what_it_should(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    report = build_report(engine, "dist-1", now_s=NOW)
    for broken in ({**report, "co2e_g": "1.2"}, {**report, "surprise": 1},
                   {**report, "energy_j": {"cpu": 1.0}},
                   {**report, "job": {**report["job"], "kind": "batch"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(SCHEMA).validate(broken)


def test_multi_node_job_figures(filled: tuple[Engine, Totals]) -> None:
    engine, totals = filled
    report = build_report(engine, "dist-1", now_s=NOW)
    assert report["job"]["status"] == "ended"
    assert (report["job"]["started_s"], report["job"]["ended_s"]) == (T0, T0 + 100)
    assert report["job"]["duration_s"] == 100
    assert report["job"]["labels"] == {"team": "nlp", "run": "42"}
    assert report["energy_j"]["total"] == pytest.approx(job_energy(totals, "dist-1"), rel=1e-12)
    for component in ("cpu", "dram", "accelerator"):
        assert report["energy_j"][component] == pytest.approx(
            job_energy(totals, "dist-1", component=component), rel=1e-12)
    assert report["energy_j"]["net"] == report["energy_j"]["other"] == 0
    assert report["dynamic_energy_j"]["total"] + report["idle_energy_j"]["total"] == (
        pytest.approx(report["energy_j"]["total"]))
    assert report["energy_kwh"] == pytest.approx(report["energy_j"]["total"] / 3.6e6)
    assert report["work_units"] == {"sample": 90 * 64.0, "token": 100 * 4096.0}

    nodes = {n["node"]: n for n in report["nodes"]}
    assert {n: nodes[n]["instance_type"] for n in nodes} == {
        "loader-1": "c5.4xlarge", "trainer-1": "p4d.24xlarge"}
    assert nodes["loader-1"]["duration_s"] == 90 and nodes["trainer-1"]["duration_s"] == 100
    assert nodes["loader-1"]["work_units"] == {"sample": 5760.0}
    assert set(nodes["loader-1"]["components"]) == {"cpu", "dram"}
    assert nodes["loader-1"]["sources"] == {"cpu": ["model:tdp-curve"], "dram": ["rapl"]}
    assert report["sources"]["cpu"] == ["model:tdp-curve", "rapl"]

    operational = cost = 0.0
    for info, held_s in ((LOADER, 90), (TRAINER, 100)):
        kwh = job_energy(totals, "dist-1", info.node) / 3.6e6
        intensity = resolve_intensity(info.region).g_per_kwh
        pue = pue_for(info.instance_type, info.region).value
        node_g = kwh * pue * intensity
        assert nodes[info.node]["co2e_g"] == pytest.approx(node_g, rel=1e-9)
        node_cost = price_per_hour(info.instance_type).usd_per_hour * held_s / 3600
        assert nodes[info.node]["cost_usd"] == pytest.approx(node_cost, rel=1e-9)
        operational += node_g
        cost += node_cost
    assert report["co2e_g"] == pytest.approx(operational, rel=1e-9)
    assert report["cost_usd"] == pytest.approx(cost, rel=1e-9) and report["cost_note"] is None
    assert report["embodied_co2e_g"] > 0
    assert report["total_co2e_g"] == pytest.approx(report["co2e_g"] + report["embodied_co2e_g"])
    # Effective values reproduce the operational figure from the job's energy.
    assert report["energy_kwh"] * report["pue"] * report["carbon_intensity_g_per_kwh"] == (
        pytest.approx(report["co2e_g"], rel=1e-9))


def test_derived_per_unit_figures(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    report = build_report(engine, "dist-1", now_s=NOW)
    energy, co2e, cost = report["energy_j"]["total"], report["co2e_g"], report["cost_usd"]
    for unit, count in report["work_units"].items():
        per = report["per_unit"][unit]
        assert per["energy_j"] == pytest.approx(energy / count)
        assert per["co2e_g"] == pytest.approx(co2e / count)
        assert per["cost_usd"] == pytest.approx(cost / count)
        assert per["sci_co2e_g"] == pytest.approx(
            (co2e + report["embodied_co2e_g"]) / count)
        million = report["per_million_units"][unit]
        assert million["energy_j"] == pytest.approx(energy / count * 1e6)
        assert million["cost_usd"] == pytest.approx(cost / count * 1e6)
        assert report["throughput_per_hour"][unit] == pytest.approx(count / (100 / 3600))


def test_unknown_region_and_type_fall_back_and_say_so(filled: tuple[Engine, Totals]) -> None:
    engine, totals = filled
    report = build_report(engine, "solo", now_s=NOW)
    [provenance] = report["provenance"]
    assert provenance["region"] == ODD.region
    assert provenance["intensity_level"] == "world average"
    assert provenance["intensity_source"] == "codecarbon:world-average"
    assert "mars-central-7" in provenance["region_resolution"]
    assert "fallback" in provenance["region_resolution"]
    assert provenance["pue"] == 1.0 and "unknown-facility" in provenance["pue_source"]
    assert report["co2e_g"] == pytest.approx(
        job_energy(totals, "solo") / 3.6e6 * resolve_intensity(None).g_per_kwh, rel=1e-9)
    # Unknown is never zero.
    assert report["cost_usd"] is None and "homebuilt" in report["cost_note"]
    assert report["embodied_co2e_g"] is None and report["total_co2e_g"] is None
    assert report["per_unit"]["inference"]["cost_usd"] is None
    assert report["per_unit"]["inference"]["sci_co2e_g"] is None
    assert any("odd-1" in note for note in report["notes"])


def test_running_job_is_counted_until_now(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    report = build_report(engine, "solo", now_s=NOW)
    assert report["job"]["status"] == "running" and report["job"]["ended_s"] is None
    assert report["job"]["duration_s"] == pytest.approx(NOW - (T0 + 10))
    assert report["nodes"][0]["duration_s"] == pytest.approx(NOW - (T0 + 10))
    assert report["generated_s"] == NOW


def test_overrides_come_from_settings(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    settings = carbon_settings({"carbon_intensity": 100.0, "pue": 1.5, "price_per_hour": 3.6})
    report = build_report(engine, "solo", settings, now_s=NOW)
    assert report["co2e_g"] == pytest.approx(report["energy_kwh"] * 1.5 * 100.0)
    assert report["cost_usd"] == pytest.approx(3.6 * (NOW - T0 - 10) / 3600)
    [provenance] = report["provenance"]
    assert provenance["intensity_level"] == "override"
    assert (provenance["pue_source"], provenance["price_source"]) == ("override", "override")
    assert carbon_settings({}).carbon_intensity_g_per_kwh is None


def test_secrets_are_redacted_unless_asked(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    report = build_report(engine, "secretive", now_s=NOW)
    assert report["job"]["labels"] == {"team": "nlp", "api_token": REDACTED,
                                       "db_password": REDACTED}
    text = json.dumps(report)
    assert "tok-123" not in text and "hunter2" not in text
    # a token in the settings never reaches the report (the override keeps it offline)
    settings = carbon_settings({"carbon_intensity": 100.0,
                                "electricity_maps_token": "emaps-secret-1"})
    assert "emaps-secret-1" not in json.dumps(
        build_report(engine, "secretive", settings, now_s=NOW))
    full = build_report(engine, "secretive", keep_secrets=True, now_s=NOW)
    assert full["job"]["labels"] == SECRET_LABELS
    assert redact_labels({"AUTH_header": "x", "SessionKey": "y", "user": "z"}) == {
        "AUTH_header": REDACTED, "SessionKey": REDACTED, "user": "z"}


def test_power_series_holds_the_jobs_energy(filled: tuple[Engine, Totals]) -> None:
    engine, totals = filled
    report = build_report(engine, "dist-1", now_s=NOW)
    series = report["power_series"]
    assert {p["component"] for p in series} == {"cpu", "dram", "accelerator"}
    assert len({p["t_start_s"] for p in series}) <= 120
    energy = sum(p["power_w"] * (p["t_end_s"] - p["t_start_s"]) for p in series)
    assert energy == pytest.approx(job_energy(totals, "dist-1"), rel=1e-9)
    gpu = [p for p in series if p["component"] == "accelerator"]
    assert all(150 <= p["power_w"] <= 190 for p in gpu)  # 150..190 W, all to this job


def test_unknown_job(filled: tuple[Engine, Totals]) -> None:
    engine, _ = filled
    with pytest.raises(UnknownJobError, match="nope"):
        build_report(engine, "nope")


def carbon_settings(values: dict) -> CarbonSettings:
    """The carbon section ``joulestat report`` builds from these settings."""
    return resolve(values, REPORT_OPTIONS, env={}).section(CarbonSettings)
