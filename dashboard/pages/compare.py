"""Compare: energy, CO2e and cost per unit of work across instance types (or jobs).

Groups are setups (the instance types a job ran on) or hand-picked jobs; each bar sums
its jobs' energy, units and running time, so a group of ten short runs weighs what it
did, not ten equal votes. Deltas are written against a baseline, and an SLA in units
per hour turns throughput into instances, fleet power and cost per hour.
"""

from __future__ import annotations

import math

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, fmt, state, ui

MAX_PICK = 500

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
groups = state.compare(url, kind, unit, since, until, now, picked)
if not groups:
    st.info(f"No {kind} job counted {fmt.plural(unit)} in this selection.")
    st.stop()

keys = [g.key for g in groups]
slowest = min(groups, key=lambda g: g.throughput_per_h if math.isfinite(g.throughput_per_h)
              else math.inf)
baseline_key = st.selectbox("Baseline", keys, index=keys.index(slowest.key), key="cmp_base")
baseline = groups[keys.index(baseline_key)]
per = f"per {unit}"
million = f"per million {fmt.plural(unit)}"
# CO2e per inference is often a fraction of a gram: show milligrams then.
known_co2e = [g.co2e_per_unit_g for g in groups if g.co2e_per_unit_g is not None]
co2e_unit, co2e_scale = ("mg", 1000.0) if known_co2e and max(known_co2e) < 1 else ("g", 1.0)
co2e_col = f"CO2e {per} ({co2e_unit})"

for group in groups:
    if group is not baseline:
        st.markdown(f"**{group.key}** vs {baseline.key}: "
                    f"{analysis.delta_text(group, baseline, unit)}")

table = pd.DataFrame([{
    "group": g.key, "jobs": len(g.job_ids), fmt.plural(unit): g.units,
    f"energy {per} (J)": g.energy_per_unit_j,
    co2e_col: None if g.co2e_per_unit_g is None else g.co2e_per_unit_g * co2e_scale,
    f"cost {million} (USD)": g.usd_per_million,
    f"throughput ({fmt.plural(unit)}/h)": g.throughput_per_h,
    "power (W)": g.power_w,
    "instances per setup": g.nodes,
} for g in groups])
st.dataframe(table, hide_index=True, width="stretch", column_config={
    f"energy {per} (J)": st.column_config.NumberColumn(format="%.3g"),
    co2e_col: st.column_config.NumberColumn(format="%.3g"),
    f"cost {million} (USD)": st.column_config.NumberColumn(format="$%.2f"),
    f"throughput ({fmt.plural(unit)}/h)": st.column_config.NumberColumn(format="%.0f"),
    "power (W)": st.column_config.NumberColumn(format="%.0f"),
    fmt.plural(unit): st.column_config.NumberColumn(format="%.0f"),
})

panels = [(f"energy {per} (J)", f"Energy {per} (J)"),
          (co2e_col, f"CO2e {per} ({co2e_unit})"),
          (f"cost {million} (USD)", f"Cost {million} (USD)"),
          (f"throughput ({fmt.plural(unit)}/h)", f"Throughput ({fmt.plural(unit)}/h)")]
for row in (panels[:2], panels[2:]):
    cols = st.columns(2)
    for col, (column, title) in zip(cols, row, strict=True):
        data = table[["group", column]].dropna()
        with col:
            if data.empty:
                st.caption(f"{title}: unknown (an instance type without catalog data).")
            else:
                st.altair_chart(charts.compare_bars(data, group="group", value=column,
                                                    title=title, baseline=baseline.key),
                                width="stretch")

st.subheader("Sizing for a service level")
best = max(g.throughput_per_h for g in groups if math.isfinite(g.throughput_per_h))
default_sla = float(10 ** math.ceil(math.log10(max(best, 1.0) * 2)))
sla = st.number_input(f"Required throughput ({fmt.plural(unit)} per hour)", min_value=1.0,
                      value=default_sla, step=default_sla / 10, key="cmp_sla", format="%.0f")
plan = analysis.sla_plan(groups, sla)
st.dataframe(pd.DataFrame([{
    "group": r.key, "setups": r.setups, "instances": r.instances,
    "fleet power (kW)": r.fleet_power_w / 1000,
    "cost per hour (USD)": r.usd_per_hour,
    "CO2e per hour (kg)": None if r.co2e_g_per_hour is None else r.co2e_g_per_hour / 1000,
} for r in plan]), hide_index=True, width="stretch", column_config={
    "fleet power (kW)": st.column_config.NumberColumn(format="%.2f"),
    "cost per hour (USD)": st.column_config.NumberColumn(format="$%.2f"),
    "CO2e per hour (kg)": st.column_config.NumberColumn(format="%.3f"),
})
st.caption("Setups needed = ⌈SLA ÷ measured throughput of one setup⌉; power, cost and CO2e "
           "per hour scale the measured averages of one setup while running (its attributed "
           "energy, list price and grid intensity).")
