"""``joulestat compare`` on a store filled through the real store API (StoreWriter).

Ticks of 900 s carry the energy (a node's tick is any interval), shares give it to the
jobs, units are counted per tick, and each job's node is held from its start to its
end. Intensity and PUE are pinned (400 g/kWh, PUE 1.0) so CO2e is hand-computable;
prices are the catalog's, read here through ``catalog.lookup``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from agent.attribution import Share
from agent.carbon.catalog import lookup
from agent.carbon.footprint import CarbonSettings
from agent.identity import NodeInfo
from agent.jobs.registry import Job
from agent.reports.compare import CompareError
from agent.reports.compare_data import load_job_figures
from agent.sensors.base import DeviceInfo
from agent.store import make_engine, migrate
from agent.store.writer import StoreWriter
from agent.tick import Tick, TickEntry
from tests.agent_process import run_cli

T0 = 1_700_000_040.0
TICK_S = 900.0
PINNED = ("--carbon-intensity", "400", "--pue", "1.0")
SETTINGS = CarbonSettings(carbon_intensity_g_per_kwh=400, pue=1.0)
G5 = lookup("g5.xlarge").usd_per_hour
INF2 = lookup("inf2.xlarge").usd_per_hour
P4D = lookup("p4d.24xlarge").usd_per_hour
C6I = lookup("c6i.4xlarge").usd_per_hour
DEVICES = [DeviceInfo("cpu", "0", "rapl", index=0),
           DeviceInfo("gpu", "0", "nvml_energy", model="GPU", uuid="GPU-1", index=0)]


def node(name: str, instance_type: str) -> NodeInfo:
    return NodeInfo(name, instance_type, "us-east-1", "Xeon", "0.1.0")


def run_job(engine: Engine, where: NodeInfo, job: Job, ticks: int, gpu_j: float,
            units: dict[str, float] | None = None) -> None:
    """``ticks`` ticks of TICK_S from the job's start on ``where``, each ``gpu_j`` of GPU
    energy given to the job (80 % dynamic, 20 % idle) plus 10 J of CPU nobody gets."""
    writer = StoreWriter(engine, where, DEVICES, raw_retention_s=7 * 86400)
    writer.save_job(job)
    start = job.started_s
    for i in range(ticks):
        tick = Tick(start + i * TICK_S, start + (i + 1) * TICK_S, (
            TickEntry("cpu", "0", "rapl", 10.0), TickEntry("gpu", "0", "nvml_energy", gpu_j)))
        writer.add(tick)
        writer.add_shares(tick, [
            Share(job.id, "gpu", "0", "nvml_energy", 0.8 * gpu_j, 0.2 * gpu_j),
            Share(None, "cpu", "0", "rapl", 10.0, 0.0)])
        if units:
            writer.add_units(job.id, tick.t1_s, units)
    assert writer.flush()


def job(job_id: str, name: str, kind: str, started_s: float, held_s: float) -> Job:
    return Job(id=job_id, name=name, kind=kind, labels={}, pids={1}, started_s=started_s,
               origin="api", ended_s=started_s + held_s)


def fill_compare_store(url: str) -> None:
    """g5 (1 h, 360 kJ, 10 000 inferences), then inf2 (0.5 h, 90 kJ, 31 500 inferences),
    a loader-fed trainer (c6i + p4d, 1 h each, samples on the trainer), a training run
    that counts nothing, and an inference job on an unpriced laptop; all ended."""
    engine = make_engine(url)
    migrate.upgrade(engine)
    run_job(engine, node("g5-1", "g5.xlarge"), job("j-g5", "bert-g5", "inference", T0, 3600),
            ticks=4, gpu_j=90_000.0, units={"inference": 2_500})
    run_job(engine, node("inf2-1", "inf2.xlarge"),
            job("j-inf2", "bert-inf2", "inference", T0 + 3600, 1800),
            ticks=2, gpu_j=45_000.0, units={"inference": 15_750})
    dist = job("j-dist", "resnet-dist", "training", T0 + 7200, 3600)
    run_job(engine, node("c6i-1", "c6i.4xlarge"), dist, ticks=4, gpu_j=18_000.0)
    run_job(engine, node("p4d-1", "p4d.24xlarge"), dist, ticks=4, gpu_j=3_600_000.0,
            units={"sample": 250_000})
    run_job(engine, node("p4d-2", "p4d.24xlarge"),
            job("j-plain", "resnet-plain", "training", T0 + 10_800, 1800), ticks=2,
            gpu_j=3_000_000.0)
    run_job(engine, node("laptop", "local"),
            job("j-laptop", "bert-laptop", "inference", T0 + 14_400, 3600), ticks=4,
            gpu_j=9_000.0, units={"inference": 250})
    engine.dispose()


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    fill_compare_store(url)
    yield url


def compare_cli(url: str, *args: str):
    return run_cli("compare", "--db", url, *args)


def test_loader_reads_the_store_as_footprint_prices_it(store: str) -> None:
    engine = make_engine(store)
    found = load_job_figures(engine, SETTINGS, kind="training", now_s=T0 + 86_400)
    assert [f.job_id for f in found] == ["j-dist", "j-plain"]  # by start time
    dist = found[0]
    assert dist.instance_types == ("c6i.4xlarge", "p4d.24xlarge")
    assert dist.energy_j == pytest.approx(4 * 18_000 + 4 * 3_600_000)
    assert dist.units == {"sample": 1_000_000}
    assert dist.instance_hours == pytest.approx(2.0)  # two nodes held 1 h each
    assert dist.cost_usd == pytest.approx(C6I * 1 + P4D * 1)
    assert dist.operational_co2e_g == pytest.approx(dist.energy_j / 3.6e6 * 400)
    assert [n.cost_usd for n in dist.nodes] == [pytest.approx(C6I), pytest.approx(P4D)]

    picked = load_job_figures(engine, SETTINGS, jobs=["bert-inf2", "j-g5"])
    assert [f.job_id for f in picked] == ["j-inf2", "j-g5"]  # the order asked for
    with pytest.raises(CompareError) as error:
        load_job_figures(engine, SETTINGS, kind="training", jobs=["bert-g5"])
    assert error.value.argument == "jobs"
    engine.dispose()


def test_json_rows_for_two_inference_jobs(store: str) -> None:
    result = compare_cli(store, "--jobs", "bert-g5", "bert-inf2", "--sla", "100000",
                         "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert (out["unit"], out["baseline"], out["by"]) == ("inference", "bert-g5", "job")
    g5, inf2 = out["rows"]
    assert (g5["job"], g5["job_id"], g5["is_baseline"]) == ("bert-g5", "j-g5", True)
    assert g5["units_per_hour"] == pytest.approx(10_000)  # 10 000 in 1 instance-hour
    assert inf2["units_per_hour"] == pytest.approx(31_500 / 0.5)
    assert g5["energy_per_unit_j"] == pytest.approx(360_000 / 10_000)
    assert inf2["energy_per_unit_j"] == pytest.approx(90_000 / 31_500)
    assert g5["co2e_per_unit_g"] == pytest.approx(0.1 * 400 / 10_000)  # 0.1 kWh x 400
    assert g5["cost_per_million_usd"] == pytest.approx(G5 * 1 / 10_000 * 1e6)
    assert inf2["cost_per_million_usd"] == pytest.approx(INF2 * 0.5 / 31_500 * 1e6)
    assert inf2["throughput_x"] == pytest.approx(6.3)
    assert inf2["energy_pct"] == pytest.approx((90_000 / 31_500 / 36 - 1) * 100)
    assert inf2["cost_pct"] == pytest.approx(
        ((INF2 * 0.5 / 31_500) / (G5 / 10_000) - 1) * 100)
    assert (g5["instances_needed"], inf2["instances_needed"]) == (10, 2)
    assert g5["fleet_power_w"] == pytest.approx(10 * 100.0)
    assert inf2["fleet_cost_per_hour_usd"] == pytest.approx(2 * INF2)
    [line] = out["headlines"]
    assert line["row"] == "bert-inf2" and line["text"].startswith("\u00d76.3 throughput")


def test_jobs_and_baseline_by_id_prefix(store: str) -> None:
    result = compare_cli(store, "--jobs", "j-in", "bert-g5", "--baseline", "j-inf", "--json",
                         *PINNED)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["job_id"] for r in out["rows"]] == ["j-inf2", "j-g5"]
    assert out["baseline"] == "bert-inf2" and out["rows"][0]["is_baseline"]
    short = compare_cli(store, "--jobs", "j-")  # every id starts so; too short to count
    assert short.returncode == 2
    assert "--jobs: no job with id, id prefix or name 'j-'" in short.stderr
    assert "5 id(s) start with it: give at least 4 characters" in short.stderr
    typo = compare_cli(store, "--kind", "inference", "--jobs", "bert-g6")
    assert typo.returncode == 2
    assert ("--jobs: no inference job with id, id prefix or name 'bert-g6' in the store; "
            "did you mean 'bert-g5'") in typo.stderr


def test_by_instance_type_with_per_run_and_unknown_cost(store: str) -> None:
    result = compare_cli(store, "--by", "instance_type", "--baseline", "inf2.xlarge",
                         "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    rows = {(r["group"], r["basis"]): r for r in out["rows"]}
    assert out["unit"] == "inference"  # three jobs counted inferences, one samples
    assert list(rows) == [("g5.xlarge", "unit"), ("inf2.xlarge", "unit"),
                          ("local", "unit"), ("c6i.4xlarge+p4d.24xlarge", "run"),
                          ("p4d.24xlarge", "run")]
    assert rows[("inf2.xlarge", "unit")]["is_baseline"]
    assert rows[("g5.xlarge", "unit")]["throughput_x"] == pytest.approx(10_000 / 63_000)
    laptop = rows[("local", "unit")]
    assert laptop["cost_usd"] is None and laptop["cost_per_million_usd"] is None
    assert laptop["energy_per_unit_j"] == pytest.approx(36_000 / 1_000)
    dist = rows[("c6i.4xlarge+p4d.24xlarge", "run")]
    assert dist["units_per_hour"] is None and dist["energy_pct"] is None
    assert dist["energy_per_run_j"] == pytest.approx(4 * 18_000 + 4 * 3_600_000)
    assert dist["cost_per_run_usd"] == pytest.approx(C6I + P4D)
    assert any("cost unknown for node laptop" in note for note in out["notes"])


def test_text_table(store: str) -> None:
    result = compare_cli(store, "--kind", "inference", "--sla", "100000", *PINNED)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    print(text)
    for header in ("inferences/instance-h", "energy/inference", "CO2e/inference",
                   "USD/1M inferences", "energy/run", "fleet power", "fleet cost/h"):
        assert header in text, header
    assert "36.0 J" in text and "2.86 J" in text  # per inference, through agent.units
    assert "e-0" not in text and "0.000" not in text
    assert "bert-g5 *" in text
    assert ("bert-inf2 vs bert-g5: \u00d76.3 throughput, \u221292 % energy per inference"
            in text)
    cost_inf2, cost_g5 = INF2 * 0.5 / 31_500 * 1e6, G5 / 10_000 * 1e6
    assert f"USD {cost_inf2:.2f} vs {cost_g5:.2f} per million inferences" in text
    assert "to serve 100,000 inferences/h:" in text
    lines = text.splitlines()
    sla_at = lines.index("to serve 100,000 inferences/h:")
    [laptop] = [line for line in lines[:sla_at] if line.startswith("bert-laptop  ")]
    assert "unknown" in laptop.split()  # cost/1M inferences: no price for 'local'
    [sized] = [line for line in lines[sla_at:] if line.startswith("bert-inf2")]
    assert sized.split()[1:] == ["2", "100", "W", f"${2 * INF2:.2f}"]  # 2 x 50 W, 2 x price


@pytest.mark.parametrize(("args", "flag"), [
    (("--baseline", "nope"), "--baseline"),
    (("--unit", "furlong"), "--unit"),
    (("--sla", "0"), "--sla"),
    (("--sla", "-5"), "--sla"),
    (("--sla", "lots"), "--sla"),
    (("--jobs", "bert-g5", "no-such-job"), "--jobs"),
    (("--by", "instance_type", "--baseline", "bert-g5"), "--baseline"),
])
def test_bad_input_exits_2_naming_the_flag(store: str, args: tuple[str, ...], flag: str
                                           ) -> None:
    result = compare_cli(store, *args)
    assert result.returncode == 2, result.stdout
    assert flag in result.stderr, result.stderr
