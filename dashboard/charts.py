"""Interactive charts (Altair, which Streamlit ships; plotly is not a dependency).

Every chart names its unit on the axis (scaled with :func:`joulestat.core.units.scale_for`, so a
millijoule chart says mJ), keeps one colour per component on every page (cpu is always
blue, accelerator always green), shows its values in the tooltip as the tables print them (a
``text`` column made by :mod:`joulestat.core.units`), and puts legends right of the plot with no
label limit, so a long source name (``import:joulestat/model:ccf-vcpu``) is never cut. Time
axes take naive wall-clock times already in the viewer's timezone (see
:func:`joulestat.dashboard.ui.to_local`); Vega-Lite reads a naive time as the browser's local
time and draws it unchanged, and the browser's zone is the one ``st.context.timezone``
reported, so axes, tooltips and tables all show the viewer's clock.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from joulestat.core.tick import Component

COMPONENT_COLORS = {Component.CPU: "#4C78A8", Component.DRAM: "#F58518",
                    Component.ACCELERATOR: "#54A24B", Component.NET: "#B279A2",
                    Component.PLATFORM: "#9D755D", Component.OTHER: "#BAB0AC"}


def component_scale(components: list[str]) -> alt.Scale:
    known = [c for c in COMPONENT_COLORS if c in components]
    extra = sorted(set(components) - set(known))
    palette = ["#E45756", "#EECA3B", "#FF9DA6", "#79706E"]
    return alt.Scale(domain=known + extra,
                     range=[COMPONENT_COLORS[c] for c in known]
                     + [palette[i % len(palette)] for i in range(len(extra))])


# Right of the plot, one entry a line, never truncated: Streamlit fits the whole chart
# to its box, so a legend below steals the plot's height (bars lost their labels) and a
# multi-column one ran past the box's edge.
LEGEND = alt.Legend(orient="right", labelLimit=0, titleLimit=0)


def _value_tip(value: str, title: str, text: str | None) -> alt.Tooltip:
    return (alt.Tooltip(f"{text}:N", title=title) if text is not None
            else alt.Tooltip(f"{value}:Q", title=title, format=",.3~g"))


def stacked_bars(frame: pd.DataFrame, *, category: str, value: str, stack: str,
                 value_title: str, category_title: str, height: int = 260,
                 text: str | None = None) -> alt.Chart:
    """Horizontal bars of ``value`` per ``category``, stacked by ``stack`` (components)."""
    scale = component_scale(sorted(frame[stack].unique())) if stack == "component" else (
        alt.Scale())
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y(f"{category}:N", title=category_title, sort="-x",
                axis=alt.Axis(labelLimit=0)),
        x=alt.X(f"{value}:Q", title=value_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack, scale=scale, legend=LEGEND),
        tooltip=[alt.Tooltip(f"{category}:N", title=category_title),
                 alt.Tooltip(f"{stack}:N"), _value_tip(value, value_title, text)],
    ).properties(height=height)


def time_format(span_s: float) -> str:
    """The clock format of a time axis ``span_s`` long: seconds for a short job, whose
    axis would otherwise repeat one minute ("19:38 19:38 19:38")."""
    return "%H:%M:%S" if span_s < 15 * 60 else "%H:%M" if span_s < 2 * 86400 else "%m-%d %H:%M"


def stacked_area(frame: pd.DataFrame, *, time: str, value: str, stack: str,
                 value_title: str, time_title: str, height: int = 280,
                 text: str | None = None, axis_format: str = "%H:%M") -> alt.Chart:
    """``value`` over time stacked by ``stack``; zoom and pan with the mouse."""
    scale = component_scale(sorted(frame[stack].unique())) if stack == "component" else (
        alt.Scale())
    return alt.Chart(frame).mark_area(interpolate="step-before", opacity=0.85).encode(
        x=alt.X(f"{time}:T", title=time_title,
                axis=alt.Axis(format=axis_format, labelOverlap=True)),
        y=alt.Y(f"{value}:Q", title=value_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack, scale=scale, legend=LEGEND),
        tooltip=[alt.Tooltip("when:N", title="time"), alt.Tooltip(f"{stack}:N"),
                 _value_tip(value, value_title, text)],
    ).properties(height=height).interactive(bind_y=False)


def with_band(chart: alt.Chart, band: pd.DataFrame, *, time: str, low: str, high: str,
              text: str) -> alt.LayerChart:
    """``chart`` with two dashed grey lines at ``low`` and ``high`` over ``time``: where the
    total lies given its sources' accuracy (the job's bounds). Lines, not a shaded band:
    an estimate's bounds can be three times the figure, and a band that wide covered and
    tinted the stack it bounds (issue 46)."""
    tips = [alt.Tooltip("when:N", title="time"), alt.Tooltip(f"{text}:N", title="total within")]
    edges = [alt.Chart(band).mark_line(interpolate="step-before", strokeDash=[4, 3],
                                       strokeWidth=1, color="#555555").encode(
        x=alt.X(f"{time}:T"), y=alt.Y(f"{edge}:Q"), tooltip=tips) for edge in (low, high)]
    return alt.layer(chart, *edges)


def lines(frame: pd.DataFrame, *, x: str, y: str, color: str, x_title: str, y_title: str,
          temporal: bool = False, log_x: bool = False, height: int = 260,
          text: str | None = None, axis_format: str = "%H:%M") -> alt.Chart:
    """Lines with points; ``x`` as time (viewer's clock) or a number (log2 scale)."""
    if temporal:
        x_enc = alt.X(f"{x}:T", title=x_title,
                      axis=alt.Axis(format=axis_format, labelOverlap=True))
        tips = [alt.Tooltip("when:N", title="time")]
    else:
        x_enc = alt.X(f"{x}:Q", title=x_title,
                      scale=alt.Scale(type="log", base=2) if log_x else alt.Scale())
        tips = [alt.Tooltip(f"{x}:Q", title=x_title)]
    return alt.Chart(frame).mark_line(point=len(frame) <= 80).encode(
        x=x_enc, y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color(f"{color}:N", title=color, legend=LEGEND),
        tooltip=[*tips, alt.Tooltip(f"{color}:N"), _value_tip(y, y_title, text)],
    ).properties(height=height).interactive(bind_y=False)


def compare_bars(frame: pd.DataFrame, *, group: str, value: str, title: str,
                 baseline: str, height: int | None = None, text: str | None = None,
                 error: tuple[str, str, str] | None = None) -> alt.Chart | alt.LayerChart:
    """One bar per group; the baseline in grey, the others coloured; ``error`` names
    the columns (low, high, their text) of an error bar per group, where known.

    The colour is a field with a fixed scale rather than ``alt.condition``: Altair
    validates a condition against the whole Vega-Lite schema, three times the cost of
    the chart, and the Compare page draws four.
    """
    roles = ["baseline" if g == baseline else "compared" for g in frame[group]]
    bars = alt.Chart(frame.assign(role=roles)).mark_bar().encode(
        y=alt.Y(f"{group}:N", title=None, sort=None, axis=alt.Axis(labelLimit=0)),
        # SI-prefixed ticks (60M, not 60,000,000) where the figures run to tens of thousands
        x=alt.X(f"{value}:Q", title=title, axis=alt.Axis(format="~s")
                if frame[value].abs().max() >= 1e4 else alt.Axis()),
        color=alt.Color("role:N", legend=None, scale=alt.Scale(
            domain=["baseline", "compared"], range=["#9E9E9E", "#4C78A8"])),
        tooltip=[alt.Tooltip(f"{group}:N", title="group"), _value_tip(value, title, text)],
    ).properties(height=height or 120 + 34 * len(frame), title=title)  # room for each label
    if error is None:
        return bars
    low, high, words = error
    known = frame.dropna(subset=[low, high])
    if known.empty:
        return bars
    # Error bars: where the row's figure may lie given its difference from the baseline
    # (the page's, reports.compare.table.energy_difference), so a whisker that reaches
    # the baseline's value reads as what the sentence says: not distinguishable.
    whiskers = alt.Chart(known).mark_errorbar(ticks=True, color="#222222").encode(
        y=alt.Y(f"{group}:N", sort=None),
        x=alt.X(f"{low}:Q", title=title), x2=alt.X2(f"{high}:Q"),
        tooltip=[alt.Tooltip(f"{group}:N", title="group"),
                 alt.Tooltip(f"{words}:N", title="vs the baseline (95 %)")])
    return alt.layer(bars, whiskers)
