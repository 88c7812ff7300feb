"""The PDF format: the HTML report's content, for people who file PDFs.

Built with reportlab (BSD, pure Python, maintained since 2000) rather than by printing
the HTML through a browser engine: no headless browser to install, and the chart is a
native vector drawing (:class:`reportlab.graphics.charts.lineplots.LinePlot` over the
same :func:`joulestat.reports.chart.lines`, its time axis ending at the job's end).
Content and order follow :mod:`joulestat.reports.tables`, as the HTML does, under the same
headline. Landscape A4; every table spans the text width, so the provenance table's
long texts wrap in readable columns and line up with the others.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from html import escape
from typing import Any

from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.charts.lineplots import LinePlot
from reportlab.graphics.shapes import Drawing, String
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import mm
from reportlab.platypus import KeepTogether, Paragraph, SimpleDocTemplate, Spacer, TableStyle
from reportlab.platypus import Table as PdfTable

from joulestat.reports import tables
from joulestat.reports.chart import axis_ticks, color, lines, nice_ticks
from joulestat.reports.summary import NOTE, Summary, headline, summary_table
from joulestat.reports.summary import title as summary_title

PAGE = landscape(A4)
MARGIN = 15 * mm


def chart_drawing(report: Mapping[str, Any], width: float = 240 * mm,
                  height: float = 62 * mm) -> Drawing:
    """Power over time by component, as a reportlab drawing."""
    data, unit = lines(report)
    drawing = Drawing(width, height)
    if not data:
        drawing.add(String(10, height / 2, "No energy recorded for this job yet."))
        return drawing
    plot = LinePlot()
    plot.x, plot.y = 50, 35
    plot.width, plot.height = width - 170, height - 50
    plot.data = list(data.values())
    x_max, x_ticks = axis_ticks(max(t for pts in data.values() for t, _ in pts))
    y_ticks = nice_ticks(max(w for pts in data.values() for _, w in pts))
    plot.xValueAxis.valueMin, plot.xValueAxis.valueMax = 0, x_max
    plot.xValueAxis.valueSteps = x_ticks
    plot.yValueAxis.valueMin, plot.yValueAxis.valueMax = 0, y_ticks[-1]
    plot.yValueAxis.valueSteps = y_ticks
    plot.xValueAxis.labelTextFormat = "%g"
    plot.yValueAxis.labelTextFormat = "%g"
    legend = Legend()
    legend.x, legend.y = width - 100, height - 20
    legend.colorNamePairs = []
    for index, component in enumerate(data):
        shade = colors.HexColor(color(component, index))
        plot.lines[index].strokeColor = shade
        plot.lines[index].strokeWidth = 1.2
        legend.colorNamePairs.append((shade, component))
    drawing.add(plot)
    drawing.add(legend)
    drawing.add(String(plot.x + plot.width / 2, 5, f"time since start ({unit})",
                       textAnchor="middle", fontSize=8))
    drawing.add(String(5, plot.y + plot.height + 8, "power (W)", fontSize=8))
    return drawing


def _pdf_table(table: tables.Table, cell_style: ParagraphStyle, header: bool = True
               ) -> PdfTable:
    def cell(text: str) -> Paragraph:
        return Paragraph(escape(text), cell_style)

    rows = [[cell(h) for h in table.headers]] if header else []
    rows += [[cell(c) for c in row] for row in table.rows]
    # Every table spans the text width, so they line up one under the other.
    weights = table.weights or (1.0,) * len(table.headers)
    unit = (PAGE[0] - 2 * MARGIN) / sum(weights)
    widths = [w * unit for w in weights]
    result = PdfTable(rows, colWidths=widths, repeatRows=1 if header else 0, hAlign="LEFT")
    style = [("GRID", (0, 0), (-1, -1), 0.4, colors.grey),
             ("VALIGN", (0, 0), (-1, -1), "TOP"),
             ("TOPPADDING", (0, 0), (-1, -1), 1.5), ("BOTTOMPADDING", (0, 0), (-1, -1), 1.5)]
    if header:
        style.append(("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#f0f0f0")))
    result.setStyle(TableStyle(style))
    return result


def render_pdf(report: Mapping[str, Any]) -> bytes:
    """The PDF document's bytes."""
    styles = getSampleStyleSheet()
    cell_style = ParagraphStyle("cell", parent=styles["BodyText"], fontSize=7.5, leading=9)
    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer, pagesize=PAGE, leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN,
        bottomMargin=MARGIN, title=tables.title(report), author="joulestat",
        subject="energy, carbon and cost of one job")
    story: list[Any] = [
        Paragraph(escape(tables.title(report)), styles["Title"]),
        Paragraph(f"<b>{escape(report['headline'])}</b>", styles["BodyText"]),
        Paragraph(escape(f"Generated {report['generated_at']} by joulestat "
                         f"{report['agent_version']}. Schema: docs/report-schema.json "
                         f"(version {report['schema_version']})."), styles["Italic"]),
        _pdf_table(tables.summary(report), cell_style, header=False),
        KeepTogether([Paragraph("Power over time", styles["Heading2"]),
                      chart_drawing(report)]),
    ]
    for table in tables.all_tables(report):  # a title never ends a page alone
        story.append(KeepTogether([Paragraph(escape(table.title), styles["Heading2"]),
                                   _pdf_table(table, cell_style)]))
    # Notes and method, one paragraph per item, hanging-indented under its bullet, in the
    # width of the tables (a preformatted block kept the source's line breaks instead).
    method = ParagraphStyle("method", parent=styles["BodyText"], fontSize=8, leading=10,
                            leftIndent=10, bulletIndent=0)
    story.append(Paragraph("Notes: unknowns and estimated factors", styles["Heading2"]))
    notes = report["notes"] or ["Every figure is measured and known."]
    story += [Paragraph(escape(note), method, bulletText="\u2022") for note in notes]
    story += [Paragraph("Methodology", styles["Heading2"]),
              *(Paragraph(escape(text), method, bulletText="\u2022")
                for text in tables.methodology_paragraphs(report["methodology"])),
              Spacer(1, 4 * mm)]
    document.build(story)
    return buffer.getvalue()


def render_summary_pdf(summary: Summary) -> bytes:
    """A summary of many jobs (:mod:`joulestat.reports.summary`) as a PDF page."""
    styles = getSampleStyleSheet()
    cell_style = ParagraphStyle("cell", parent=styles["BodyText"], fontSize=7.5, leading=9)
    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer, pagesize=PAGE, leftMargin=MARGIN, rightMargin=MARGIN, topMargin=MARGIN,
        bottomMargin=MARGIN, title=summary_title(summary), author="joulestat",
        subject="energy, carbon and cost of many jobs")
    story: list[Any] = [
        Paragraph(escape(summary_title(summary)), styles["Title"]),
        Paragraph(f"<b>{escape(headline(summary))}</b>", styles["BodyText"]),
        Paragraph(escape(f"{summary.period.capitalize()}; generated "
                         f"{summary.generated_at} by joulestat."), styles["Italic"]),
        Spacer(1, 3 * mm),
        _pdf_table(summary_table(summary), cell_style),
        Spacer(1, 3 * mm),
        Paragraph(escape(NOTE), styles["Italic"]),
    ]
    document.build(story)
    return buffer.getvalue()
