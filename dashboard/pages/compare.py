"""Compare: energy, CO2e and cost per unit of work across instance types, label values
or hand-picked jobs.

The figures and sentences are ``joulestat compare``'s: :func:`joulestat.dashboard.state.compare`
runs :func:`joulestat.reports.compare.table.compare` on the same figures the command loads, a new
baseline or SLA is :func:`~joulestat.reports.compare.table.rebase` of its rows, and the deltas
are :func:`~joulestat.reports.compare.words.headline`. So throughput is units per
instance-hour (a two-node setup is charged both nodes), a group pools its jobs (sum of
units over sum of instance-hours), CO2e is operational with embodied apart, and an
unknown price stays unknown. Rows of one job name are told apart by the labels that
differ between them. This page lays the table out, draws the bars, lets the viewer
pick the grouping (``--by instance_type``, ``--by label:KEY``, ``--by model``: the models
served, each carrying its share of its jobs' whole energy, or jobs), the baseline
and the SLA, and keeps every choice in the URL (``st.query_params``), so a comparison
can be shared as a link; the baseline returns to the documented default (the slowest
row) whenever the rows change. Energy per unit is shown twice, in all and above idle
(dynamic), with the idle policy the rows were attributed under
(:mod:`joulestat.reports.idle`), as the command prints them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
import streamlit as st

from joulestat.core import units
from joulestat.dashboard import charts, comparison, costing, fmt, state, ui
from joulestat.reports.compare.difference import Difference
from joulestat.reports.compare.groups import LABEL_BY, SETUP_SEPARATOR
from joulestat.reports.compare.table import (
    ComparisonRow,
    co2e_difference,
    energy_difference,
)
from joulestat.reports.compare.words import (
    bounds_text,
    headline,
    interval_words,
    plural,
    spread_text,
)
from joulestat.reports.idle import MIXED, policy_words

MAX_PICK = 500
MODES = {"instance_type": "by instance type", "name": "by job name", "label": "by label",
         "model": "by model", "jobs": "picked jobs"}

url, _now, tz = ui.open_page("Compare")

units_by_kind = state.units_by_kind(url)
if not units_by_kind:
    st.info("No job has counted units of work yet, so there is nothing per unit to compare. "
            "Count them from your code with `job.count('request', n)` "
            "(`from joulestat import track`) or `POST /v1/jobs/{id}/units` (docs/jobs.md).")
    st.stop()

# The URL seeds the widgets when the page opens; the widgets then write it back. Every
# widget takes its value from session state only (no default argument beside it).
query = st.query_params
kinds = list(units_by_kind)
first_view = "cmp_sig" not in st.session_state


def seed(key: str, wanted: object, allowed: list, default: object) -> None:
    """Put ``wanted`` (from the URL, on the first view) or ``default`` in the widget's
    state unless it holds an allowed value already."""
    if st.session_state.get(key) in allowed and key in st.session_state:
        return
    st.session_state[key] = wanted if first_view and wanted in allowed else default


by_param = query.get("by", "")
mode_key = ("label" if by_param.startswith("label:") else "jobs" if by_param == "job"
            else by_param if by_param in ("model", "name") else "instance_type")
top = st.columns(4)
seed("cmp_kind", query.get("kind"), kinds, "inference" if "inference" in kinds else kinds[0])
kind = top[0].selectbox("Kind", kinds, key="cmp_kind")
seed("cmp_unit", query.get("unit"), units_by_kind[kind], units_by_kind[kind][0])
unit = top[1].selectbox("Unit", units_by_kind[kind], key="cmp_unit")
seed("cmp_mode", MODES[mode_key] if by_param else None, list(MODES.values()),
     MODES["instance_type"])
mode = top[2].radio("Compare", list(MODES.values()), key="cmp_mode")
seed("cmp_period", query.get("period"), list(ui.PERIODS_S), "All time")
with top[3]:
    period, length_s = ui.period_picker("cmp_period", default="All time")
as_of = state.now_s(state.COMPARE_PERIOD_S)  # a comparison is rebuilt once a minute
since, until = (None, None) if length_s is None else (
    as_of - length_s, state.window_end_s(as_of, state.COMPARE_PERIOD_S))
picked: tuple[str, ...] | None = None
by = "instance_type"
if mode == MODES["label"]:
    keys = state.all_label_keys(url, kind)
    if not keys:
        st.info(f"No {fmt.md(kind)} job carries a label to group by.")
        st.stop()
    seed("cmp_label", by_param.removeprefix("label:"), keys, keys[0])
    by = f"label:{st.selectbox('Label', keys, key='cmp_label')}"
elif mode == MODES["name"]:
    by = "name"
    st.caption("A row per job name: its repeated runs pooled (per name and setup when they "
               "ran on several), with their mean and spread.")
elif mode == MODES["model"]:
    by = "model"
    st.caption("A row per model served (`job.serving(model)`, docs/jobs.md): each model "
               "carries its share of its jobs' whole energy and cost (split by busy time, "
               "the time between requests included), and its throughput is its units per "
               "hour its jobs were held. Jobs that served no named model are left out.")
elif mode == MODES["jobs"]:
    candidates = state.compare_candidates(url, kind, unit, since, until, MAX_PICK)
    labels = {job_id: f"{name} · {fmt.local_time(started_s, tz)} · {setup}"
              for job_id, name, started_s, setup in candidates}
    if "cmp_jobs" not in st.session_state or not set(st.session_state["cmp_jobs"]) <= set(
            labels):
        from_url = [j for j in query.get("jobs", "").split(",") if j in labels]
        st.session_state["cmp_jobs"] = (from_url if first_view and from_url
                                        else list(labels)[:2])
    picked = tuple(st.multiselect("Jobs", list(labels), format_func=labels.__getitem__,
                                  key="cmp_jobs"))
units_name = plural(unit)
found = state.compare(url, kind, unit, since, until, as_of, picked, by)
if found is None:
    st.info(f"No {fmt.md(kind)} job served a named model and counted {fmt.md(units_name)} "
            "in this selection: compare them by instance type or pick the jobs."
            if by == "model" and picked is None else
            f"No {fmt.md(kind)} job counted {fmt.md(units_name)} in this selection.")
    st.stop()

names = comparison.row_labels(found.table.rows, lambda t: fmt.local_time(t, tz)[:16])
options = [comparison.row_key(r) for r in found.per_unit]
default = comparison.row_key(comparison.slowest(found.per_unit))
signature = (kind, unit, by, period, picked)
if st.session_state.get("cmp_sig") != signature:  # new rows: the documented default
    wanted = query.get("baseline") if first_view else None
    st.session_state["cmp_base"] = wanted if wanted in options else default
    st.session_state["cmp_sig"] = signature
base_key = st.selectbox("Baseline", options, format_func=names.__getitem__, key="cmp_base",
                        help="default: the slowest row, so deltas read as what the faster "
                             "rows gain over it")
result = found.against(base_key)
base = result.table.baseline_row
assert base is not None
base_label = names[comparison.row_key(base)]
st.caption("Throughput per instance-hour (every node a job held counts), CO2e operational "
           "(location-based; embodied apart), cost = hourly price × hours held: the figures "
           "and sentences of `joulestat compare` (docs/compare.md). Prices: "
           f"{costing.price_source()}. Figures as of {fmt.local_time(as_of, tz)[11:16]} "
           "(rebuilt once a minute; running jobs count up to their last flush before "
           "then, as on their own page). This view's link keeps its settings.")
policy = result.table.idle_policy
said = policy_words(policy, jobs=True)
st.caption(f"Energy is what each row was attributed; dynamic energy is its part above the "
           f"node's idle power. {said[:1].upper() + said[1:]}"
           + (" (see the idle policy column)." if policy == MIXED else "."))
per_setup = result.table.by.startswith(LABEL_BY) and all(
    SETUP_SEPARATOR in r.group for r in result.table.rows)
if per_setup:
    st.caption(f"These jobs ran on several setups, so a row is one value of "
               f"{fmt.code(by.removeprefix(LABEL_BY))} on one setup: a delta between rows of two "
               "setups is a change of hardware as well as of load.")
st.caption("Each energy figure has bounds (where it lies given the accuracy of every source "
           "of its energy, docs/methodology.md) and, for pooled runs, a spread (the runs' "
           "standard deviation). A difference is judged on the two rows' ratio: what "
           "their sources share (one estimator on one instance type) cancels in it, the "
           "runs' spread and what they do not share widen it. Each sentence gives the "
           "change's 95 % interval, and the charts draw it on each compared bar, around "
           "the baseline's figure: a whisker that reaches the baseline's value is a "
           "change written \"not distinguishable from the baseline\".")
for row in result.per_unit:
    if not row.is_baseline:
        st.markdown(f"**{fmt.md(names[comparison.row_key(row)])}** vs {fmt.md(base_label)}: "
                    f"{fmt.md(headline(row, base))}")

per, million = f"per {unit}", f"per million {units_name}"
throughput_col = f"throughput ({units_name}/instance-h)"
energy_col, co2e_col = f"energy {per}", f"CO2e {per} (operational)"
dynamic_col = f"dynamic energy {per}"
accel_col = f"accelerator energy {per}"
embodied_col, cost_col = f"embodied CO2e {per}", f"cost {million}"
# The row's name, how its energy was obtained, then the figures the sentences above
# compare; counts and the rest after them. The deltas are the sentences' (not repeated
# here): at a laptop's width the columns past the eighth are off screen, and an
# estimate read beside measured rows must say so where it is seen.
table = pd.DataFrame([{
    "group": names[comparison.row_key(r)], fmt.ENERGY_IS: fmt.energy_is(r.sources),
    # where rows differ, what each energy figure holds, before the figures
    "idle policy": r.idle_policy or "not recorded",
    energy_col: r.energy_per_unit_j, dynamic_col: r.dynamic_per_unit_j,
    co2e_col: r.co2e_per_unit_g, cost_col: r.cost_per_million_usd,
    throughput_col: r.units_per_hour,
    # the energy's bounds and its runs' spread, just past the compared figures (their
    # error bars are on the chart below)
    "bounds": bounds_text(r.energy_bounds_per_unit_j), "runs (mean ± spread)": spread_text(r),
    # What each setup computes on ("1 x AWS Inferentia2" against "1 x NVIDIA T4"): the
    # models its agents registered, else the catalog's (compare_data.accelerator_names,
    # as the command names them); and their part of the energy.
    "accelerators": " + ".join(r.accelerators) or fmt.UNKNOWN,
    accel_col: r.accelerator_per_unit_j,
    "instance types": "+".join(r.instance_types),
    "jobs": r.runs, units_name: r.units, "instance-hours": r.instance_hours,
    embodied_col: r.embodied_per_unit_g, "power per instance": r.power_per_instance_w,
} for r in result.per_unit])
if result.table.by == "instance_type" or per_setup:
    table = table.drop(columns="instance types")  # the row's name says it already
if policy != MIXED:
    table = table.drop(columns="idle policy")  # one policy: the caption above says it
NAMED = ui.named_columns("group")
# Widths in pixels so the name, the provenance and the five figures the sentences compare
# (energy, dynamic energy, CO2e, cost, throughput) fit a 1,400 px window beside the
# sidebar (about 900 px of table); counts and the rest follow past the edge.
FIGURE_PX = {energy_col: 115, dynamic_col: 125, co2e_col: 115, cost_col: 140,
             throughput_col: 125}
SHORT = {**ui.named_columns("group", name_px=135, energy_is_px=165),
         energy_col: st.column_config.Column(
             f"energy / {unit}", width=FIGURE_PX[energy_col],
             help=f"energy {per}: all the energy the job was given, its idle share included"),
         co2e_col: st.column_config.Column(
             f"CO2e / {unit}", width=FIGURE_PX[co2e_col],
             help=f"CO2e {per}: operational (location-based); embodied CO2e apart"),
         dynamic_col: st.column_config.Column(
             f"dynamic / {unit}", width=FIGURE_PX[dynamic_col],
             help=f"dynamic energy {per}: the energy above the node's idle power"),
         cost_col: st.column_config.Column(
             f"cost / 1M {units_name}", width=FIGURE_PX[cost_col],
             help=f"cost {million}: hourly price × hours held"),
         throughput_col: st.column_config.Column(
             f"{units_name} / inst-h", width=FIGURE_PX[throughput_col],
             help="throughput: units per instance-hour, every node a job held counted")}
st.dataframe(fmt.styled(table, {
    units_name: fmt.count, "instance-hours": units.sig, throughput_col: fmt.count,
    energy_col: fmt.energy, dynamic_col: fmt.energy, co2e_col: fmt.mass,
    embodied_col: fmt.mass, cost_col: fmt.usd, accel_col: fmt.energy,
    "power per instance": fmt.power}), hide_index=True, width="stretch",
    placeholder=fmt.UNKNOWN, column_config=SHORT)
served = [r for r in result.per_unit if r.latency_s]
if served:
    # Serving jobs (--serving-metrics): the latency each row was served at, beside its
    # energy per unit, as `joulestat compare` prints it (docs/llm-serving.md).
    st.caption(f"Served latency from the serving engine's histograms (p50 / p99), beside "
               f"the energy {per}: `joulestat compare --latency-target ttft_p99=0.5` names "
               "the row of least energy that meets a target.")
    latency_rows = []
    for r in served:
        entry: dict[str, object] = {"group": names[comparison.row_key(r)],
                                    energy_col: r.energy_per_unit_j}
        for kind, values in r.latency_s.items():
            for quantile, seconds in values.items():
                entry[f"{kind.upper()} {quantile}"] = seconds
        latency_rows.append(entry)
    latency_table = pd.DataFrame(latency_rows)
    st.dataframe(fmt.styled(latency_table, {
        energy_col: fmt.energy,
        **{c: fmt.seconds for c in latency_table.columns if c not in ("group", energy_col)}}),
        hide_index=True, width="stretch", placeholder=fmt.UNKNOWN, column_config=NAMED)
steady_rows = [r for r in result.per_unit if r.steady_state is not None]
if steady_rows:
    # Serving jobs with a trace: the energy per unit inside their steady-state windows
    # (ML.ENERGY's way), beside the whole-job figure above (docs/llm-serving.md).
    st.caption(f"Steady state: the energy {per} inside each run's steady-state window (the "
               "batch full, before the drain), from the valid windows only; the table above "
               "is the whole job, warm-up and drain included. A window is valid when power "
               "and the engine's metrics cover 95 % of it and its J per token varies under 3 %.")
    steady_table = pd.DataFrame([{
        "group": names[comparison.row_key(r)],
        "whole job": r.energy_per_unit_j,
        "steady state": r.steady_state.energy_per_unit_j,
        "valid windows": f"{r.steady_state.valid_runs} of {r.steady_state.runs}",
        "window time": r.steady_state.window_s if r.steady_state.valid_runs else None,
        "why not": "; ".join(r.steady_state.reasons),
    } for r in steady_rows if r.steady_state is not None])
    st.dataframe(fmt.styled(steady_table, {
        "whole job": fmt.energy, "steady state": fmt.energy, "window time": fmt.duration}),
        hide_index=True, width="stretch", placeholder=fmt.UNKNOWN, column_config=NAMED)
if any(r.energy_class and r.energy_class != "measured" for r in result.per_unit):
    st.caption("Rows whose energy is not all measured rest on the estimate they name "
               "(docs/methodology.md): compare them with measured rows with care.")

if result.per_run:
    st.caption(f"These jobs counted no {fmt.md(units_name)}: compared per run, as "
               "`joulestat compare` lists them (no deltas against a per-unit baseline).")
    per_run = pd.DataFrame([{
        "group": names[comparison.row_key(r)], fmt.ENERGY_IS: fmt.energy_is(r.sources),
        "idle policy": r.idle_policy or "not recorded",
        "energy per run": r.energy_per_run_j, "bounds": bounds_text(r.energy_bounds_per_run_j),
        "runs (mean ± spread)": spread_text(r),
        "dynamic energy per run": r.dynamic_per_run_j,
        "CO2e per run (operational)": r.co2e_per_run_g,
        "cost per run": r.cost_per_run_usd, "jobs": r.runs,
    } for r in result.per_run])
    if policy != MIXED:
        per_run = per_run.drop(columns="idle policy")
    st.dataframe(fmt.styled(per_run, {"energy per run": fmt.energy, "cost per run": fmt.usd,
                                      "dynamic energy per run": fmt.energy,
                                      "CO2e per run (operational)": fmt.mass}),
                 hide_index=True, width="stretch", placeholder=fmt.UNKNOWN,
                 column_config=NAMED)

panels = [(energy_col, "J", fmt.energy), (co2e_col, "g", fmt.mass), (cost_col, "$", fmt.usd),
          (throughput_col, "", fmt.count)]


def intervals(difference: Callable[[ComparisonRow, ComparisonRow], Difference | None],
              figure: Callable[[ComparisonRow], float | None]) -> pd.DataFrame:
    """Each compared per-unit row's whisker: the 95 % interval of its difference from
    the baseline (``difference``, the one rule) drawn around the baseline's ``figure``,
    so that it holds the row's own figure and reaches the baseline's exactly when the
    difference is not real, as the sentence above says; NaN on the baseline and where
    it cannot be said."""
    found = []
    for r in result.per_unit:
        known = None if r.is_baseline or base is None else difference(r, base)
        base_figure = None if base is None else figure(base)
        if known is None or known.interval is None or base_figure is None:
            found.append({"low": None, "high": None, "said": fmt.UNKNOWN})
            continue
        found.append({"low": base_figure * known.interval[0],
                      "high": base_figure * known.interval[1],
                      "said": interval_words(known, with_change=True)})
    return pd.DataFrame(found, index=table.index).astype({"low": "float64", "high": "float64"})


ERRORS = {energy_col: intervals(energy_difference, lambda r: r.energy_per_unit_j),
          co2e_col: intervals(co2e_difference, lambda r: r.co2e_per_unit_g)}
for pair in (panels[:2], panels[2:]):
    cols = st.columns(2)
    for col, (column, unit_of, shown) in zip(cols, pair, strict=True):
        data = table[["group", column]].join(ERRORS[column]) if column in ERRORS else (
            table[["group", column]])
        data = data.dropna(subset=[column])
        with col:
            if data.empty:
                st.caption(f"{fmt.md(column)}: unknown (an instance type without catalog data).")
                continue
            divisor, axis_unit = (units.scale_for(list(data[column]), unit_of)
                                  if unit_of in ("J", "g") else (1.0, unit_of))
            title = column if not axis_unit else f"{column} ({axis_unit})"
            data = data.assign(value=data[column] / divisor, text=data[column].map(shown))
            error = None
            if column in ERRORS:
                data = data.assign(low=data["low"] / divisor, high=data["high"] / divisor)
                error = ("low", "high", "said")
            st.altair_chart(charts.compare_bars(data, group="group", value="value",
                                                title=title, baseline=base_label,
                                                text="text", error=error), width="stretch")

st.subheader("Sizing for a service level")
best = max((r.units_per_hour or 0.0 for r in result.per_unit), default=0.0)
default_sla = float(10 ** math.ceil(math.log10(max(best, 1.0) * 2)))
if "cmp_sla" not in st.session_state:
    try:
        wanted_sla = float(query.get("sla", "")) if first_view else None
    except ValueError:
        wanted_sla = None
    st.session_state["cmp_sla"] = (wanted_sla if wanted_sla and math.isfinite(wanted_sla)
                                   and wanted_sla >= 1 else default_sla)
sla = st.number_input(f"Required throughput ({fmt.md(units_name)} per hour)", min_value=1.0,
                      step=default_sla / 10, key="cmp_sla", format="%.0f")
sized = found.against(base_key, float(sla))
fleet = pd.DataFrame([{
    "group": names[comparison.row_key(r)], fmt.ENERGY_IS: fmt.energy_is(r.sources),
    "instances": r.instances_needed,
    "fleet power": r.fleet_power_w, "fleet cost per hour": r.fleet_cost_per_hour_usd,
} for r in sized.per_unit if r.instances_needed is not None])
st.dataframe(fmt.styled(fleet, {"fleet power": fmt.power, "fleet cost per hour": fmt.usd}),
             hide_index=True, width="stretch", placeholder=fmt.UNKNOWN, column_config=NAMED)
st.caption(f"Instances = ⌈SLA ÷ {fmt.md(units_name)} per instance-hour⌉; fleet power and "
           "cost scale the measured average power and cost of one instance-hour (its "
           "attributed energy and list price), as `joulestat compare --sla` sizes it.")

if result.notes:
    with st.expander(f"Notes ({len(result.notes)})"):
        for note in result.notes:
            st.caption(fmt.md(note))

settings = {"kind": kind, "unit": unit, "by": "job" if picked is not None else by,
            "period": period, "baseline": base_key, "sla": f"{float(sla):g}"}
if picked is not None:
    settings["jobs"] = ",".join(picked)
if {k: query.get(k) for k in (*settings, "jobs")} != {**{"jobs": None}, **settings}:
    query.from_dict(settings)
