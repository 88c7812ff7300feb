"""Text tables for a terminal: columns as wide as their widest cell, measured in the
columns a terminal gives each character, not in code points.

Why: ``joulestat jobs`` padded with ``str.ljust`` to fixed widths, so a 47-character
CodeCarbon id pushed the rest of its row out of line, and a name in CJK (each character
two columns wide) or with combining accents (zero columns) did the same however wide the
column. Here a cell's width is the sum of its characters' widths: East Asian wide and
fullwidth characters count 2, combining marks, enclosing marks and the zero-width
joiners (U+200C, U+200D) 0, everything else 1. Emoji sequences joined by U+200D are one
glyph on most terminals but count as their parts: names rarely hold them, and a row
too wide is all that can go wrong.

A cell never holds a character that would move the cursor or reorder the line: control
and format characters (Unicode Cc, Cf but the joiners, Zl, Zp) are shown as
their code point (``\\u202e``). Stored names and labels refuse them already
(:func:`joulestat.core.validation.control_character`); a store written before
that rule, or by hand, must not break the table either.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

_JOINERS = frozenset("\u200c\u200d")
_ESCAPED = frozenset(("Cc", "Cf", "Zl", "Zp"))


def cell(text: object) -> str:
    """``text`` as a table cell: control and format characters escaped (module doc)."""
    value = str(text)
    if value.isprintable() and value.isascii():
        return value
    return "".join(f"\\u{ord(ch):04x}" if (unicodedata.category(ch) in _ESCAPED
                                            and ch not in _JOINERS) else ch
                   for ch in value)


def char_width(ch: str) -> int:
    """Terminal columns of one character: 0, 1 or 2 (module doc)."""
    if ch in _JOINERS or unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    """Terminal columns of ``text`` (a cell: no control characters)."""
    if text.isascii():
        return len(text)
    return sum(char_width(ch) for ch in text)


def pad(text: str, columns: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``columns`` terminal columns (on the left when
    ``right``-aligned)."""
    fill = " " * max(0, columns - width(text))
    return fill + text if right else text + fill


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          right: Sequence[int] = (), gap: str = "  ") -> list[str]:
    """The lines of a table: a header line, then one line per row. Each column is as
    wide as its widest cell (header included); columns whose index is in ``right`` are
    right-aligned; the last column is not padded, and no line ends in spaces."""
    cells = [[cell(value) for value in row] for row in [list(headers), *rows]]
    widths = [max(width(row[i]) for row in cells) for i in range(len(headers))]
    last = len(headers) - 1
    return [gap.join(pad(text, widths[i], i in right) if i < last or i in right else text
                     for i, text in enumerate(row)).rstrip()
            for row in cells]
