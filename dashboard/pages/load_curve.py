"""Load curve: energy per request and request rate against load, per setup.

Reads inference jobs whose chosen label carries the load level (``concurrency=<n>`` by
default: ``joulestat run --label concurrency=8 ...``, or a load test that starts one job
per level), so the point where more concurrency stops buying throughput and only costs
energy is visible per instance type. Jobs at the same level on the same setup are
summed. The viewer picks the label and leaves runs out (a 5-second smoke test at
concurrency 1 is not a load level), so one stray run cannot make a point.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from agent import units
from agent.redact import redact_labels
from dashboard import analysis, charts, fmt, state, ui

HOW = ("```sh\nfor c in 1 2 4 8 16 32; do\n  joulestat run --name bert-serve --kind "
       "inference --label concurrency=$c -- python load_test.py --concurrency $c\ndone\n```"
       "\n\nand count requests in the server with `job.count('request', n)` "
       "(`from agent.client import track`).")

url, now, tz = ui.open_page("Load curve")

unit_choices = state.units_by_kind(url).get("inference", [])
if not unit_choices:
    st.info(f"No inference job has counted units of work yet. Run one job per load level, "
            f"for example:\n\n{HOW}")
    st.stop()

top = st.columns([1, 1, 3])
unit = top[0].selectbox("Unit", unit_choices, key="load_unit")
keys = state.label_keys(url, "inference") or ["concurrency"]
label_key = top[1].selectbox("Load level label", keys, key="load_label",
                             index=keys.index("concurrency") if "concurrency" in keys else 0,
                             help="the job label whose number is the load level")
runs = state.load_jobs(url, unit, label_key)
labels = {j.id: f"{j.name} · {label_key}={redact_labels(j.labels).get(label_key)} · "
                f"{fmt.local_time(j.started_s, tz)} · {analysis.setup_of(j)} · "
                f"{fmt.duration(j.held_s(now))}" for j in reversed(runs)}
left_out = top[2].multiselect("Leave out runs", list(labels), format_func=labels.__getitem__,
                              key="load_left_out", placeholder="e.g. a short smoke test")
points, skipped = state.load_points(url, unit, now, label_key, tuple(left_out))
if skipped:
    st.caption(f"{skipped} job(s) left out: their `{label_key}` label is not a positive "
               "number.")
if not points:
    st.info(f"No inference job with a numeric `{label_key}` label counted "
            f"{fmt.plural(unit)} yet. Run one job per load level, for example:\n\n{HOW}")
    st.stop()

frame = pd.DataFrame([{"setup": p.setup, label_key: p.level, "jobs": p.jobs,
                       "run time": p.run_s, "energy_per_unit_j": p.energy_per_unit_j,
                       "rate_per_s": p.rate_per_s} for p in points])
divisor, energy_unit = units.scale_for(list(frame["energy_per_unit_j"]), "J")
frame["energy_per_unit"] = frame["energy_per_unit_j"] / divisor
frame["energy_text"] = frame["energy_per_unit_j"].map(fmt.energy)
rate_name = f"{fmt.plural(unit)}/s"
frame["rate_text"] = frame["rate_per_s"].map(lambda r: f"{units.sig(r)} {rate_name}")


def curve(title: str, y: str, y_title: str, text: str) -> None:
    """One figure against the load level, a line per setup (log x: levels usually double)."""
    st.subheader(title)
    st.altair_chart(charts.lines(frame, x=label_key, y=y, color="setup",
                                 x_title=f"{label_key} (load level)", y_title=y_title,
                                 log_x=True, text=text), width="stretch")


left, right = st.columns(2)
with left:
    curve(f"Energy per {unit} ({energy_unit})", "energy_per_unit",
          f"energy per {unit} ({energy_unit})", "energy_text")
with right:
    curve(f"Rate ({rate_name})", "rate_per_s", f"rate ({rate_name})", "rate_text")

shown = frame.drop(columns=["energy_per_unit", "energy_text", "rate_text"]).rename(columns={
    "energy_per_unit_j": f"energy per {unit}", "rate_per_s": rate_name})
st.dataframe(fmt.styled(shown, {f"energy per {unit}": fmt.energy, "run time": fmt.duration,
                                rate_name: units.sig, label_key: fmt.count}),
             hide_index=True, width="stretch", placeholder=fmt.UNKNOWN)
