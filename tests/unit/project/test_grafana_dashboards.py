"""deploy/grafana/dashboards: the four boards are there, each portable (its data source a
variable) and well formed (unique panel ids, a description and a known unit per panel,
panels inside the grid), and every query uses only metrics that exist. That each query
parses and returns data is checked with promtool in
tests/system/test_promtool_dashboards.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.grafana import DASHBOARDS, all_queries, load, panels
from tests.helpers.promql_check import unknown_names

# Grafana's unit ids that these dashboards use (a misspelt one shows raw numbers).
GRAFANA_UNITS = {"watt", "kwatth", "joule", "percentunit", "bytes", "s", "short", "reqps",
                 "none"}


def test_the_four_dashboards_are_there() -> None:
    titles = {load(path)["title"] for path in DASHBOARDS}
    assert titles == {"joulestat / Node power", "joulestat / Jobs by energy",
                      "joulestat / Energy per unit of work", "joulestat / Agent health"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_a_dashboard_is_portable_and_well_formed(path: Path) -> None:
    board = load(path)
    assert board["uid"] == path.stem and len(board["uid"]) <= 40  # Grafana's uid limit
    variables = board["templating"]["list"]
    assert variables[0] == {**variables[0], "name": "datasource", "type": "datasource",
                            "query": "prometheus"}
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    source = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels(board):
        # No data source uid of one Grafana: imported elsewhere, the variable picks one.
        assert panel["datasource"] == source, panel["title"]
        assert all(target["datasource"] == source for target in panel["targets"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["w"] > 0 and grid["h"] > 0
        assert panel["description"], f"{panel['title']}: say what the panel shows"
        assert panel["fieldConfig"]["defaults"]["unit"] in GRAFANA_UNITS, panel["title"]


def test_queries_use_only_metrics_that_exist_or_are_listed_as_pending() -> None:
    for where, expr in all_queries():
        assert not unknown_names(expr), f"{where}: {unknown_names(expr)}"
