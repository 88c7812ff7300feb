"""Compare: energy, CO2e and cost per unit of work across instance types (or jobs).

The figures and sentences are ``joulestat compare``'s: :func:`dashboard.state.compare`
runs :func:`agent.reports.compare.compare` on the same figures the command loads, a new
baseline or SLA is :func:`~agent.reports.compare.rebase` of its rows, and the deltas
are :func:`~agent.reports.compare_words.headline`. So throughput is units per
instance-hour (a two-node setup is charged both nodes), a group pools its jobs (sum of
units over sum of instance-hours), CO2e is operational with embodied apart, and an
unknown price stays unknown. This page only lays the table out, draws the bars and lets
the viewer pick the baseline and the SLA the fleet is sized for.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from agent.reports.compare_words import format_pct, format_ratio, headline, plural
from dashboard import charts, comparison, costing, state, ui

MAX_PICK = 500
NONE = "—"

ui.enter()
url = state.db_url()
st.title("Compare")
ui.require_data(url)
now = state.now_s()

units_by_kind = state.units_by_kind(url)
if not units_by_kind:
    st.info("No job has counted units of work yet, so there is nothing per unit to compare. "
            "Count them from your code with `job.count('request', n)` "
            "(`from agent.client import track`) or `POST /v1/jobs/{id}/units` (docs/jobs.md).")
    st.stop()

top = st.columns(4)
kinds = list(units_by_kind)
kind = top[0].selectbox("Kind", kinds, key="cmp_kind",
                        index=kinds.index("inference") if "inference" in kinds else 0)
unit = top[1].selectbox("Unit", units_by_kind[kind], key="cmp_unit")
mode = top[2].radio("Compare", ["by instance type", "picked jobs"], key="cmp_mode")
with top[3]:
    _label, length_s = ui.period_picker("cmp_period", default="All time")
since, until = (None, None) if length_s is None else (now - length_s, now)
picked: tuple[str, ...] | None = None
if mode == "picked jobs":
    labels = dict(state.compare_candidates(url, kind, unit, since, until, MAX_PICK))
    picked = tuple(st.multiselect("Jobs", list(labels), format_func=labels.__getitem__,
                                  default=list(labels)[:2], key="cmp_jobs"))
units = plural(unit)
found = state.compare(url, kind, unit, since, until, now, picked)
if found is None:
    st.info(f"No {kind} job counted {units} in this selection.")
    st.stop()

names = {comparison.row_key(r): comparison.row_label(r) for r in found.table.rows}
options = [comparison.row_key(r) for r in found.per_unit]
default = comparison.row_key(comparison.slowest(found.per_unit))
base_key = st.selectbox("Baseline", options, index=options.index(default),
                        format_func=names.__getitem__, key="cmp_base")
result = found.against(base_key)
base = result.table.baseline_row
assert base is not None
base_label = comparison.row_label(base)
st.caption("Throughput per instance-hour (every node a job held counts), CO2e operational "
           "(location-based; embodied apart), cost = hourly price × hours held: the figures "
           "and sentences of `joulestat compare` (docs/compare.md). Prices: "
           f"{costing.price_source()}.")
for row in result.per_unit:
    if not row.is_baseline:
        st.markdown(f"**{comparison.row_label(row)}** vs {base_label}: {headline(row, base)}")

per, million = f"per {unit}", f"per million {units}"
# CO2e per inference is often a fraction of a gram: show milligrams then.
known_co2e = [r.co2e_per_unit_g for r in result.per_unit if r.co2e_per_unit_g is not None]
co2e_unit, co2e_scale = ("mg", 1000.0) if known_co2e and max(known_co2e) < 1 else ("g", 1.0)
throughput_col = f"throughput ({units}/instance-h)"
energy_col, cost_col = f"energy {per} (J)", f"cost {million} (USD)"
co2e_col = f"CO2e {per} ({co2e_unit})"
embodied_col = f"embodied CO2e {per} ({co2e_unit})"


def scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def delta(value: float | None, ratio: bool = False) -> str:
    """A delta against the baseline as the CLI prints it; — when unknown."""
    if value is None:
        return NONE
    return format_ratio(value) if ratio else format_pct(value)


table = pd.DataFrame([{
    "group": comparison.row_label(r), "instance types": "+".join(r.instance_types),
    "jobs": r.runs, units: r.units, "instance-hours": r.instance_hours,
    throughput_col: r.units_per_hour, energy_col: r.energy_per_unit_j,
    co2e_col: scaled(r.co2e_per_unit_g, co2e_scale),
    embodied_col: scaled(r.embodied_per_unit_g, co2e_scale),
    cost_col: r.cost_per_million_usd, "power per instance (W)": r.power_per_instance_w,
    "throughput vs baseline": delta(r.throughput_x, ratio=True),
    f"energy {per} vs baseline": delta(r.energy_pct),
    f"CO2e {per} vs baseline": delta(r.co2e_pct),
    f"cost {per} vs baseline": delta(r.cost_pct),
} for r in result.per_unit])
if result.table.by == "instance_type":
    table = table.drop(columns="instance types")
st.dataframe(table, hide_index=True, width="stretch", column_config={
    units: st.column_config.NumberColumn(format="%.0f"),
    "instance-hours": st.column_config.NumberColumn(format="%.3g"),
    throughput_col: st.column_config.NumberColumn(format="%.0f"),
    energy_col: st.column_config.NumberColumn(format="%.3g"),
    co2e_col: st.column_config.NumberColumn(format="%.3g"),
    embodied_col: st.column_config.NumberColumn(format="%.3g"),
    cost_col: st.column_config.NumberColumn(format="$%.2f"),
    "power per instance (W)": st.column_config.NumberColumn(format="%.0f"),
})

if result.per_run:
    st.caption(f"These jobs counted no {units}: compared per run, as `joulestat compare` "
               "lists them (no deltas against a per-unit baseline).")
    st.dataframe(pd.DataFrame([{
        "group": comparison.row_label(r), "jobs": r.runs,
        "energy per run (kJ)": r.energy_per_run_j / 1000,
        "CO2e per run (g)": r.co2e_per_run_g, "cost per run (USD)": r.cost_per_run_usd,
    } for r in result.per_run]), hide_index=True, width="stretch", column_config={
        "energy per run (kJ)": st.column_config.NumberColumn(format="%.3g"),
        "CO2e per run (g)": st.column_config.NumberColumn(format="%.3g"),
        "cost per run (USD)": st.column_config.NumberColumn(format="$%.2f"),
    })

panels = [(energy_col, f"Energy {per} (J)"), (co2e_col, f"CO2e {per} ({co2e_unit})"),
          (cost_col, f"Cost {million} (USD)"),
          (throughput_col, f"Throughput ({units} per instance-hour)")]
for pair in (panels[:2], panels[2:]):
    cols = st.columns(2)
    for col, (column, title) in zip(cols, pair, strict=True):
        data = table[["group", column]].dropna()
        with col:
            if data.empty:
                st.caption(f"{title}: unknown (an instance type without catalog data).")
            else:
                st.altair_chart(charts.compare_bars(data, group="group", value=column,
                                                    title=title, baseline=base_label),
                                width="stretch")

st.subheader("Sizing for a service level")
best = max((r.units_per_hour or 0.0 for r in result.per_unit), default=0.0)
default_sla = float(10 ** math.ceil(math.log10(max(best, 1.0) * 2)))
sla = st.number_input(f"Required throughput ({units} per hour)", min_value=1.0,
                      value=default_sla, step=default_sla / 10, key="cmp_sla", format="%.0f")
sized = found.against(base_key, float(sla))
st.dataframe(pd.DataFrame([{
    "group": comparison.row_label(r), "instances": r.instances_needed,
    "fleet power (kW)": scaled(r.fleet_power_w, 1 / 1000),
    "fleet cost per hour (USD)": r.fleet_cost_per_hour_usd,
} for r in sized.per_unit if r.instances_needed is not None]), hide_index=True,
    width="stretch", column_config={
    "fleet power (kW)": st.column_config.NumberColumn(format="%.2f"),
    "fleet cost per hour (USD)": st.column_config.NumberColumn(format="$%.2f"),
})
st.caption(f"Instances = ⌈SLA ÷ {units} per instance-hour⌉; fleet power and cost scale the "
           "measured average power and cost of one instance-hour (its attributed energy and "
           "list price), as `joulestat compare --sla` sizes it.")

if result.notes:
    with st.expander(f"Notes ({len(result.notes)})"):
        for note in result.notes:
            st.caption(note)
