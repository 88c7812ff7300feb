"""Offline validation of Kubernetes objects for the deploy/ tests: the Kubernetes OpenAPI
schemas (kubernetes-validate, strict: no unknown fields) for the oldest and newest
versions we claim, and for the prometheus-operator kinds the fields we use of their CRDs.
Shared by tests/unit/project/test_kubernetes_manifests.py (the manifests as written)
and tests/system/test_kustomize.py (what the kustomizations render)."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

# The oldest Kubernetes still in the providers' extended support, and the newest known.
VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
_DURATION = (r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
             r"(([0-9]+)ms)?)$")
_META = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
    "additionalProperties": False}


def _cr(spec: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "additionalProperties": False, "properties": {
                "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": kind},
                "metadata": _META, "spec": spec}}


# The fields of monitoring.coreos.com/v1 that these manifests use (the operator's API
# reference), closed so a misspelt field fails as it would with a strict schema.
CRD_SCHEMAS = {
    "ServiceMonitor": _cr({
        "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
        "properties": {
            "jobLabel": {"type": "string"},
            "selector": {"type": "object", "additionalProperties": False, "properties": {
                "matchLabels": {"type": "object",
                                "additionalProperties": {"type": "string"}}}},
            "endpoints": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["port"], "additionalProperties": False,
                "properties": {"port": {"type": "string"}, "path": {"type": "string"},
                               "interval": {"type": "string", "pattern": _DURATION}}}}}},
        "ServiceMonitor"),
    "PrometheusRule": _cr({
        "type": "object", "required": ["groups"], "additionalProperties": False,
        "properties": {"groups": {"type": "array", "items": {
            "type": "object", "required": ["name", "rules"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "interval": {"type": "string", "pattern": _DURATION},
                "rules": {"type": "array", "items": {
                    "type": "object", "required": ["expr"], "additionalProperties": False,
                    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                    "properties": {
                        "record": {"type": "string"}, "alert": {"type": "string"},
                        "expr": {"type": "string"},
                        "for": {"type": "string", "pattern": _DURATION},
                        "labels": {"type": "object",
                                   "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object",
                                        "additionalProperties": {"type": "string"}}}}}}}}}},
        "PrometheusRule"),
}


def validate(obj: dict[str, Any], where: str) -> None:
    """Fails the test naming ``where``, the kind, the version and the path of what is
    invalid."""
    if obj["kind"] in CRD_SCHEMAS:
        jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
        return
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where}: {obj['kind']} invalid for {version} at {path}: {exc.message}")
