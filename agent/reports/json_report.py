"""The JSON format: the report dict itself, as ``docs/report-schema.json`` describes it.

It is the one lossless format: ``joulestat import`` rebuilds the job from it in another
store. Floats are written with full precision (Python's shortest round-trip repr), so
an export and re-import gives the same figures, not figures rounded for display.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def render_json(report: Mapping[str, Any]) -> str:
    """One report as indented JSON text, ending in a newline."""
    return json.dumps(report, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def render_json_many(reports: Sequence[Mapping[str, Any]]) -> str:
    """Several reports (``report --all``) as one JSON array, which import also reads."""
    return json.dumps(list(reports), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
