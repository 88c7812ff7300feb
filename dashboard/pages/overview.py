"""Overview: the fleet now (nodes, power, running jobs) and totals over a period.

Period totals are node energy (every joule the nodes drew, attributed to a job or not),
so they answer "what did the fleet cost", not "what did the jobs cost" (see Jobs).
CO2e and cost come from :mod:`agent.carbon` per node: energy × PUE × grid intensity of
its region, plus embodied emissions and list price for the hours it reported.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, costing, fmt, state, ui

STALE_S = 300.0

ui.enter()
url = state.db_url()
st.title("Overview")
ui.require_data(url)
tz = ui.viewer_tz()
now = state.now_s()
nodes = state.nodes(url)

label, length_s = ui.period_picker("overview_period")
since = 0.0 if length_s is None else now - length_s
sources = state.sources(url, since, now)
node_energy: defaultdict[str, float] = defaultdict(float)
for row in sources:
    if row.component not in analysis.OVERLAPPING:
        node_energy[row.node] += row.energy_j
held_s = state.covered(url, since, now)
node_costs = {n.node: costing.node_cost(n.instance_type, n.region, node_energy.get(n.node, 0.0),
                                        held_s.get(n.node, 0.0)) for n in nodes}
energy_j = sum(node_energy.values())
co2e = [c.co2e_g for c in node_costs.values()]
cost = [c.cost_usd for c in node_costs.values()]
provenance = analysis.provenance_totals(sources)
measured_share = provenance.get("measured", 0.0) / energy_j if energy_j else 0.0

cols = st.columns(6)
cols[0].metric("Nodes", len(nodes))
cols[1].metric("Instance types", len({n.instance_type for n in nodes}))
cols[2].metric("Jobs running", state.running_count(url))
cols[3].metric(f"Energy, {ui.SHORT[label]}", fmt.kwh(energy_j),
               help=f"{fmt.energy(energy_j)} drawn by all nodes, {label.lower()}")
cols[4].metric("CO2e", fmt.mass(None if None in co2e else sum(co2e)),
               help="operational (energy × PUE × grid intensity) + embodied")
cols[5].metric("Cost", fmt.usd(None if None in cost else sum(cost)),
               help="hourly price × hours each node reported in the period; prices: "
                    f"{costing.price_source()}")
st.caption(f"Measured: **{measured_share:.0%}** of the energy in the period; the rest is "
           "estimated by documented models (`model:*`) or replayed. Times in "
           f"{ui.tz_label(tz)}.")

left, right = st.columns(2)
with left:
    st.subheader("Power now (W)")
    power = state.current_power(url)
    power_rows = [{"node": f"{n.node} ({n.instance_type})", "component": component,
                   "power_w": watts}
                  for n in nodes for component, watts in power.get(n.node, {}).items()
                  if component not in analysis.OVERLAPPING]
    if power_rows:
        st.altair_chart(charts.stacked_bars(
            pd.DataFrame(power_rows), category="node", value="power_w", stack="component",
            value_title="Power (W)", category_title="node (instance type)"),
            width="stretch")
    else:
        st.caption("No ticks stored yet.")
with right:
    st.subheader("Energy by source (kWh)")
    source_rows = [{"class": analysis.provenance_class(r.source), "source": r.source,
                    "energy_kwh": r.energy_j / fmt.J_PER_KWH}
                   for r in sources if r.component not in analysis.OVERLAPPING]
    if source_rows:
        frame = pd.DataFrame(source_rows).groupby(["class", "source"], as_index=False).sum()
        st.altair_chart(charts.stacked_bars(
            frame, category="class", value="energy_kwh", stack="source",
            value_title="Energy (kWh)", category_title="provenance"), width="stretch")
    else:
        st.caption("No energy in this period.")

st.subheader("Nodes")
st.dataframe(pd.DataFrame([{
    "node": n.node,
    "instance type": n.instance_type,
    "region": n.region,
    "power now (W)": round(sum(w for c, w in power.get(n.node, {}).items()
                               if c not in analysis.OVERLAPPING), 1),
    f"energy, {label.lower()} (kWh)": round(node_energy.get(n.node, 0.0) / fmt.J_PER_KWH, 4),
    "CO2e (g)": node_costs[n.node].co2e_g,
    "cost (USD)": node_costs[n.node].cost_usd,
    "CPU": n.cpu_model,
    "last seen": ui.to_local(n.last_seen_s, tz),
    "reporting": "yes" if now - n.last_seen_s <= STALE_S else
                 f"silent for {fmt.duration(now - n.last_seen_s)}",
} for n in nodes]), hide_index=True, width="stretch",
    column_config={"CO2e (g)": st.column_config.NumberColumn(format="%.1f"),
                   "cost (USD)": st.column_config.NumberColumn(format="$%.4f")})

st.subheader("Jobs running")
running = state.jobs(url, status="running")
if running:
    st.dataframe(pd.DataFrame([{
        "job": j.id, "name": j.name, "kind": j.kind,
        "nodes": ", ".join(f"{node} ({itype})" for node, itype in j.nodes),
        "started": ui.to_local(j.started_s, tz),
        "running for": fmt.duration(now - j.started_s),
        "energy so far (kJ)": round(j.total_j / 1000, 2),
        "units": ", ".join(f"{fmt.count(v)} {fmt.plural(u)}" for u, v in j.units.items()),
    } for j in running]), hide_index=True, width="stretch")
else:
    st.caption("No job is running.")
