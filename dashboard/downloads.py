"""A job's downloads: joulestat's own report (JSON, CSV, HTML, PDF) from ``joulestat.reports``.

The dashboard does not lay out reports of its own: the report a user downloads here is
byte for byte what ``joulestat report JOB --format …`` writes, built by
:func:`joulestat.reports.model.build_report` with the default carbon settings. Files are
rendered only when their button is clicked (Streamlit's deferred ``data``), since a PDF
takes reportlab a moment. Where ``joulestat.reports`` is not installed, :func:`available`
says so and the page offers the JSON of what it shows instead.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from functools import partial

from sqlalchemy.engine import Engine

# format -> (button label, file extension, MIME type)
FORMATS = {
    "json": ("Report (JSON)", "json", "application/json"),
    "csv": ("Report (CSV)", "csv", "text/csv"),
    "html": ("Report (HTML)", "html", "text/html"),
    "pdf": ("Report (PDF)", "pdf", "application/pdf"),
}


def available() -> bool:
    """Whether ``joulestat.reports`` (and so every report format) is installed."""
    return importlib.util.find_spec("joulestat.reports") is not None


def render(engine: Engine, job_id: str, kind: str, now_s: float | None = None) -> str | bytes:
    """The report of ``job_id`` as ``kind`` (json, csv, html or pdf)."""
    from joulestat.reports.model import build_report

    report = build_report(engine, job_id, now_s=time.time() if now_s is None else now_s)
    if kind == "json":
        from joulestat.reports.json_report import render_json

        return render_json(report)
    if kind == "csv":
        from joulestat.reports.csv_report import render_csv

        return render_csv([report])
    if kind == "html":
        from joulestat.reports.html_report import render_html

        return render_html(report)
    if kind == "pdf":
        from joulestat.reports.pdf_report import render_pdf

        return render_pdf(report)
    raise ValueError(f"unknown report format {kind!r}; expected one of {', '.join(FORMATS)}")


def deferred(engine: Engine, job_id: str, kind: str) -> Callable[[], str | bytes]:
    """What a download button calls when clicked (the report as of the click)."""
    return partial(render, engine, job_id, kind)
