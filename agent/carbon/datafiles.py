"""Reading joulestat's own CSV tables (agent/data/*.csv), which start with comment lines.

The tables explain their columns and sources in ``#`` comment lines at the top, where a
reader of the file will look; the csv module has no comment support, so those lines are
dropped here before parsing. Each table is validated by its loader (regions, catalog).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def data_path(name: str) -> Path:
    """A file in agent/data (shipped as package data)."""
    return Path(__file__).resolve().parent.parent / "data" / name


def read_commented_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of ``path`` as dicts (values stripped), after dropping ``#`` lines.

    Raises ValueError naming the file when a required column is missing.
    """
    text = path.read_text(encoding="utf-8")
    body = "".join(line for line in text.splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))
    reader = csv.DictReader(io.StringIO(body))
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    return [{k: (v or "").strip() for k, v in row.items() if k is not None} for row in reader]


def load_table(path: Path | None, bundled: str, required: tuple[str, ...],
               parse: Callable[[list[dict[str, str]], str], T]) -> T:
    """The table at ``path`` (default: the bundled file ``bundled``) through its loader's
    ``parse``, which names the file in its errors."""
    path = path if path is not None else data_path(bundled)
    return parse(read_commented_csv(path, required), str(path))
