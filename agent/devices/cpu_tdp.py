"""Look a CPU model name up in CodeCarbon's TDP table, conservatively.

The table (``cpu_power.csv``, header ``Name,TDP``, about 4,900 rows) is CodeCarbon 3.3.2's
``codecarbon/data/hardware/cpu_power.csv``, copied unchanged under its MIT licence into
joulestat's package (``joulestat/data/codecarbon/hardware/``; the licence and a README
naming the source sit in ``joulestat/data/codecarbon/``) and read through
:mod:`importlib.resources`. codecarbon is not needed: importing it would pull in pandas
and the tracker (tens of MiB), and the agent must stay under 50 MiB RSS.

Matching is exact first, then on a normalised key that drops only decoration that never
distinguishes two CPUs: ``(R)``, ``(TM)``, the words CPU / Processor, the vendor words
Intel / AMD, ``@ 2.50GHz`` clock suffixes, ``N-Core``, ``Nth Gen`` and ``with Radeon
Graphics``. There is no substring or fuzzy matching: a wrong TDP silently scales every
estimate, which is worse than no TDP (the caller then uses the per-vCPU model). A key
without a digit (``Intel(R) Xeon(R) Processor``, as KVM guests often report) names a
family, not a part, and never matches; a key shared by rows with different TDPs is
ambiguous and does not match either.

The file is streamed once per lookup and only the matching rows are kept.
"""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

from joulestat.core.package_data import missing_data_advice

log = logging.getLogger(__name__)

# Inside the joulestat package: as under codecarbon/data, below data/codecarbon.
TABLE_PARTS = ("data", "codecarbon", "hardware", "cpu_power.csv")

_TRADEMARK = re.compile(r"\((?:r|tm|c)\)|[®™©]")
_CLOCK_SUFFIX = re.compile(r"@.*$")
_RADEON_SUFFIX = re.compile(r"\bwith radeon\b.*$")
_GENERATION = re.compile(r"\b\d+(?:st|nd|rd|th) gen\b")
_CORE_COUNT = re.compile(r"\b\d+-core\b")
_DROPPED_WORDS = frozenset({"intel", "amd", "cpu", "processor"})


@dataclass(frozen=True, slots=True)
class TdpMatch:
    """A TDP found in the table and the row name it came from (shown to users as evidence)."""

    tdp_w: float
    matched_name: str
    exact: bool


def bundled_table() -> Traversable:
    """The copy of CodeCarbon's CSV in joulestat's package data (see module doc)."""
    path: Traversable = files("joulestat")
    for part in TABLE_PARTS:
        path = path / part
    return path


def normalise_cpu_name(name: str) -> str:
    """Lower-case key with trademark marks, clock, vendor and filler words removed."""
    text = name.lower()
    text = _TRADEMARK.sub(" ", text)
    text = _CLOCK_SUFFIX.sub(" ", text)
    text = _RADEON_SUFFIX.sub(" ", text)
    text = _GENERATION.sub(" ", text)
    text = _CORE_COUNT.sub(" ", text)
    # str.split() also splits on the non-breaking spaces some table rows contain.
    return " ".join(word for word in text.split() if word not in _DROPPED_WORDS)


def _identifies_a_part(key: str) -> bool:
    return any(ch.isdigit() for ch in key) and any(ch.isalpha() for ch in key)


def lookup_tdp(cpu_name: str, table_path: Traversable | None = None) -> TdpMatch | None:
    """The table's TDP for ``cpu_name`` (exact row name first, then normalised), or None.

    ``table_path``: another table of the same shape (default: :func:`bundled_table`).
    """
    wanted = cpu_name.strip()
    if not wanted or wanted.lower() == "unknown":
        return None
    path = table_path if table_path is not None else bundled_table()
    if not path.is_file():
        log.warning("%s not found (%s); no TDP lookup possible", path, missing_data_advice())
        return None
    key = normalise_cpu_name(wanted)
    usable_key = _identifies_a_part(key)
    candidates: list[tuple[str, float]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:2]] != ["Name", "TDP"]:
            raise ValueError(f"{path}: expected header 'Name,TDP', got {header!r}")
        for row in reader:
            if len(row) < 2:
                continue
            name = row[0].strip()
            exact = name == wanted
            if not exact and not (usable_key and normalise_cpu_name(name) == key):
                continue
            try:
                tdp_w = float(row[1])
            except ValueError:
                log.debug("%s: row %r has an unreadable TDP %r; skipped", path, name, row[1])
                continue
            if tdp_w <= 0:
                continue
            if exact:
                return TdpMatch(tdp_w=tdp_w, matched_name=name, exact=True)
            candidates.append((name, tdp_w))
    if not candidates:
        return None
    tdps = {tdp for _, tdp in candidates}
    if len(tdps) > 1:
        log.info(
            "CPU %r matches table rows with different TDPs %s; not using any",
            wanted, sorted(candidates),
        )
        return None
    name, tdp_w = candidates[0]
    return TdpMatch(tdp_w=tdp_w, matched_name=name, exact=False)
