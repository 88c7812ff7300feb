"""Jobs: the jobs of a period, filtered and sorted; pick one to open its detail.

The newest 1,000 are listed unless the user asks for more (:data:`SHOWN`): a fleet's week
holds 10^5 jobs, which take seconds to read and price and nobody scrolls (issue 28).

Figures are each job's attributed energy (dynamic plus its share of idle, all nodes),
its operational CO2e with embodied apart (one definition of CO2e on every page:
:class:`joulestat.dashboard.analysis.JobCost`) and cost (list price × hours its nodes were held),
from :mod:`joulestat.carbon` through :mod:`joulestat.dashboard.costing`. The name comes first, then
how its energy was obtained (``estimated (model: ccf-vcpu)``), then the figures a reader
compares, and the id last, short: at a laptop's width the columns past the eighth are
off screen, so what decides how far to trust a row must never be there. Each figure is
text from :mod:`joulestat.core.units` (``2.05 mJ``), so "Sort by" sorts by the numbers behind it.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from joulestat.dashboard import analysis, fmt, state, ui

ANY = "any"
SORTS = {"Energy": "_energy_j", "CO2e": "_co2e_g", "Cost": "_cost_usd",
         "Energy per unit": "_energy_per_unit_j", "Start": "_started_s"}
MAX_PICKER = 500
# How many of the period's jobs the table reads: the newest 1,000 by default, as a runs
# table pages (MLflow shows 100 a page), so a fleet's week (10^5 jobs, issue 28) opens in
# a second; "all" reads every one. A text search always reads them all, as it searches.
SHOWN = {"newest 1,000": 1_000, "newest 10,000": 10_000, "all": None}
# Most read first; the rest keep the table's own order, the short id last.
FIRST = ("name", fmt.ENERGY_IS, "energy", "CO2e (operational)", "cost", "energy per unit",
         "units", "instance types", "started", "duration")
COLUMNS = (*FIRST, *(c for c in analysis.JOB_COLUMNS if c not in (*FIRST, "id")), "id")

url, now, tz = ui.open_page("Jobs")
nodes = state.nodes(url)

row1 = st.columns(4)
kind = row1[0].selectbox("Kind", [ANY, "training", "inference", "other"], key="jobs_kind")
status = row1[1].selectbox("Status", [ANY, "running", "ended"], key="jobs_status")
itype = row1[2].selectbox("Instance type", [ANY, *sorted({n.instance_type for n in nodes})],
                          key="jobs_itype")
node = row1[3].selectbox("Node", [ANY, *[n.node for n in nodes]], key="jobs_node")
row2 = st.columns([2, 1, 1, 1, 1], vertical_alignment="bottom")
text = row2[0].text_input("Label or name", key="jobs_label",
                          placeholder="concurrency=8, model=bert-base, or any text").strip()
with row2[1]:
    _period, length_s = ui.period_picker("jobs_period", default="Last 7 days")
shown = row2[2].selectbox("Jobs", list(SHOWN), key="jobs_shown",
                          help="how many of the period's jobs to list, newest first; "
                               "a search looks through all of them")
sort = row2[3].selectbox("Sort by", list(SORTS), key="jobs_sort")
descending = row2[4].toggle("Largest first", value=True, key="jobs_desc")

where = (None if kind == ANY else kind, None if status == ANY else status,
         None if length_s is None else now - length_s,
         None if length_s is None else state.window_end_s(now),
         None if node == ANY else node, None if itype == ANY else itype)
newest = None if text else SHOWN[shown]
frame = state.job_table(url, *where, now, newest)
in_period = len(frame)
matching = state.matching_count(url, *where) if newest is not None and in_period >= newest \
    else in_period
if text and "=" in text:
    key, _, value = text.partition("=")
    wanted = f"{key.strip()}={value.strip()}"
    frame = frame[frame["labels"].str.split(", ").map(lambda items: wanted in items)]
elif text:
    needle = text.lower()
    frame = frame[frame["labels"].str.lower().str.contains(needle, regex=False)
                  | frame["name"].str.lower().str.contains(needle, regex=False)
                  | frame["_job_id"].str.lower().str.contains(needle, regex=False)]

if frame.empty:
    st.info("No job matches these filters." if in_period or text else
            "No jobs in this period. Measure one with `joulestat run --name NAME --kind "
            "inference -- CMD` (see docs/jobs.md).")
    st.stop()

frame = frame.sort_values(SORTS[sort], ascending=not descending, na_position="last",
                          kind="stable").reset_index(drop=True)
frame["started"] = (pd.to_datetime(frame["started"], unit="s", utc=True)
                    .dt.tz_convert(tz).dt.tz_localize(None))
total_j = frame["_energy_j"].sum()
if matching > in_period:
    st.caption(f"The {in_period:,} started last of {matching:,} jobs in this period: choose "
               "more under Jobs, narrow the filters, or search (a search looks through "
               "them all).")
st.caption(f"{len(frame)} jobs, {fmt.energy(total_j)} ({fmt.kwh(total_j)}) attributed. "
           f"CO2e is operational (energy × PUE × grid intensity), embodied apart. Sorted "
           f"by {sort.lower()} (column headers sort the text). Times in {ui.tz_label(tz)}. "
           "Select a row to open the job.")
event = st.dataframe(
    frame, hide_index=True, width="stretch", height=420, on_select="rerun",
    selection_mode="single-row", key="jobs_table", column_order=COLUMNS,
    column_config={
        **ui.named_columns("name", 170, 230),
        "started": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm"),
        "CO2e (operational)": st.column_config.TextColumn(
            "CO2e", help="operational: energy × PUE × grid intensity; embodied apart"),
        "energy per unit": st.column_config.TextColumn("per unit"),
        "id": st.column_config.TextColumn(help="the first 8 characters of the job id; "
                                          "a unique prefix names the job in every command"),
    },
)
selected = list(getattr(getattr(event, "selection", None), "rows", []) or [])
if selected:
    st.switch_page("pages/job_detail.py", query_params={"job": frame.at[selected[0], "_job_id"]})

pickable = frame.head(MAX_PICKER)
# The job picked on an earlier run stays pickable while it is listed, though a rerun's
# order (ties in energy, a running job's cost) moved it past the first MAX_PICKER rows:
# else the picker would fall back to another job under the user's hand.
chosen = st.session_state.get("jobs_pick")
if chosen is not None and chosen not in set(pickable["_job_id"]):
    pickable = pd.concat([pickable, frame[frame["_job_id"] == chosen]])
labels = {job_id: f"{name} · {fmt.local_time(started_s, tz)} · {setup}"
          for job_id, name, started_s, setup in zip(
              pickable["_job_id"], pickable["name"], pickable["_started_s"],
              pickable["instance types"], strict=True)}
pick_col, button_col = st.columns([3, 1], vertical_alignment="bottom")
pick = pick_col.selectbox("Open a job", list(labels), key="jobs_pick",
                          format_func=labels.__getitem__)
if button_col.button("Open detail", key="jobs_open", type="primary"):
    st.switch_page("pages/job_detail.py", query_params={"job": pick})
