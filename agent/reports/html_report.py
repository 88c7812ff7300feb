"""The HTML format: ONE self-contained file to mail, attach or archive.

Inline CSS, the chart as inline SVG (:mod:`joulestat.reports.chart`), the tables of
:mod:`joulestat.reports.tables`, provenance, notes and the methodology; no script, no
external stylesheet, font or image, so it renders the same offline in any browser in
ten years. Every text from the store (names, labels, regions) is HTML-escaped: a job
name is user input.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from joulestat.reports import tables
from joulestat.reports.chart import svg_chart
from joulestat.reports.summary import NOTE, Summary, headline, summary_table
from joulestat.reports.summary import title as summary_title

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; width: 100%; }
table.fixed { table-layout: fixed; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
table.fixed td, table.fixed th { overflow-wrap: anywhere; }
th { background: #f3f3f3; } td.num { text-align: right; white-space: nowrap; }
.meta { color: #666; font-size: 0.9em; } pre { white-space: pre-wrap; background: #f8f8f8;
       padding: 0.8em; border: 1px solid #eee; font-size: 0.85em; }
.notes li { color: #8a4b00; } .method li { font-size: 0.9em; margin-bottom: 0.3em; }
.headline { font-size: 1.1em; font-weight: 600; background: #f4f8fb; padding: 0.6em 0.8em;
            border-left: 4px solid #4C78A8; }
"""


def _table(table: tables.Table, header: bool = True) -> str:
    """One table across the page's width; a table with column weights (provenance's long
    texts) keeps them, as the PDF does, instead of squeezing its short columns."""
    rows = []
    if header:
        rows.append("<tr>" + "".join(f"<th>{escape(h)}</th>" for h in table.headers) + "</tr>")
    for row in table.rows:
        cells = []
        for index, cell in enumerate(row):
            tag = "th" if not header and index == 0 else "td"
            cells.append(f"<{tag}>{escape(cell)}</{tag}>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    columns = ""
    if table.weights is not None:
        total = sum(table.weights)
        columns = "<colgroup>" + "".join(f'<col style="width:{100 * w / total:.1f}%">'
                                         for w in table.weights) + "</colgroup>\n"
    layout = ' class="fixed"' if table.weights is not None else ""
    return (f"<h2>{escape(table.title)}</h2>\n<table{layout}>\n{columns}"
            + "\n".join(rows) + "\n</table>")


def render_html(report: Mapping[str, Any]) -> str:
    """The whole page as text."""
    notes = "".join(f"<li>{escape(n)}</li>" for n in report["notes"])
    body = [
        f"<h1>{escape(tables.title(report))}</h1>",
        f'<p class="headline">{escape(report["headline"])}</p>',
        f'<p class="meta">Generated {escape(report["generated_at"])} by joulestat '
        f'{escape(report["agent_version"])}. Schema: docs/report-schema.json '
        f'(version {report["schema_version"]}).</p>',
        _table(tables.summary(report), header=False),
        "<h2>Power over time</h2>",
        svg_chart(report),
        *(_table(t) for t in tables.all_tables(report)),
        "<h2>Notes: unknowns and estimated factors</h2>",
        f'<ul class="notes">{notes}</ul>' if notes
        else "<p>Every figure is measured and known.</p>",
        "<h2>Methodology</h2>",
        '<ul class="method">' + "".join(
            f"<li>{escape(text)}</li>"
            for text in tables.methodology_paragraphs(report["methodology"])) + "</ul>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(tables.title(report))}</title>\n<style>{CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def render_summary_html(summary: Summary) -> str:
    """A summary of many jobs (:mod:`joulestat.reports.summary`) as one page, in the
    job report's style; every group name is escaped (a label value is user input)."""
    body = [
        f"<h1>{escape(summary_title(summary))}</h1>",
        f'<p class="headline">{escape(headline(summary))}</p>',
        f'<p class="meta">{escape(summary.period.capitalize())}; generated '
        f"{escape(summary.generated_at)} by joulestat.</p>",
        _table(summary_table(summary)),
        f'<p class="meta">{escape(NOTE)}</p>',
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{escape(summary_title(summary))}</title>\n<style>{CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
