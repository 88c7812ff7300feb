"""Job detail: one job's power, work, provenance, footprint and bottlenecks.

The job comes from the ``job`` query parameter (the Jobs page links here with it, and
the URL can be shared; an id, a unique id prefix or a name, read as every command reads
a job: :func:`joulestat.store.job_refs.resolve_job`) or the picker ("name · started ·
instance type"). Power is the job's attributed power: its dynamic share plus its share
of idle, per component, from the same rows the totals sum, so the area under the curve
is the energy in the header; each bucket's power is the average of the rows that ended
in it, so a steady job draws a flat line to its end. CO2e is operational, embodied
apart; an imported CodeCarbon run shows CodeCarbon's own figure beside it. Each
component's badge says measured, estimated or not stated, by the one rule of
:mod:`joulestat.reports.sources`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict

import pandas as pd
import streamlit as st

from joulestat.carbon.footprint import METHODOLOGY
from joulestat.core import units
from joulestat.core.csv_cells import text_cell
from joulestat.core.model_units import is_model_key
from joulestat.core.redact import redact_labels
from joulestat.dashboard import analysis, charts, costing, downloads, fmt, state, ui
from joulestat.reports.external import comparison_note, external_figures, shown_labels
from joulestat.reports.idle import job_idle_policy, policy_words
from joulestat.reports.series import headline_unit, work_so_far
from joulestat.reports.sources import WHY, sources_class

BADGE_COLORS = {"measured": "green", "estimated": "orange", "unstated": "red",
                "replay": "gray", "mixed": "violet"}
BADGE_WORDS = {"unstated": "not stated"}

url, now, tz = ui.open_page("Job detail")

choices = state.choices(url)
known = {c.id: c for c in choices}
wanted = st.query_params.get("job")
options = [c.id for c in choices]
lookup = state.lookup_job(url, wanted) if wanted and wanted not in known else None
if lookup is not None and lookup.job_id is not None:  # a name or an id prefix
    for note in lookup.notes:
        st.info(fmt.md(note))
    wanted = lookup.job_id
if wanted and wanted not in known:
    options.insert(0, wanted)
if not options:
    st.info("No jobs yet. Measure one with `joulestat run --name NAME --kind training -- CMD` "
            "(see docs/jobs.md).")
    st.stop()


def choice_label(job_id: str) -> str:
    """``name · started · instance type``: what a person recognises a run by."""
    found = known.get(job_id)
    if found is None:
        return job_id
    return (f"{found.name} · {fmt.local_time(found.started_s, tz)} · "
            f"{'+'.join(found.instance_types) or 'no node'}")


if wanted and st.session_state.get("detail_pick") != wanted:
    st.session_state["detail_pick"] = wanted
picked = st.selectbox("Job", options, key="detail_pick", format_func=choice_label)
if st.query_params.get("job") != picked:
    st.query_params["job"] = picked
job = state.detail(url, picked)
if job is None:
    st.warning(fmt.md(lookup.error) if lookup is not None and lookup.error and picked == wanted
               else f"No job with id {fmt.code(picked)} in this store.")
    st.stop()

cost = costing.job_cost(job, now)
counted_units = [u for u, n in job.units.items() if n > 0 and not is_model_key(u)]
# Per which unit: the one the user picks, by default the kind's usual one (a training
# run's samples, not the tokens it also counted and which outnumber them).
default_unit = headline_unit(job.kind, {u: job.units[u] for u in counted_units})
unit = (st.selectbox("Per", counted_units, index=counted_units.index(default_unit),
                     key="detail_unit", format_func=fmt.md)
        if len(counted_units) > 1 else default_unit or "")
count = job.units.get(unit, 0.0) if unit else 0.0
span_s = job.held_s(now)
imported_nodes = state.imported(url) & {p.node for p in job.per_node}
# Names, labels, node names and units are users' text: fmt.md shows them as typed
# (Streamlit renders Markdown in every call below), never as links or images.
st.subheader(f"{fmt.md(job.name)} · {fmt.md(job.kind)} · {fmt.md(job.status)}")
st.caption(f"{fmt.code(job.id)} · started {fmt.local_time(job.started_s, tz)}"
           + (f", ended {fmt.local_time(job.ended_s, tz)}" if job.ended_s else ", running")
           + f" ({fmt.duration(span_s)}) · {ui.tz_label(tz)} · "
           + ", ".join(f"{fmt.md(node)} ({fmt.md(itype)})" for node, itype in job.nodes)
           + ("" if not job.labels else " · " + ", ".join(
               fmt.md(f"{k}={v}") for k, v in redact_labels(shown_labels(job.labels)).items())))
external = external_figures(job.labels)
footprint = st.columns(4)
footprint[0].metric("Energy", fmt.energy(job.total_j), help=fmt.kwh(job.total_j))
footprint[1].metric("CO2e (operational)", fmt.mass(cost.operational_g),
                    help="energy × PUE × grid intensity of each node's region "
                         f"(location-based); operational + embodied: {fmt.mass(cost.total_g)}")
footprint[2].metric("Embodied CO2e", fmt.mass(cost.embodied_g),
                    help="manufacturing emissions for the time each node was held, kept "
                         "apart; unknown when an instance type is not in the catalog")
footprint[3].metric("Cost", fmt.usd(cost.cost_usd),
                    help=f"hourly price × hours each node was held; prices: "
                         f"{costing.price_source()}")
# Energy per unit twice, in all and above idle, under the idle policy the agent recorded:
# on a VM most of a small job's energy can be idle power (joulestat.reports.idle).
dynamic_j = sum(job.dynamic_j.values())
policy = job_idle_policy(job)
work = st.columns(max(4, 3 + len(external)))  # a label per quarter of the page's width
work[0].metric(f"Work ({fmt.md(fmt.plural(unit)) if unit else 'units'})",
               fmt.count(count) if unit else fmt.UNKNOWN)
work[1].metric(f"Energy per {fmt.md(unit) if unit else 'unit'}",
               fmt.energy(job.total_j / count) if count else fmt.UNKNOWN,
               help="all the energy the job was attributed (dynamic + its idle share)")
work[2].metric(f"Dynamic energy per {fmt.md(unit) if unit else 'unit'}",
               fmt.energy(dynamic_j / count) if count else fmt.UNKNOWN,
               help="the part above the node's idle power: what the work itself added")
said = policy_words(policy)
# The energy's bounds, from its sources' accuracy (the report's, docs/methodology.md).
bounds = state.job_bounds(url, job.id)
within = (f"within {units.energy_range(bounds.total.low, bounds.total.high)} given the "
          "accuracy of its sources" if bounds.total is not None else
          "bounds unknown: no accuracy is known for " + ", ".join(bounds.unknown))
st.caption(f"Energy {fmt.energy(job.total_j)} ({within}), of which {fmt.energy(dynamic_j)} "
           f"dynamic (above idle) and {fmt.energy(job.total_j - dynamic_j)} idle. "
           f"{said[:1].upper() + said[1:]}.")
for column, figures in zip(work[3:], external, strict=False):
    column.metric(f"CO2e ({fmt.md(figures.tool)}'s own)", fmt.mass(figures.co2e_g),
                  help=f"as {fmt.md(figures.tool)} wrote it in its CSV, with its own intensity")
for figures in external:
    st.info(fmt.md(comparison_note(figures, cost.operational_g)), icon=":material/compare_arrows:")
if imported_nodes:
    profile = ("CodeCarbon records one total per component, so power is drawn flat over "
               "the run" if external else "the power profile is the exported report's, bin "
               "by bin")
    st.caption(f"Imported from a file ({fmt.md(', '.join(sorted(imported_nodes)))}): {profile}; "
               "nothing here is live.")

# Provenance: which source each component's energy came from, and what that makes it.
provenance: defaultdict[str, dict[str, float]] = defaultdict(dict)
node_sources: defaultdict[str, set[str]] = defaultdict(set)  # for the per-node table
for row in state.job_sources(url, job.id):
    node_sources[row.node].add(row.source)
    per = provenance[row.component]
    per[row.source] = per.get(row.source, 0.0) + row.energy_j
badges = st.container(horizontal=True)
for component, by_source in sorted(provenance.items()):
    verdict = sources_class(by_source)
    badges.badge(f"{fmt.md(component)}: {BADGE_WORDS.get(verdict, verdict)} "
                 f"({fmt.md(', '.join(sorted(by_source)))})",
                 color=BADGE_COLORS.get(verdict, "gray"), help=WHY.get(verdict))

# CPU bottleneck, per node that has accelerators and an agent.
bucket_s, series = state.job_series(url, job.id, span_s)
# A bucket the job fits in is the whole job, not "1 min" of a 12-second job.
bucket_words = ("one point: the whole job" if bucket_s >= span_s
                else f"{fmt.duration(bucket_s)} buckets")
for part in job.per_node:
    if part.node in imported_nodes:
        continue
    ranges = state.power_range(url, part.node)
    verdict = analysis.cpu_bottleneck(
        part.node, state.node_series(url, part.node, part.started_s, part.end_s(now), bucket_s),
        ranges)
    where = f"**{fmt.md(part.node)}** ({fmt.md(part.instance_type)})"
    if verdict.state == "cpu-bound":
        st.warning(f"CPU bottleneck on {where}: for {verdict.flagged_share:.0%} of the run the "
                   f"accelerators sat at {verdict.accelerator_load:.0%} of their power range "
                   f"while the CPU ran at {verdict.cpu_load:.0%} of its own. Data loading or "
                   "preprocessing is likely holding the accelerators back.",
                   icon=":material/speed:")
    elif verdict.state == "ok":
        st.caption(f"No CPU bottleneck on {where}: accelerators at "
                   f"{verdict.accelerator_load:.0%}, CPU at {verdict.cpu_load:.0%} of their "
                   "observed power ranges.")
    elif verdict.state == "unknown":
        st.caption(f"CPU-bottleneck check on {where}: {fmt.md(verdict.reason)}.")

# Power over time, stacked by component.
nodes = [p.node for p in job.per_node]
view = st.radio("Nodes", ["all nodes", *nodes], horizontal=True, key="detail_view",
                format_func=fmt.md) if (
    len(nodes) > 1) else "all nodes"
# Every point ends by the job's end: a bucket reaching past it (buckets are aligned to
# the clock; the tick holding the end closes after it; an import's last row) holds only
# the job's part, which ended with the job, so no chart runs on past the job.
shown_end_s = job.end_s(now)
power_rows = [{"time": ui.to_local(min(p.bucket_end_s, shown_end_s), tz),
               "component": p.component, "node": p.node, "power_w": p.power_w}
              for p in series if view == "all nodes" or p.node == view]
# Each step is drawn up to its bucket's end: a point where the first bucket begins (the
# job's start at the latest) gives it its width; a one-bucket job is otherwise no line.
firsts: dict[tuple[str, str], dict[str, object]] = {}
for p in series:
    if (view == "all nodes" or p.node == view) and (p.node, p.component) not in firsts:
        begin_s = max(job.started_s, p.bucket_end_s - bucket_s)
        firsts[(p.node, p.component)] = {"time": ui.to_local(begin_s, tz),
                                         "component": p.component, "node": p.node,
                                         "power_w": p.power_w}
power_rows = [*firsts.values(), *power_rows]
divisor, power_unit = units.scale_for([r["power_w"] for r in power_rows], "W")
st.subheader(f"Power over time ({power_unit}, {bucket_words})")
if power_rows:
    frame = pd.DataFrame(power_rows).groupby(["time", "component"], as_index=False)[
        "power_w"].sum()
    frame["when"] = frame["time"].dt.strftime("%Y-%m-%d %H:%M:%S")
    frame["power"] = frame["power_w"] / divisor
    frame["text"] = frame["power_w"].map(fmt.power)
    area = charts.stacked_area(
        frame, time="time", value="power", stack="component",
        value_title=f"Power ({power_unit})", time_title=f"time ({ui.tz_label(tz)})",
        text="text", axis_format=charts.time_format(span_s))
    # A band around the total: each component's power at its bounds relative to its
    # energy (the job's), so an estimated CPU widens it and measured accelerators not.
    scale = {c: (b.low / e, b.high / e) for c, b in bounds.components.items()
             if b is not None and (e := job.energy_j(c)) > 0}
    if bounds.total is not None and scale:
        frame["low_w"] = [w * scale.get(c, (1.0, 1.0))[0]
                          for w, c in zip(frame["power_w"], frame["component"], strict=True)]
        frame["high_w"] = [w * scale.get(c, (1.0, 1.0))[1]
                           for w, c in zip(frame["power_w"], frame["component"], strict=True)]
        band = frame.groupby(["time", "when"], as_index=False)[["low_w", "high_w"]].sum()
        band["low"], band["high"] = band["low_w"] / divisor, band["high_w"] / divisor
        band["text"] = [units.power_range(lo, hi)
                        for lo, hi in zip(band["low_w"], band["high_w"], strict=True)]
        st.altair_chart(charts.with_band(area, band, time="time", low="low", high="high",
                                         text="text"), width="stretch")
        st.caption("The dashed lines: where the total power lies given its sources' "
                   "accuracy (the job's bounds, component by component).")
    else:
        st.altair_chart(area, width="stretch")
else:
    st.caption("No energy rows for this job yet.")

if len(job.per_node) > 1:
    st.subheader("Per node")
    components = sorted({c for p in job.per_node for c in (*p.dynamic_j, *p.idle_j)},
                        key=lambda c: (list(charts.COMPONENT_COLORS).index(c)
                                       if c in charts.COMPONENT_COLORS else 99, c))
    per_node = pd.DataFrame([{
        "node": p.node, fmt.ENERGY_IS: fmt.energy_is(node_sources[p.node]),
        "instance type": p.instance_type, "region": p.region,
        **{c: p.dynamic_j.get(c, 0.0) + p.idle_j.get(c, 0.0) for c in components},
        "total": p.total_j,
        "share of job": p.total_j / job.total_j if job.total_j else None,
        "units": ", ".join(f"{fmt.count(v)} {fmt.plural(u)}" for u, v in p.units.items()),
    } for p in job.per_node])
    st.dataframe(fmt.styled(per_node, {**{c: fmt.energy for c in components},
                                       "total": fmt.energy, "share of job": fmt.share}),
                 hide_index=True, width="stretch", placeholder=fmt.UNKNOWN,
                 column_config=ui.named_columns("node"))

# Work over time: the headline's figures so far (its energy, all of it, over its unit's
# count, and that count over the time the job ran), at each bucket's end: the last
# point is the headline. Per bucket they would jitter, as the units arrive a flush after
# the energy they cost.
work_points = work_so_far(state.job_energy_rows(url, job.id), state.job_unit_rows(url, job.id),
                     unit, job.started_s, shown_end_s, bucket_s) if unit else []
if work_points:
    frame = pd.DataFrame([{"time": ui.to_local(p.t_s, tz), "when": fmt.local_time(p.t_s, tz),
                           "unit": unit, "rate": p.rate, "energy_per_unit_j": p.energy_per_unit_j}
                          for p in work_points])
    rate_unit = f"{fmt.plural(unit)}/s"
    divisor, energy_unit = units.scale_for(list(frame["energy_per_unit_j"]), "J")
    frame["energy_per_unit"] = frame["energy_per_unit_j"] / divisor
    frame["energy_text"] = frame["energy_per_unit_j"].map(fmt.energy)
    frame["rate_text"] = frame["rate"].map(lambda r: f"{units.sig(r)} {rate_unit}")
    left, right = st.columns(2)
    with left:
        st.subheader(f"Work rate so far ({fmt.md(rate_unit)})")
        st.altair_chart(charts.lines(frame, x="time", y="rate", color="unit",
                                     x_title=f"time ({ui.tz_label(tz)})",
                                     y_title=f"rate ({rate_unit})", temporal=True,
                                     text="rate_text",
                                     axis_format=charts.time_format(span_s)),
                        width="stretch")
    with right:
        st.subheader(f"Energy per {fmt.md(unit)} so far ({energy_unit})")
        st.altair_chart(charts.lines(frame, x="time", y="energy_per_unit", color="unit",
                                     x_title=f"time ({ui.tz_label(tz)})",
                                     y_title=f"energy per {unit} ({energy_unit})",
                                     temporal=True, text="energy_text",
                                     axis_format=charts.time_format(span_s)),
                        width="stretch")
    st.caption(f"Each point: the job's {fmt.md(fmt.plural(unit))} and energy from its start "
               f"to then ({bucket_words}), so the last is the headline's.")

# Downloads: joulestat's report in every format, else the JSON of this page.
st.subheader("Download")
buttons = st.container(horizontal=True)
if downloads.available():
    for kind, (label, extension, mime) in downloads.FORMATS.items():
        buttons.download_button(label, downloads.deferred(state.engine(url), job.id, kind),
                                file_name=f"{job.id}.{extension}", mime=mime,
                                key=f"report_{kind}", on_click="ignore")
    st.caption("The same report `joulestat report` writes; rendered when you click.")
else:
    record = {**asdict(job), "co2e_g": cost.operational_g, "embodied_co2e_g": cost.embodied_g,
              "total_co2e_g": cost.total_g, "cost_usd": cost.cost_usd,
              "provenance": {c: dict(s) for c, s in provenance.items()},
              "external_co2e": [f.as_dict() for f in external],
              "methodology": METHODOLOGY}
    buttons.download_button("Job (JSON)", json.dumps(record, indent=1, default=str),
                            file_name=f"{job.id}.json", mime="application/json")
    st.caption("CSV, HTML and PDF reports need `joulestat.reports`, which this installation "
               "lacks; the JSON holds every figure shown here.")
series_csv = pd.DataFrame([{"bucket_end_s": p.bucket_end_s, "node": text_cell(p.node),
                            "component": text_cell(p.component), "dynamic_j": p.dynamic_j,
                            "idle_j": p.idle_j, "covered_s": p.covered_s, "power_w": p.power_w}
                           for p in series]).to_csv(index=False)
buttons.download_button("Power series (CSV)", series_csv, file_name=f"{job.id}-power.csv",
                        mime="text/csv", key="series_csv", on_click="ignore")
