"""CSV cells that a spreadsheet reads as text, never as a formula.

Job names, labels, node names and units of work come from users. A cell that begins
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is evaluated as a formula by
Excel, LibreOffice and Google Sheets (``=HYPERLINK("http://evil", "x")``,
``=cmd|'/C calc'!A0``): OWASP's CSV injection rule
(https://owasp.org/www-community/attacks/CSV_Injection) is to prefix such a cell with a
single quote, which the spreadsheet shows as text. Only text columns go through
:func:`text_cell`; numeric columns (``-1.5`` is a number) are written as they are, so
scripts still read numbers. Every CSV writer of joulestat (``report --format csv``, the
dashboard's downloads) uses this one function, so the rule is the same everywhere.
"""

from __future__ import annotations

__all__ = ["FORMULA_STARTS", "text_cell"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text_cell(value: str) -> str:
    """``value`` with a leading ``'`` when a spreadsheet would read it as a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value
