"""deploy/prometheus: the recording rules and alerts query only metrics that exist, every
alert has a severity and a summary and is exercised by the rules' unit tests
(rules_test.yml), and the PrometheusRule for Kubernetes is generated from them. promtool's
own checks of the config, the rules and their unit tests are in
tests/system/test_promtool_rules.py."""

from __future__ import annotations

import importlib.util

import yaml

from tests.helpers.promql_check import ROOT, RULES, unknown_names

PROMETHEUS = ROOT / "deploy" / "prometheus"
OPERATOR = ROOT / "deploy" / "kubernetes" / "prometheus-operator"


def test_rules_query_only_metrics_that_exist_or_are_listed_as_pending() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            assert not unknown_names(rule["expr"]), f"{name}: {unknown_names(rule['expr'])}"


def test_every_alert_has_a_severity_and_a_summary() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    assert {a["alert"] for a in alerts} >= {
        "JoulestatAgentDown", "JoulestatSensorErrors", "JoulestatStoreFallingBehind",
        "JoulestatStoreDown"}
    for alert in alerts:
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]


def test_every_alert_is_exercised_by_rules_test() -> None:
    tests = yaml.safe_load((PROMETHEUS / "rules_test.yml").read_text())["tests"]
    tested = {
        case["alertname"]
        for test in tests for case in test.get("alert_rule_test", []) if case["exp_alerts"]
    }
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    assert alerts == tested, f"alerts never seen firing in rules_test.yml: {alerts - tested}"


def test_the_prometheusrule_is_generated_from_rules_yml() -> None:
    spec = importlib.util.spec_from_file_location("render_rules", OPERATOR / "render_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    on_disk = (OPERATOR / "prometheusrule.yaml").read_text()
    assert on_disk == module.render(), (
        "prometheusrule.yaml is stale: python deploy/kubernetes/prometheus-operator/"
        "render_rules.py")
    assert yaml.safe_load(on_disk)["spec"]["groups"] == yaml.safe_load(RULES.read_text())[
        "groups"]
