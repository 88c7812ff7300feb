"""The JSON format: the report dict itself, as ``docs/report-schema.json`` describes it.

It is the one lossless format: ``joulestat import`` rebuilds the job from it in another
store. Floats are written with full precision (Python's shortest round-trip repr), so
an export and re-import gives the same figures, not figures rounded for display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from joulestat.core import jsonout


def render_json(report: Mapping[str, Any]) -> str:
    """One report as indented JSON text, ending in a newline."""
    return jsonout.dumps(report, indent=2, ensure_ascii=False) + "\n"


def render_json_many(reports: Sequence[Mapping[str, Any]]) -> str:
    """Several reports (``report --all``) as one JSON array, which import also reads."""
    return jsonout.dumps(list(reports), indent=2, ensure_ascii=False) + "\n"
