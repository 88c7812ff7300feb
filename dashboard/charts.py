"""Interactive charts (Altair, which Streamlit ships; plotly is not a dependency).

Every chart names its unit on the axis, keeps one colour per component on every page
(cpu is always blue, gpu always green) and shows exact values in its tooltip. Time
axes take naive wall-clock times already in the viewer's timezone (see
:func:`dashboard.ui.to_local`); Vega-Lite reads a naive time as the browser's local
time and draws it unchanged, and the browser's zone is the one ``st.context.timezone``
reported, so axes, tooltips and tables all show the viewer's clock.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

COMPONENT_COLORS = {"cpu": "#4C78A8", "dram": "#F58518", "gpu": "#54A24B",
                    "accelerator": "#72B7B2", "net": "#B279A2", "platform": "#9D755D",
                    "other": "#BAB0AC"}


def component_scale(components: list[str]) -> alt.Scale:
    known = [c for c in COMPONENT_COLORS if c in components]
    extra = sorted(set(components) - set(known))
    palette = ["#E45756", "#EECA3B", "#FF9DA6", "#79706E"]
    return alt.Scale(domain=known + extra,
                     range=[COMPONENT_COLORS[c] for c in known]
                     + [palette[i % len(palette)] for i in range(len(extra))])


def stacked_bars(frame: pd.DataFrame, *, category: str, value: str, stack: str,
                 value_title: str, category_title: str, height: int = 260) -> alt.Chart:
    """Horizontal bars of ``value`` per ``category``, stacked by ``stack`` (components)."""
    scale = component_scale(sorted(frame[stack].unique())) if stack == "component" else (
        alt.Scale())
    return alt.Chart(frame).mark_bar().encode(
        y=alt.Y(f"{category}:N", title=category_title, sort="-x",
                axis=alt.Axis(labelLimit=260)),
        x=alt.X(f"{value}:Q", title=value_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack, scale=scale),
        tooltip=[alt.Tooltip(f"{category}:N", title=category_title),
                 alt.Tooltip(f"{stack}:N"), alt.Tooltip(f"{value}:Q", title=value_title,
                                                        format=",.4~g")],
    ).properties(height=height)


def stacked_area(frame: pd.DataFrame, *, time: str, value: str, stack: str,
                 value_title: str, time_title: str, height: int = 280) -> alt.Chart:
    """``value`` over time stacked by ``stack``; zoom and pan with the mouse."""
    scale = component_scale(sorted(frame[stack].unique())) if stack == "component" else (
        alt.Scale())
    return alt.Chart(frame).mark_area(interpolate="step-before", opacity=0.85).encode(
        x=alt.X(f"{time}:T", title=time_title,
                axis=alt.Axis(format="%H:%M", labelOverlap=True)),
        y=alt.Y(f"{value}:Q", title=value_title, stack="zero"),
        color=alt.Color(f"{stack}:N", title=stack, scale=scale),
        tooltip=[alt.Tooltip("when:N", title="time"), alt.Tooltip(f"{stack}:N"),
                 alt.Tooltip(f"{value}:Q", title=value_title, format=",.4~g")],
    ).properties(height=height).interactive(bind_y=False)


def lines(frame: pd.DataFrame, *, x: str, y: str, color: str, x_title: str, y_title: str,
          temporal: bool = False, log_x: bool = False, height: int = 260) -> alt.Chart:
    """Lines with points; ``x`` as time (viewer's clock) or a number (log2 scale)."""
    if temporal:
        x_enc = alt.X(f"{x}:T", title=x_title,
                      axis=alt.Axis(format="%H:%M", labelOverlap=True))
        tips = [alt.Tooltip("when:N", title="time")]
    else:
        x_enc = alt.X(f"{x}:Q", title=x_title,
                      scale=alt.Scale(type="log", base=2) if log_x else alt.Scale())
        tips = [alt.Tooltip(f"{x}:Q", title=x_title)]
    return alt.Chart(frame).mark_line(point=len(frame) <= 80).encode(
        x=x_enc, y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color(f"{color}:N", title=color),
        tooltip=[*tips, alt.Tooltip(f"{color}:N"),
                 alt.Tooltip(f"{y}:Q", title=y_title, format=",.4~g")],
    ).properties(height=height).interactive(bind_y=False)


def compare_bars(frame: pd.DataFrame, *, group: str, value: str, title: str,
                 baseline: str, height: int = 220) -> alt.Chart:
    """One bar per group; the baseline in grey, the others coloured.

    The colour is a field with a fixed scale rather than ``alt.condition``: Altair
    validates a condition against the whole Vega-Lite schema, three times the cost of
    the chart, and the Compare page draws four.
    """
    roles = ["baseline" if g == baseline else "compared" for g in frame[group]]
    return alt.Chart(frame.assign(role=roles)).mark_bar().encode(
        y=alt.Y(f"{group}:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)),
        x=alt.X(f"{value}:Q", title=title),
        color=alt.Color("role:N", legend=None, scale=alt.Scale(
            domain=["baseline", "compared"], range=["#9E9E9E", "#4C78A8"])),
        tooltip=[alt.Tooltip(f"{group}:N", title="group"),
                 alt.Tooltip(f"{value}:Q", title=title, format=",.4~g")],
    ).properties(height=height, title=title)
