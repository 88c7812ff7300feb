"""``joulestat compare`` on the store of :mod:`tests.helpers.compare_store` (written
through the real store API; intensity and PUE pinned so CO2e is hand-computable, prices
the catalog's): its JSON rows and text table, jobs and baselines by name, id prefix or
group, and what it says (exit 1 or 2) when nothing matches or an argument is wrong. The
real command runs in this process (tests/helpers/cli.py). Also the loader the command
reads the store through (``load_job_figures``/``figures_for``): in one query per batch
of jobs, whatever their number. Its PostgreSQL form: tests/system/test_compare_cli.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event

from joulestat.reports.compare import figures
from joulestat.reports.compare.figures import figures_for, load_job_figures, pick_jobs
from joulestat.reports.compare.groups import CompareError
from joulestat.store.engine import make_engine
from tests.helpers.cli import invoke
from tests.helpers.compare_store import (
    C6I,
    G5,
    INF2,
    P4D,
    PINNED,
    SETTINGS,
    T0,
    compare_invoke,
    fill_compare_store,
    job,
    node,
    run_job,
    runs_store,
)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    fill_compare_store(url)
    yield url


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

    for kind in ("training", "inference", None):  # chosen in SQL, or named: the same
        assert load_job_figures(engine, SETTINGS, kind=kind, now_s=T0 + 86_400) == \
            figures_for(engine, pick_jobs(engine, kind).refs, SETTINGS, now_s=T0 + 86_400)
    picked = load_job_figures(engine, SETTINGS, jobs=["bert-inf2", "j-g5"])
    assert [f.job_id for f in picked] == ["j-inf2", "j-g5"]  # the order asked for
    with pytest.raises(CompareError) as error:
        load_job_figures(engine, SETTINGS, kind="training", jobs=["bert-g5"])
    assert error.value.argument == "jobs"
    engine.dispose()


def test_json_rows_for_two_inference_jobs(store: str) -> None:
    result = compare_invoke(store, "--jobs", "bert-g5", "bert-inf2", "--sla", "100000",
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
    result = compare_invoke(store, "--jobs", "j-in", "bert-g5", "--baseline", "j-inf", "--json",
                         *PINNED)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["job_id"] for r in out["rows"]] == ["j-inf2", "j-g5"]
    assert out["baseline"] == "bert-inf2" and out["rows"][0]["is_baseline"]
    short = compare_invoke(store, "--jobs", "j-")  # every id starts so; too short to count
    assert short.returncode == 2
    assert "--jobs: no job with id, id prefix or name 'j-'" in short.stderr
    assert "5 id(s) start with it: give at least 4 characters" in short.stderr
    typo = compare_invoke(store, "--kind", "inference", "--jobs", "bert-g6")
    assert typo.returncode == 2
    assert ("--jobs: no inference job with id, id prefix or name 'bert-g6' in the store; "
            "did you mean 'bert-g5'") in typo.stderr


def test_by_instance_type_with_per_run_and_unknown_cost(store: str) -> None:
    result = compare_invoke(store, "--by", "instance_type", "--baseline", "inf2.xlarge",
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
    result = compare_invoke(store, "--kind", "inference", "--sla", "100000", "--wide",
                            *PINNED)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    print(text)
    for header in ("inferences/instance-h", "energy/inference", "CO2e/inference",
                   "USD/1M inferences", "energy/run", "fleet power", "fleet cost/h"):
        assert header in text, header
    assert "36.0 J" in text and "2.86 J" in text  # per inference, through joulestat.core.units
    assert "e-0" not in text and "0.000" not in text
    assert "bert-g5 *" in text
    assert ("bert-inf2 vs bert-g5: \u00d76.3 throughput, \u221292 % energy per inference"
            in text)
    cost_inf2, cost_g5 = INF2 * 0.5 / 31_500 * 1e6, G5 / 10_000 * 1e6
    assert f"${cost_inf2:.2f} vs ${cost_g5:.2f} per million inferences" in text
    assert "to serve 100,000 inferences/h:" in text
    lines = text.splitlines()
    sla_at = lines.index("to serve 100,000 inferences/h:")
    [laptop] = [line for line in lines[:sla_at] if line.startswith("bert-laptop  ")]
    assert "unknown" in laptop.split()  # cost/1M inferences: no price for 'local'
    [sized] = [line for line in lines[sla_at:] if line.startswith("bert-inf2")]
    assert sized.split()[1:] == ["2", "100", "W", f"${2 * INF2:.2f}"]  # 2 x 50 W, 2 x price


def test_a_name_compares_every_run_and_says_which(store: str) -> None:
    engine = make_engine(store)  # a second, later run of bert-g5
    run_job(engine, node("g5-2", "g5.xlarge"),
            job("j-g5-again", "bert-g5", "inference", T0 + 20_000, 3600),
            ticks=4, gpu_j=90_000.0, units={"inference": 5_000})
    engine.dispose()
    result = compare_invoke(store, "--jobs", "bert-g5", "j-inf2", "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    assert [r["job_id"] for r in json.loads(result.stdout)["rows"]] == [
        "j-g5", "j-g5-again", "j-inf2"]
    # one note, wrapped to 100 columns as the table is: its lines joined back
    lines = result.stderr.splitlines()
    assert max(len(line) for line in lines) <= 100
    start = next(i for i, line in enumerate(lines) if "bert-g5" in line)
    note = lines[start] + "".join(" " + line.strip() for line in lines[start + 1:]
                                  if line.startswith("  "))
    assert note.startswith("joulestat compare: --jobs: 'bert-g5' names 2 runs: j-g5 "
                           "(started "), note
    assert "j-g5-again (started " in note
    assert note.endswith("; comparing all of them (give ids to compare only some)")
    one = compare_invoke(store, "--jobs", "bert-inf2", "j-g5-again", "--json", *PINNED)
    assert one.returncode == 0, one.stderr
    assert "names" not in one.stderr  # one run, or an id: nothing to say
    assert [r["job_id"] for r in json.loads(one.stdout)["rows"]] == ["j-inf2", "j-g5-again"]
    helped = compare_invoke(store, "--help")
    assert "a name means every run of it" in " ".join(helped.stdout.split())


def test_repeated_jobs_add_up(store: str) -> None:
    result = compare_invoke(store, "--jobs", "bert-inf2", "--jobs", "j-g5", "bert-laptop",
                         "--jobs", "bert-inf2", "--json", *PINNED)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [r["job_id"] for r in out["rows"]] == ["j-inf2", "j-g5", "j-laptop"]  # once each
    bad = compare_invoke(store, "--jobs", "bert-g5", "--jobs", "no-such-job")
    assert bad.returncode == 2 and "--jobs: no job" in bad.stderr


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
    result = compare_invoke(store, *args)
    assert result.returncode == 2, result.stdout
    assert flag in result.stderr, result.stderr


def test_what_compare_says_when_nothing_or_no_label_matches(store: str, tmp_path: Path) -> None:
    """Issue 24: `--kind other` with no match said "run some..." though the store held
    jobs, and `--by label:nokey` gave one silent "nokey unset" row."""
    none = compare_invoke(store, "--kind", "other")
    assert none.returncode == 1 and none.stdout == ""
    assert "no job matches --kind other" in none.stderr
    listed = json.loads(run_jobs_json(store))
    assert f"the store holds {len(listed)} job(s)" in none.stderr
    typo = compare_invoke(store, "--kind", "inference", "--by", "label:nokey")
    assert typo.returncode == 2 and "label 'nokey'" in typo.stderr, typo.stderr
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    assert invoke("db", "upgrade", "--db", empty).returncode == 0
    nothing = compare_invoke(empty)
    assert nothing.returncode == 1 and "the store is empty" in nothing.stderr


def run_jobs_json(url: str) -> str:
    listed = invoke("jobs", "--json", "--db", url)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def _statements_comparing(tmp_path: Path, runs: int) -> int:
    """The SQL statements ``figures_for`` sends to compare ``runs`` stored runs (on two
    nodes, so the nodes read do not grow with the runs either)."""
    engine = runs_store(f"sqlite:///{tmp_path / f'runs-{runs}.db'}", runs)
    refs = pick_jobs(engine).refs
    sent: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    found = figures_for(engine, refs, SETTINGS, now_s=T0 + runs * 3600)
    event.remove(engine, "before_cursor_execute", count)
    engine.dispose()
    assert [f.job_id for f in found] == [f"j-{i:03d}" for i in range(runs)]
    assert all(f.energy_j == pytest.approx(9_000.0) and f.units == {"inference": 100}
               for f in found)
    return len(sent)


def test_compare_reads_jobs_in_bulk(tmp_path: Path) -> None:
    """Issue 28: a detail read per job made ``joulestat compare`` over 3,000 jobs take
    31.6 s. The jobs' totals, sources, accelerators, latency and bounds are read for all
    of them at once, so 40 runs cost the statements 5 runs do (the structure, not a
    timing, which would be flaky)."""
    assert _statements_comparing(tmp_path, 5) == _statements_comparing(tmp_path, 40)


def test_compare_reads_a_fleets_jobs_in_batches(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement names every job's id and a database takes only so many parameters
    (PostgreSQL 65,535): past BATCH jobs the reads go a batch at a time, and the figures
    are the same as in one read."""
    engine = runs_store(f"sqlite:///{tmp_path / 'runs-12.db'}", 12)
    refs = pick_jobs(engine).refs
    whole = figures_for(engine, refs, SETTINGS, now_s=T0 + 12 * 3600)
    monkeypatch.setattr(figures, "BATCH", 5)
    batched = figures_for(engine, refs, SETTINGS, now_s=T0 + 12 * 3600)
    engine.dispose()
    assert batched == whole
    assert [f.job_id for f in batched] == [f"j-{i:03d}" for i in range(12)]
    assert all(f.energy_bounds_j is not None for f in batched)
