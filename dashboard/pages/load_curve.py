"""Load curve: energy per request, request rate and latency against load, per setup or
per model.

Reads inference jobs whose chosen label carries the load level (``concurrency=<n>`` by
default: ``joulestat run --label concurrency=8 ...``, or a load test that starts one job
per level), so the point where more concurrency stops buying throughput and only costs
energy is visible per instance type. Jobs at the same level on the same setup are
summed. The viewer picks the label and leaves runs out (a 5-second smoke test at
concurrency 1 is not a load level), so one stray run cannot make a point. Latency
labels the load test set (``p50_ms``, ``p99_ms``) are columns beside the energy, so the
cost of a level and what its users waited are read on one row. Grouped by model, a
multi-model server's jobs give a line per model, each with its share of the energy by
busy time (:mod:`joulestat.dashboard.load_table`). A line whose energy is not all read from a
counter is dashed and says so in the legend ("c6i.2xlarge (estimated)"), and the table
says from what, right after the line's name: a modelled curve beside measured ones must
not read as their equal.
"""

from __future__ import annotations

from collections import defaultdict

import altair as alt
import pandas as pd
import streamlit as st

from joulestat.core import units
from joulestat.core.redact import redact_labels
from joulestat.dashboard import analysis, charts, fmt, load_table, state, ui
from joulestat.reports.sources import ESTIMATED, MEASURED, MIXED, REPLAY, UNSTATED, sources_class

HOW = ("```sh\nfor c in 1 2 4 8 16 32; do\n  joulestat run --name bert-serve --kind "
       "inference --label concurrency=$c -- python load_test.py --concurrency $c\ndone\n```"
       "\n\nand count requests in the server with `job.count('request', n)` "
       "(`from joulestat import track`); a server of several models counts them with "
       "`job.serving(model)`.")
GROUPINGS = {load_table.BY_SETUP: "setup", load_table.BY_MODEL: "model"}
# A line's legend label after its name, by how its energy was obtained.
MARKS = {MEASURED: "", ESTIMATED: " (estimated)", UNSTATED: " (not stated)",
         MIXED: " (partly estimated)", REPLAY: " (replayed)"}
SOLID, DASHED = [1, 0], [6, 4]
ALL_NAMES = "all job names"

url, now, tz = ui.open_page("Load curve")

unit_choices = state.units_by_kind(url).get("inference", [])
if not unit_choices:
    st.info(f"No inference job has counted units of work yet. Run one job per load level, "
            f"for example:\n\n{HOW}")
    st.stop()

top = st.columns([1, 1, 1, 1.3, 2.7])
unit = top[0].selectbox("Unit", unit_choices, key="load_unit")
keys = state.label_keys(url, "inference") or ["concurrency"]
label_key = top[1].selectbox("Load level label", keys, key="load_label",
                             index=keys.index("concurrency") if "concurrency" in keys else 0,
                             help="the job label whose number is the load level")
by = top[2].radio("Group by", list(GROUPINGS), format_func=GROUPINGS.__getitem__,
                  key="load_by", horizontal=True,
                  help="model: a line per model of multi-model servers, each with its "
                       "share of the energy by busy time")
runs = state.load_jobs(url, unit, label_key)
# Two servers on one setup pool into one line unless one job name is picked (the latest
# run's first); "all job names" keeps setups whose jobs are named apart comparable, and
# the page says when it pools names.
names = list(dict.fromkeys(j.name for j in sorted(runs, key=lambda j: -j.started_s)))
name = top[3].selectbox("Job name", [ALL_NAMES, *names], key="load_name", format_func=fmt.md,
                        help="one server's load test; jobs of another name are another "
                             "server, pooled into the same setup's line under "
                             f"'{ALL_NAMES}'")
runs = [j for j in runs if name in (ALL_NAMES, j.name)]
labels = {j.id: f"{j.name} · {label_key}={redact_labels(j.labels).get(label_key)} · "
                f"{fmt.local_time(j.started_s, tz)} · {analysis.setup_of(j)} · "
                f"{fmt.duration(j.held_s(now))}" for j in reversed(runs)}
left_out = top[4].multiselect("Leave out runs", list(labels), format_func=labels.__getitem__,
                              key="load_left_out", placeholder="e.g. a short smoke test")
splits = state.splits(url, tuple(j.id for j in runs)) if by == load_table.BY_MODEL else {}
node_sources = state.energy_sources(url, tuple(sorted({n for j in runs for n, _t in j.nodes})))
served = state.served_latency(url, tuple(j.id for j in runs))
points, skipped = load_table.load_rows(runs, unit, now, label_key, set(left_out), by, splits,
                                       node_sources, served)
if skipped:
    st.caption(f"{skipped} job(s) left out: their {fmt.code(label_key)} label is not a positive "
               "number.")
if not points:
    if by == load_table.BY_MODEL and runs:
        st.info(f"No job with a numeric {fmt.code(label_key)} label counted "
                f"{fmt.md(fmt.plural(unit))} per "
                "model: a server of several models records each one's busy time with "
                "`job.serving(model)` or `count(unit, n, model=..., busy_s=...)` "
                "(docs/jobs.md).")
        st.stop()
    st.info(f"No inference job with a numeric {fmt.code(label_key)} label counted "
            f"{fmt.md(fmt.plural(unit))} yet. Run one job per load level, for example:\n\n{HOW}")
    st.stop()
setups_named: defaultdict[str, set[str]] = defaultdict(set)
for j in runs:
    if j.id not in left_out:
        setups_named[analysis.setup_of(j)].add(j.name)
mixed = {setup: sorted(found) for setup, found in setups_named.items() if len(found) > 1}
if mixed:
    st.warning("; ".join(f"{fmt.md(setup)}: one line pools jobs named "
                         f"{fmt.md(', '.join(found))}" for setup, found in sorted(mixed.items()))
               + ". Pick a job name to see one server.", icon=":material/merge:")
if by == load_table.BY_MODEL:
    idle = load_table.idle_share(runs, splits, set(left_out))
    st.caption(f"Each model's energy is its share of its jobs' by busy time; "
               f"{fmt.share(idle)} of these jobs' energy fell while no model was busy "
               "(idle) and is in no line.")

group = GROUPINGS[by]
latency = [key for key, _value in points[0].latency]
line_sources: defaultdict[str, set[str]] = defaultdict(set)
for p in points:
    line_sources[p.group].update(p.sources)
line_of = {line: line + MARKS.get(sources_class(found), " (source unknown)")
           if found else f"{line} (source unknown)" for line, found in line_sources.items()}
marked = [line for line in line_of if line_of[line] != line]
frame = pd.DataFrame([{group: p.group, fmt.ENERGY_IS: fmt.energy_is(p.sources),
                       **({"setup": p.setup} if by != load_table.BY_SETUP else {}),
                       label_key: p.level, "jobs": p.jobs, "run time": p.run_s,
                       "energy_per_unit_j": p.energy_per_unit_j, "rate_per_s": p.rate_per_s,
                       **dict(p.latency)} for p in points])
divisor, energy_unit = units.scale_for(list(frame["energy_per_unit_j"]), "J")
frame["energy_per_unit"] = frame["energy_per_unit_j"] / divisor
frame["energy_text"] = frame["energy_per_unit_j"].map(fmt.energy)
rate_name = f"{fmt.plural(unit)}/s"
frame["rate_text"] = frame["rate_per_s"].map(lambda r: f"{units.sig(r)} {rate_name}")


def curve(title: str, y: str, y_title: str, text: str) -> None:
    """One figure against the load level, a line per group (log x: levels usually double);
    a line not all measured is dashed, and its legend label says how it was obtained."""
    st.subheader(fmt.md(title))
    drawn = frame.assign(**{group: frame[group].map(line_of)})
    # One legend: each line's colour drawn as a short stroke, dashed where the line is
    # (a dashed circle, the default symbol, reads as a blot), its label saying why.
    dashes = alt.StrokeDash(f"{group}:N", title=group, scale=alt.Scale(
        domain=list(line_of.values()),
        range=[DASHED if line in marked else SOLID for line in line_of]))
    legend = alt.Legend(orient="right", labelLimit=0, titleLimit=0, symbolType="stroke",
                        symbolStrokeWidth=2)
    st.altair_chart(charts.lines(drawn, x=label_key, y=y, color=group,
                                 x_title=f"{label_key} (load level)", y_title=y_title,
                                 log_x=True, text=text).encode(
        color=alt.Color(f"{group}:N", title=group, legend=legend), strokeDash=dashes),
        width="stretch")


left, right = st.columns(2)
with left:
    curve(f"Energy per {unit} ({energy_unit})", "energy_per_unit",
          f"energy per {unit} ({energy_unit})", "energy_text")
with right:
    curve(f"Rate ({rate_name})", "rate_per_s", f"rate ({rate_name})", "rate_text")
st.caption(f"Energy per {fmt.md(unit)} here is over each whole job, its warm-up, ramp and "
           "drain included. A serving job measured with `--serving-metrics` also has a "
           "steady-state figure (the batch full, before the drain, as ML.ENERGY measures): "
           "in its report and on the Compare page (docs/llm-serving.md).")

# What users wait for first: time to first token, else the whole request.
served_p99 = next((key for key in (load_table.served_key("ttft", "p99"),
                                   load_table.served_key("e2e", "p99")) if key in latency), None)
if served_p99 is not None:
    # Energy per unit and what users waited, on one chart: the level past which more load
    # buys no energy and costs latency (docs/llm-serving.md).
    st.subheader(fmt.md(f"Energy per {unit} and {served_p99.removesuffix(' (s)')} "
                        "against load"))
    drawn = frame.assign(**{group: frame[group].map(line_of)})
    base = alt.Chart(drawn).encode(
        x=alt.X(f"{label_key}:Q", title=f"{label_key} (load level)",
                scale=alt.Scale(type="log", nice=False,
                                domain=[float(frame[label_key].min()),
                                        float(frame[label_key].max())])),
        color=alt.Color(f"{group}:N", title=group))
    # Energy as on the charts above (a line dashed where it is an estimate); latency
    # dotted with square points, on the right axis.
    energy_line = base.mark_line(point=True).encode(
        y=alt.Y("energy_per_unit:Q", title=f"energy per {unit} ({energy_unit}): line"),
        strokeDash=alt.StrokeDash(f"{group}:N", legend=None, scale=alt.Scale(
            domain=list(line_of.values()),
            range=[DASHED if line in marked else SOLID for line in line_of])),
        tooltip=[f"{group}:N", f"{label_key}:Q", "energy_text:N"])
    latency_line = base.mark_line(strokeDash=[2, 3], point=alt.OverlayMarkDef(
        shape="square", size=60)).encode(
        y=alt.Y(f"{served_p99}:Q", title=f"{served_p99}: dotted, squares"),
        tooltip=[f"{group}:N", f"{label_key}:Q", f"{served_p99}:Q"])
    st.altair_chart(alt.layer(energy_line, latency_line).resolve_scale(
        y="independent", strokeDash="independent"), width="stretch")
    st.caption("Served latency from the serving engine's histograms (its jobs' added up "
               "per point, then read): the dotted line with squares, on the right axis.")

if marked:
    how = fmt.md("; ".join(f"{line}: {fmt.energy_is(line_sources[line])}" for line in marked))
    st.caption(f"Dashed lines are not read from a hardware counter ({how}), so they rest on "
               "the named model's assumptions (docs/methodology.md); solid lines are "
               "measured. Compare a dashed line with a solid one with care.")
labelled = [key for key in latency if not key.endswith(" (s)")]
if labelled and any(p.jobs > 1 for p in points):
    st.caption(f"{fmt.md(', '.join(labelled))}: the highest of a row's jobs, where it sums "
               "several (percentiles of separate runs cannot be pooled).")
# Served latency is shown with its unit in each cell (3.06 ms), so its heading drops "(s)".
served_names = {key: key.removesuffix(" (s)") for key in latency if key.endswith(" (s)")}
shown = frame.drop(columns=["energy_per_unit", "energy_text", "rate_text"]).rename(columns={
    "energy_per_unit_j": f"energy per {unit}", "rate_per_s": rate_name, **served_names})
st.dataframe(fmt.styled(shown, {f"energy per {unit}": fmt.energy, "run time": fmt.duration,
                                rate_name: units.sig, label_key: fmt.count,
                                # served latency in seconds with an SI prefix (3.06 ms,
                                # never 0.00306); the load test's own labels as written
                                **dict.fromkeys(labelled, units.sig),
                                **dict.fromkeys(served_names.values(), units.seconds)}),
             hide_index=True, width="stretch", placeholder=fmt.UNKNOWN,
             column_config=ui.named_columns(group))
