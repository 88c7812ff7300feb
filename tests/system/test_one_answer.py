"""One figure, one answer: a job's energy, units and energy per unit are the same in
every view that shows them, at the same moment, for a running job and an ended one, on
SQLite and on PostgreSQL (issue 45).

The views, as a user meets them: ``joulestat report --format json``, ``joulestat jobs
--json``, ``joulestat compare --json`` per job and per setup (each job alone on its
instance type, so a setup is that one job), the job API's ``GET /v1/jobs/{id}/figures``
(a real HTTP server on this store), and the Job detail and Compare pages (Streamlit's
AppTest). The running job has rows in its node's totals and raw rows after their
boundary, which is where views used to part: the Compare table counted it up to the
boundary while its own page counted it to its last flush. Printed figures are compared
as printed (three significant digits, tests/unit/core/test_units.py), the JSON ones to
1e-9 of their size.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.dashboard import fmt
from joulestat.reports.figures import FiguresFromStore
from tests.helpers import job_api
from tests.helpers.cli import invoke
from tests.helpers.compare_store import PINNED, T0, TICK_S, job, node, run_job, settle
from tests.helpers.dashboard_app import APP
from tests.helpers.stores import Store

UNIT = "inference"
ENDED, RUNNING = "j-ended", "j-running"
TYPES = {ENDED: "g5.xlarge", RUNNING: "inf2.xlarge"}


def _fill(store: Store) -> None:
    """An ended job on a g5 node; a running one on an inf2 node with two ticks in its
    node's totals and one tick of raw rows after their boundary (its last flush)."""
    engine = store.engine
    run_job(engine, node("node-g5", TYPES[ENDED]), job(ENDED, "ended", "inference", T0, 1800),
            ticks=2, gpu_j=80_000.0, units={UNIT: 2_000})
    live = replace(job(RUNNING, "running", "inference", T0 + 3_600, 0), ended_s=None)
    run_job(engine, node("node-inf2", TYPES[RUNNING]), live, ticks=2, gpu_j=50_000.0,
            units={UNIT: 900})
    settle(engine, "node-inf2", T0 + 3_600 + 2 * TICK_S)
    run_job(engine, node("node-inf2", TYPES[RUNNING]), live, ticks=1, gpu_j=30_000.0,
            units={UNIT: 400}, from_s=T0 + 3_600 + 2 * TICK_S)


def _json(*args: str) -> Any:
    done = invoke(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _same(found: float | None, expected: float) -> bool:
    return found is not None and math.isclose(found, expected, rel_tol=1e-9, abs_tol=1e-9)


def _page(url: str, page: str, monkeypatch: pytest.MonkeyPatch, job_id: str | None = None
          ) -> AppTest:
    monkeypatch.setenv("JOULESTAT_DB", url)
    at = AppTest.from_file(APP, default_timeout=60)
    if job_id is not None:
        at.query_params["job"] = job_id
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_every_view_gives_a_job_the_same_figures(store: Store,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(store)
    url = store.url
    # The reference: the report, what every view should agree with.
    truth = {}
    for job_id in (ENDED, RUNNING):
        report = _json("report", "--format", "json", "--db", url, job_id)
        truth[job_id] = {
            "energy_j": report["energy_j"]["total"],
            "dynamic_j": report["dynamic_energy_j"]["total"],
            "by_component": {c: v for c, v in report["energy_j"].items()
                             if c != "total" and v},
            "units": report["work_units"][UNIT],
            "per_unit_j": report["per_unit"][UNIT]["energy_j"],
        }
    assert report["job"]["status"] == "running"
    # The running job counts its raw tick after the boundary: 3 ticks of GPU energy.
    assert _same(truth[RUNNING]["energy_j"], 130_000.0)
    assert truth[RUNNING]["units"] == 2_200

    # joulestat jobs --json
    listed = {entry["id"]: entry for entry in _json("jobs", "--json", "--db", url)}
    for job_id, want in truth.items():
        entry = listed[job_id]
        assert _same(entry["total_j"], want["energy_j"]), (job_id, entry)
        assert _same(sum(entry["dynamic_j"].values()), want["dynamic_j"]), (job_id, entry)
        by_component = {c: entry["dynamic_j"].get(c, 0.0) + entry["idle_j"].get(c, 0.0)
                        for c in {*entry["dynamic_j"], *entry["idle_j"]}}
        assert by_component.keys() == want["by_component"].keys()
        assert all(_same(by_component[c], j) for c, j in want["by_component"].items())
        assert entry["units"][UNIT] == want["units"], (job_id, entry)

    # joulestat compare --json, a row per job and a row per setup
    def rows(*args: str) -> dict[str, dict[str, Any]]:
        table = _json("compare", "--json", "--db", url, "--unit", UNIT, *PINNED, *args)
        return {row["job_id"] or row["group"]: row for row in table["rows"]}

    per_job = rows("--jobs", ENDED, RUNNING)
    per_setup = rows("--by", "instance_type")
    for job_id, want in truth.items():
        for row in (per_job[job_id], per_setup[TYPES[job_id]]):
            assert _same(row["energy_j"], want["energy_j"]), (job_id, row)
            assert _same(row["units"], want["units"]), (job_id, row)
            assert _same(row["energy_per_unit_j"], want["per_unit_j"]), (job_id, row)
            assert _same(row["dynamic_j"], want["dynamic_j"]), (job_id, row)
            assert _same(row["accelerator_j"], want["by_component"]["accelerator"]), row

    # GET /v1/jobs/{id}/figures on a job API serving this store
    api = ApiServer(JobRegistry(), "127.0.0.1", 0, figures=FiguresFromStore(store.open()))
    api.start()
    try:
        for job_id, want in truth.items():
            status, _headers, figures = job_api.call(api.port, "GET",
                                                     f"/v1/jobs/{job_id}/figures")
            assert status == 200, figures
            assert _same(figures["energy_j"], want["energy_j"])
            assert _same(figures["dynamic_energy_j"], want["dynamic_j"])
            assert figures["work_units"][UNIT] == want["units"]
            assert _same(figures["per_unit"][UNIT]["energy_j"], want["per_unit_j"])
    finally:
        api.close()

    # The Job detail page, as printed
    for job_id, want in truth.items():
        at = _page(url, "pages/job_detail.py", monkeypatch, job_id)
        shown = {m.label: m.value for m in at.metric}
        assert shown["Energy"] == fmt.energy(want["energy_j"])
        assert shown[f"Energy per {UNIT}"] == fmt.energy(want["per_unit_j"])
        assert shown[f"Dynamic energy per {UNIT}"] == fmt.energy(
            want["dynamic_j"] / want["units"])
        assert shown[f"Work ({fmt.plural(UNIT)})"] == fmt.count(want["units"])

    # The Compare page (per instance type over all time, its default): the same figures
    at = _page(url, "pages/compare.py", monkeypatch)
    table = at.dataframe[0].value.set_index("group")
    for job_id, want in truth.items():
        row = table.loc[TYPES[job_id]]
        assert _same(row[f"energy per {UNIT}"], want["per_unit_j"]), (job_id, row)
        assert _same(row[f"dynamic energy per {UNIT}"], want["dynamic_j"] / want["units"])
        assert row[fmt.plural(UNIT)] == want["units"]
