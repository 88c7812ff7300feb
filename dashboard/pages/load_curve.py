"""Load curve: energy per request and request rate against concurrency, per setup.

Reads inference jobs labelled ``concurrency=<n>`` (``joulestat run --label
concurrency=8 ...``, or a load test that starts one job per level), so the point where
more concurrency stops buying throughput and only costs energy is visible per
instance type. Jobs at the same level on the same setup are summed.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import charts, fmt, state, ui

HOW = ("```sh\nfor c in 1 2 4 8 16 32; do\n  joulestat run --name bert-serve --kind "
       "inference --label concurrency=$c -- python load_test.py --concurrency $c\ndone\n```"
       "\n\nand count requests in the server with `job.count('request', n)` "
       "(`from agent.client import track`).")

ui.enter()
url = state.db_url()
st.title("Load curve")
ui.require_data(url)
now = state.now_s()

units = state.units_by_kind(url).get("inference", [])
if not units:
    st.info(f"No inference job has counted units of work yet. Run one job per load level, "
            f"for example:\n\n{HOW}")
    st.stop()

unit = st.selectbox("Unit", units, key="load_unit")
points, skipped = state.load_points(url, unit, now)
if skipped:
    st.caption(f"{skipped} job(s) left out: their `concurrency` label is not a positive number.")
if not points:
    st.info(f"No inference job with a numeric `concurrency` label counted "
            f"{fmt.plural(unit)} yet. Run one job per load level, for example:\n\n{HOW}")
    st.stop()

frame = pd.DataFrame([{"setup": p.setup, "concurrency": p.concurrency, "jobs": p.jobs,
                       "energy_per_unit_j": p.energy_per_unit_j, "rate_per_s": p.rate_per_s}
                      for p in points])
left, right = st.columns(2)
with left:
    st.subheader(f"Energy per {unit} (J)")
    st.altair_chart(charts.lines(frame, x="concurrency", y="energy_per_unit_j", color="setup",
                                 x_title="concurrency (requests in flight)",
                                 y_title=f"energy per {unit} (J)", log_x=True),
                    width="stretch")
with right:
    st.subheader(f"Rate ({fmt.plural(unit)}/s)")
    st.altair_chart(charts.lines(frame, x="concurrency", y="rate_per_s", color="setup",
                                 x_title="concurrency (requests in flight)",
                                 y_title=f"rate ({fmt.plural(unit)}/s)", log_x=True),
                    width="stretch")

st.dataframe(frame.rename(columns={
    "energy_per_unit_j": f"energy per {unit} (J)", "rate_per_s": f"{fmt.plural(unit)}/s"}),
    hide_index=True, width="stretch", column_config={
        f"energy per {unit} (J)": st.column_config.NumberColumn(format="%.3g"),
        f"{fmt.plural(unit)}/s": st.column_config.NumberColumn(format="%.1f"),
        "concurrency": st.column_config.NumberColumn(format="%g"),
})
