"""Numbers as the pages show them: :mod:`joulestat.core.units`, the formatter the CLI and the
reports use too, so a figure reads "2.05 mJ" on a page, in ``joulestat run``'s summary
and in the HTML report alike. Only what is the dashboard's own lives here: the viewer's
clock. Deltas and ratios ("−92 %", "×6.3") are :mod:`joulestat.reports.compare.words`', as
``joulestat compare`` writes them. How a row's energy was obtained ("estimated (model:
ccf-vcpu)") is :func:`joulestat.reports.provenance.energy_is`, in the column
:data:`ENERGY_IS` that every table puts right after the row's name, so an estimate is
never read as the equal of the measured row beside it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime, tzinfo
from typing import Any

import pandas as pd

from joulestat.carbon.units import J_PER_KWH
from joulestat.core import units
from joulestat.reports.compare import words as compare_words
from joulestat.reports.provenance import energy_is

__all__ = ["ENERGY_IS", "J_PER_KWH", "UNKNOWN", "WORD_JOINER", "code", "count", "duration",
           "energy", "energy_is", "kwh", "local_time", "mass", "md", "plural", "power", "share",
           "styled", "usd"]

UNKNOWN = units.UNKNOWN
ENERGY_IS = "energy is"  # the provenance column, right after a row's name
energy = units.energy
kwh = units.energy_wh  # electricity-bill units: mWh, Wh, kWh, MWh
power = units.power
mass = units.mass
usd = units.usd
count = units.count
share = units.share
duration = units.duration
# One spelling of units and deltas everywhere: the comparison's (joulestat compare).
plural = compare_words.plural


# Every ASCII punctuation mark may be backslash-escaped in CommonMark, and an escaped
# one is always literal. These are the ones that open something within a line: a link
# or image (``[``; ``!`` and ``(`` mean nothing without it), emphasis (``*``; ``_`` only
# at a word's edge, see _UNDERSCORE), code, HTML and ``<url>`` links (``<``), an
# entity (``&``), a strikethrough, ``$`` maths, a Streamlit directive (_DIRECTIVE).
# The rest (``-``, ``.``, ``#`` ...) matter only where a line starts:
# _BLOCK_START. Fewer escapes keep the Markdown source readable (``nvml_energy``).
_MARKDOWN_ESCAPES = {ord(c): "\\" + c for c in "\\`*[]<>~$&"}
_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# Streamlit's directives: ``:red[text]``, ``:red-background[...]``, ``:material/bolt:``
# (escaping the ``[`` alone leaves ``:red`` swallowed); other colons stay as they are.
_DIRECTIVE = re.compile(r":(?=[A-Za-z-]+\\\[|material/)")
_BLOCK_START = re.compile(r"^(?:([#>+=-])|(\d+)([.)]))")
_LINE_BREAKS = {ord("\n"): " ", ord("\r"): " "}
# GitHub-flavoured Markdown also links bare ``http://``, ``www.`` and ``name@host`` text,
# found in the text after escapes are undone, so no escape stops it. An invisible word
# joiner (U+2060) inside each pattern does: the text reads the same, and links nowhere.
WORD_JOINER = "\u2060"
_AUTOLINKS = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)


def md(text: object) -> str:
    """``text`` (a job name, a label, a node name: anything a user typed) for a Streamlit
    call that renders Markdown (``st.subheader``, ``st.caption``, ``st.info``, metric and
    radio labels ...), escaped so it shows as the characters typed. Streamlit renders
    Markdown in those calls, so ``[x](http://evil)`` in a job name would otherwise be a
    live link and ``![x](http://evil/x.png)`` a remote image fetched by every viewer.
    Line breaks become spaces and a leading ``#``, ``-``, ``1.`` ... is escaped, so a name
    cannot open a block (a heading, a list); bare URLs and e-mail addresses get an
    invisible :data:`WORD_JOINER` so they are not auto-linked."""
    joined = _AUTOLINKS.sub(WORD_JOINER, str(text).translate(_LINE_BREAKS))
    escaped = _UNDERSCORE.sub(r"\\_", joined.translate(_MARKDOWN_ESCAPES))
    escaped = _DIRECTIVE.sub(r"\\:", escaped)
    return _BLOCK_START.sub(lambda m: "\\" + m[1] if m[1] else f"{m[2]}\\{m[3]}", escaped)


def code(text: object) -> str:
    """``text`` as an inline code span: literal by construction (CommonMark renders no
    Markdown or HTML inside one), unless ``text`` holds a backtick, which could close
    the span; then it is escaped as :func:`md` does instead."""
    shown = str(text).translate(_LINE_BREAKS)
    return md(shown) if "`" in shown else f"`{shown}`"


def local_time(epoch_s: float | None, tz: tzinfo) -> str:
    if epoch_s is None:
        return UNKNOWN
    return datetime.fromtimestamp(epoch_s, tz).strftime("%Y-%m-%d %H:%M:%S")


def styled(frame: pd.DataFrame, formats: Mapping[str, Callable[[Any], str]]) -> Any:
    """``frame`` for ``st.dataframe`` with numbers shown through :mod:`joulestat.core.units` but
    kept as numbers underneath, so columns still sort by value (a pandas Styler: cheap
    for the dozens of rows of the Overview, Compare and Load curve tables; the Jobs
    table, thousands of rows, carries text columns instead)."""
    known = {column: f for column, f in formats.items() if column in frame.columns}
    return frame.style.format(known, na_rep=UNKNOWN)


def seconds(value: Any) -> str:
    """A latency: ``120 ms``, ``2.05 s``; unknown for a missing one."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return UNKNOWN
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
