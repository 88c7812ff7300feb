"""deploy/grafana/dashboards with promtool: every panel's query parses and returns data
when evaluated over series shaped like the agent's (the fixtures of
deploy/prometheus/rules_test.yml plus the agent's health metrics), and the per-unit
panels give the same joules per inference and per step as the recording rules. (The
boards' shape without promtool: tests/unit/project/test_grafana_dashboards.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.helpers.grafana import RULES_TEST, all_queries, load, panels, substituted
from tests.helpers.promql_check import ROOT, needs_promtool, promtool


def _fixture_series() -> list[dict]:
    """The series of rules_test.yml's node and job tests, plus the agent's health."""
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    series: dict[str, dict] = {}
    for test in tests[:2]:
        for item in test["input_series"]:
            series.setdefault(item["series"], item)
    agent = '{job="joulestat",instance="a:9464"}'
    for name, values in [
        ("up", "1x60"),
        ("joulestat_agent_ticks_total", "0+15x60"),
        ("joulestat_agent_tick_seconds_sum", "0+0.015x60"),
        ("joulestat_agent_tick_seconds_count", "0+15x60"),
        ('joulestat_agent_sensor_errors_total{sensor="rapl"}', "0x60"),
        ("process_cpu_seconds_total", "0+0.075x60"),
        ("process_resident_memory_bytes", "45000000x60"),
        ("joulestat_agent_store_up", "1x60"),
        ("joulestat_agent_store_buffered_rows", "0+10x60"),
        ("joulestat_agent_store_spooled_bytes", "0x60"),
        ('joulestat_agent_store_rows_total{outcome="written"}', "0+150x60"),
        ("joulestat_agent_store_flush_seconds_sum", "0+0.15x60"),
        ("joulestat_agent_store_flush_seconds_count", "0+1.5x60"),
        ('joulestat_agent_api_rejections_total{reason="busy"}', "0+1x60"),
    ]:
        labels = agent if "{" not in name else agent[:-1] + "," + name.split("{", 1)[1]
        series[name] = {"series": name.split("{")[0] + labels, "values": values}
    return list(series.values())


def _rule_name(where: str) -> str:
    return "q_" + re.sub(r"\W+", "_", where.split("'")[0]).strip("_")


@needs_promtool
def test_promtool_parses_every_query(tmp_path: Path) -> None:
    rules = [{"record": f"grafana:{_rule_name(where)}:{n}", "expr": expr}
             for n, (where, expr) in enumerate(all_queries())]
    (tmp_path / "queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in promtool(
        "check", "rules", "queries.yml", cwd=tmp_path)


def _panel_expr(uid: str, title: str) -> str:
    board = load(ROOT / "deploy" / "grafana" / "dashboards" / f"{uid}.json")
    (panel,) = [p for p in panels(board) if p["title"] == title]
    return substituted(board, panel["targets"][0]["expr"])


@needs_promtool
def test_every_query_returns_data_and_per_unit_panels_match_the_rules(tmp_path: Path) -> None:
    # absent(query) fires exactly when the query returns nothing (or is an error), so
    # "no alert" for each means every panel shows data over the fixture series.
    named = [(f"{_rule_name(where)}_{n}", where, expr)
             for n, (where, expr) in enumerate(all_queries())]
    rules = [{"alert": name, "expr": f"absent({expr})"} for name, _, expr in named]
    (tmp_path / "queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    # Joules per unit, as in rules_test.yml: g5 inference (110 + 200) W over (55 + 25)/s,
    # trn1 inference 16 W over 4/s, g5 steps 100 W over 1/s.
    per_unit = [
        ("Joules per inference", {"g5.xlarge": 3.875, "trn1.2xlarge": 4}),
        ("Joules per inference over the range", {"g5.xlarge": 3.875, "trn1.2xlarge": 4}),
        ("Joules per training step", {"g5.xlarge": 100}),
        ("Joules per training step over the range", {"g5.xlarge": 100}),
    ]
    expr_tests = [
        {"expr": _panel_expr("joulestat-energy-per-unit", title), "eval_time": "15m",
         "exp_samples": [{"labels": f'{{instance_type="{kind}"}}', "value": value}
                         for kind, value in expected.items()]}
        for title, expected in per_unit
    ]
    test = {
        "rule_files": ["queries.yml"],
        "evaluation_interval": "15s",
        "tests": [{
            "name": "every dashboard query over agent-shaped series",
            "interval": "15s",
            "input_series": _fixture_series(),
            "alert_rule_test": [{"eval_time": "15m", "alertname": name, "exp_alerts": []}
                                for name, _, _ in named],
            "promql_expr_test": expr_tests,
        }],
    }
    (tmp_path / "queries_test.yml").write_text(yaml.safe_dump(test, width=1000))
    assert "SUCCESS" in promtool("test", "rules", "queries_test.yml", cwd=tmp_path)
