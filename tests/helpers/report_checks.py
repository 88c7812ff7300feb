"""Checks on reports the report tests share: the JSON schema, figures equal after an
export and import, a store's rows, the text of an HTML report, and ``joulestat report``
run in process (:func:`report_ok`)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from tests.helpers.cli import CliResult, invoke

FIXTURES = Path(__file__).parents[1] / "fixtures"
SCHEMA_1 = FIXTURES / "report-schema1.json"  # development format: refused on import
SCHEMA_2 = FIXTURES / "report-schema2.json"  # written before figures carried bounds
SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "report-schema.json").read_text())
TABLES = ("jobs", "job_nodes", "nodes", "tick_energy", "minute_energy", "job_energy",
          "job_minute_energy", "job_units", "job_minute_units")


def validate(report: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal structures; numbers to 1e-9 relative (sums may add in another order)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{index}]")
    elif isinstance(a, float | int) and not isinstance(a, bool):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


FIGURES = ("energy_j", "energy_kwh", "dynamic_energy_j", "idle_energy_j", "co2e_g",
           "embodied_co2e_g", "total_co2e_g", "carbon_intensity_g_per_kwh", "pue", "cost_usd",
           "cost_note", "work_units", "per_unit", "per_million_units", "throughput_per_hour",
           "provenance", "energy_by_class", "power_series", "energy_bounds_j", "co2e_bounds_g")
NODE_FIGURES = ("node", "instance_type", "region", "started_s", "duration_s", "energy_j",
                "components", "work_units", "co2e_g", "embodied_co2e_g", "cost_usd")


def assert_same_figures(original: dict[str, Any], again: dict[str, Any]) -> None:
    for key in FIGURES:
        if key in original:  # bounds since schema 3: an import bounds its sources alike
            assert_same(original[key], again[key], key)
    # Notes name the sources (now import:joulestat/...) and the untracked CPU share, which
    # an import does not carry; every other note comes back word for word.
    kept = [n for n in original["notes"] if " energy is " not in n and "busy CPU" not in n
            and not n.startswith("energy bounds")]
    assert [n for n in kept if n not in again["notes"]] == []
    for key in ("id", "name", "kind", "labels", "started_s", "duration_s"):
        assert_same(original["job"][key], again["job"][key], f"job.{key}")
    assert_same(original["job"]["agent_labels"], again["job"]["agent_labels"],
                "job.agent_labels")
    assert len(original["nodes"]) == len(again["nodes"])
    for node, node_again in zip(original["nodes"], again["nodes"], strict=True):
        for key in NODE_FIGURES:
            assert_same(node[key], node_again[key], f"nodes.{node['node']}.{key}")


def dump(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as connection:
        return {t: sorted(map(tuple, connection.execute(text(f"SELECT * FROM {t}"))), key=repr)
                for t in TABLES}


class HtmlText(HTMLParser):
    """Visible text, plus every tag and attribute seen."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag in ("style", "title"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("style", "title"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)

    @property
    def text(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.parts))


def html_text(page: str) -> HtmlText:
    parser = HtmlText()
    parser.feed(page)
    parser.close()
    return parser


def report_ok(env: dict[str, str], *args: str) -> CliResult:
    """``joulestat report ARGS`` in this process under ``env``; it must exit 0."""
    result = invoke("report", *args, env=env)
    assert result.returncode == 0, result.stderr
    return result
