"""Power over time as drawable lines, and as inline SVG for the HTML report.

The HTML report must open anywhere, offline, from one file: no JavaScript, no CDN.
So the chart is plain SVG markup written here: one step line per component (each bin
is drawn flat over the time it covers, which is what its average power means), axes
with round tick values, and a legend. The PDF draws the same :func:`lines` with
reportlab.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

from joulestat.core.tick import Component
from joulestat.reports.series import component_sort_key

COLORS = {Component.CPU: "#1f77b4", Component.DRAM: "#2ca02c", Component.ACCELERATOR: "#d62728",
          Component.NET: "#9467bd"}
OTHER_COLORS = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# (seconds per unit, label) for the time axis, chosen by the job's length
TIME_UNITS = ((3600.0 * 48, 86400.0, "days"), (3600.0 * 2, 3600.0, "hours"),
              (120.0, 60.0, "minutes"), (0.0, 1.0, "seconds"))


def color(component: str, index: int) -> str:
    return COLORS.get(component, OTHER_COLORS[index % len(OTHER_COLORS)])


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per axis unit and its name, for a job ``span_s`` long."""
    for threshold, seconds, name in TIME_UNITS:
        if span_s >= threshold:
            return seconds, name
    return 1.0, "seconds"


def lines(report: Mapping[str, Any]) -> tuple[dict[str, list[tuple[float, float]]], str]:
    """``{component: [(t, watts), ...]}`` as step lines, ``t`` in the returned unit since
    the job's start, components in report order."""
    series = report["power_series"]
    if not series:
        return {}, "seconds"
    start = min(p["t_start_s"] for p in series)
    span = max(p["t_end_s"] for p in series) - start
    per_unit, name = time_unit(span)
    found: dict[str, list[tuple[float, float]]] = {}
    for point in series:
        steps = found.setdefault(point["component"], [])
        steps.append(((point["t_start_s"] - start) / per_unit, point["power_w"]))
        steps.append(((point["t_end_s"] - start) / per_unit, point["power_w"]))
    ordered = {c: found[c] for c in sorted(found, key=component_sort_key)}
    return ordered, name


def axis_ticks(high: float, count: int = 5) -> tuple[float, list[float]]:
    """An axis that ends at ``high`` (the job's end, not the next round number: a 61 s
    job's axis stops at 61, not 80) and its round ticks up to there."""
    if high <= 0:
        return 1.0, [0.0, 1.0]
    return high, [t for t in nice_ticks(high, count) if t <= high * (1 + 1e-9)]


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (1, 2, 2.5 or 5 x 10^n steps)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def _tick_label(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.3g}"


def svg_chart(report: Mapping[str, Any], width: int = 760, height: int = 300) -> str:
    """The power chart as an ``<svg>`` element (empty-data message when no energy)."""
    data, unit = lines(report)
    if not data:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60" '
                'role="img"><text x="10" y="30">No energy recorded for this job yet.</text>'
                "</svg>")
    left, right, top, bottom = 64, 120, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    x_max, x_ticks = axis_ticks(max(t for pts in data.values() for t, _ in pts))
    y_ticks = nice_ticks(max(w for pts in data.values() for _, w in pts))
    y_max = y_ticks[-1] or 1.0

    def x(t: float) -> float:
        return left + plot_w * t / x_max

    def y(w: float) -> float:
        return top + plot_h * (1 - w / y_max)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" '
             'aria-label="Power over time by component" font-size="11" '
             'font-family="sans-serif">',
             "<title>Power over time by component (W)</title>"]
    for tick in y_ticks:
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick):.1f}" '
                     f'y2="{y(tick):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                     f"{_tick_label(tick)}</text>")
    for tick in x_ticks:
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top + plot_h}" '
                     f'y2="{top + plot_h + 4}" stroke="#333"/>')
        parts.append(f'<text x="{x(tick):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                     f"{_tick_label(tick)}</text>")
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
                 'fill="none" stroke="#333"/>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
                 f"time since start ({unit})</text>")
    parts.append(f'<text x="14" y="{top + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {top + plot_h / 2})">power (W)</text>')
    for index, (component, points) in enumerate(data.items()):
        shade = color(component, index)
        path = " ".join(f"{x(t):.1f},{y(w):.1f}" for t, w in points)
        parts.append(f'<polyline fill="none" stroke="{shade}" stroke-width="1.5" '
                     f'points="{path}"/>')
        legend_y = top + 14 + 18 * index
        parts.append(f'<line x1="{left + plot_w + 12}" x2="{left + plot_w + 32}" '
                     f'y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{shade}" '
                     'stroke-width="3"/>')
        parts.append(f'<text x="{left + plot_w + 38}" y="{legend_y}">'
                     f"{escape(component)}</text>")
    parts.append("</svg>")
    return "\n".join(parts)
