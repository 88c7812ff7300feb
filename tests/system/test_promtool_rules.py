"""deploy/prometheus through promtool: the config compose.yaml mounts and the recording
rules and alerts it loads check clean, and the rules' unit tests (rules_test.yml) pass.
(What needs no promtool: tests/unit/project/test_prometheus_rules.py.)"""

from __future__ import annotations

from tests.helpers.promql_check import ROOT, needs_promtool, promtool

PROMETHEUS = ROOT / "deploy" / "prometheus"


@needs_promtool
def test_promtool_checks_the_rules_and_the_compose_config() -> None:
    assert "SUCCESS" in promtool("check", "rules", "rules.yml", cwd=PROMETHEUS)
    # check config also loads the rule_files it names, relative to the config.
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml", cwd=PROMETHEUS)


@needs_promtool
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    assert "SUCCESS" in promtool("test", "rules", "rules_test.yml", cwd=PROMETHEUS)
