"""Jobs: every job in the store, filtered and sorted; pick one to open its detail.

Figures are each job's attributed energy (dynamic plus its share of idle, all nodes),
its CO2e (operational + embodied) and cost (list price × hours its nodes were held),
both from :mod:`agent.carbon` through :mod:`dashboard.costing`.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import fmt, state, ui

ANY = "any"
SORTS = {"Energy": "energy (kJ)", "CO2e": "CO2e (g)", "Cost": "cost (USD)",
         "Energy per unit": "energy per unit (J)", "Start": "started"}
MAX_PICKER = 500

ui.enter()
url = state.db_url()
st.title("Jobs")
ui.require_data(url)
tz = ui.viewer_tz()
now = state.now_s()
nodes = state.nodes(url)

row1 = st.columns(4)
kind = row1[0].selectbox("Kind", [ANY, "training", "inference", "other"], key="jobs_kind")
status = row1[1].selectbox("Status", [ANY, "running", "ended"], key="jobs_status")
itype = row1[2].selectbox("Instance type", [ANY, *sorted({n.instance_type for n in nodes})],
                          key="jobs_itype")
node = row1[3].selectbox("Node", [ANY, *[n.node for n in nodes]], key="jobs_node")
row2 = st.columns([2, 1, 1, 1], vertical_alignment="bottom")
text = row2[0].text_input("Label or name", key="jobs_label",
                          placeholder="concurrency=8, model=bert-base, or any text").strip()
with row2[1]:
    _period, length_s = ui.period_picker("jobs_period", default="Last 7 days")
sort = row2[2].selectbox("Sort by", list(SORTS), key="jobs_sort")
descending = row2[3].toggle("Largest first", value=True, key="jobs_desc")

frame = state.job_table(url, None if kind == ANY else kind, None if status == ANY else status,
                        None if length_s is None else now - length_s,
                        None if length_s is None else now, None if node == ANY else node,
                        None if itype == ANY else itype, now)
in_period = len(frame)
if text and "=" in text:
    key, _, value = text.partition("=")
    wanted = f"{key.strip()}={value.strip()}"
    frame = frame[frame["labels"].str.split(", ").map(lambda items: wanted in items)]
elif text:
    needle = text.lower()
    frame = frame[frame["labels"].str.lower().str.contains(needle, regex=False)
                  | frame["name"].str.lower().str.contains(needle, regex=False)
                  | frame["job"].str.lower().str.contains(needle, regex=False)]

if frame.empty:
    st.info("No job matches these filters." if in_period or text else
            "No jobs in this period. Measure one with `joulestat run --name NAME --kind "
            "inference -- CMD` (see docs/jobs.md).")
    st.stop()

frame = frame.sort_values(SORTS[sort], ascending=not descending, na_position="last",
                          kind="stable").reset_index(drop=True)
frame["started"] = (pd.to_datetime(frame["started"], unit="s", utc=True)
                    .dt.tz_convert(tz).dt.tz_localize(None))
total_j = frame["energy (kJ)"].sum() * 1000
st.caption(f"{len(frame)} jobs, {fmt.energy(total_j)} ({fmt.kwh(total_j)}) attributed. "
           f"Times in {ui.tz_label(tz)}. Select a row to open the job.")
event = st.dataframe(
    frame, hide_index=True, width="stretch", height=420, on_select="rerun",
    selection_mode="single-row", key="jobs_table",
    column_config={
        "energy (kJ)": st.column_config.NumberColumn(format="%.2f"),
        "CO2e (g)": st.column_config.NumberColumn(format="%.2f"),
        "cost (USD)": st.column_config.NumberColumn(format="$%.4f"),
        "energy per unit (J)": st.column_config.NumberColumn(format="%.3g"),
        "units": st.column_config.NumberColumn(format="compact"),
        "duration (min)": st.column_config.NumberColumn(format="%.1f"),
        "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss"),
    },
)
selected = list(getattr(getattr(event, "selection", None), "rows", []) or [])
if selected:
    st.switch_page("pages/job_detail.py", query_params={"job": frame.at[selected[0], "job"]})

pick_col, button_col = st.columns([3, 1], vertical_alignment="bottom")
pick = pick_col.selectbox("Open a job", list(frame["job"][:MAX_PICKER]), key="jobs_pick")
if button_col.button("Open detail", key="jobs_open", type="primary"):
    st.switch_page("pages/job_detail.py", query_params={"job": pick})
