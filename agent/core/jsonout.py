"""JSON for people and programs: never NaN or Infinity.

Why: Python's json writes ``NaN`` and ``Infinity`` by default, which no strict JSON
parser reads (``jq``, JavaScript's ``JSON.parse``, Go). A figure that is not finite (a
per-unit energy over a count of 5e-324, an overflowed sum) is written as ``null``:
unknown, which is what it is. Every JSON the user sees goes through :func:`dumps`.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, in dicts, lists, tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """:func:`json.dumps` of :func:`finite` ``(value)``, refusing NaN all the same."""
    return json.dumps(finite(value), allow_nan=False, **options)
