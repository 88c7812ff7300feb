"""Overview: the fleet now (nodes, power, running jobs) and totals over a period.

Period totals are node energy (every joule the nodes drew, attributed to a job or not),
so they answer "what did the fleet cost", not "what did the jobs cost" (see Jobs).
CO2e is operational (energy × PUE × grid intensity of each node's region), known
whenever the energy is; embodied emissions are shown apart, never folded in. Cost is
the hourly price × hours each node reported. The measured share counts only energy
read from a hardware counter (:mod:`joulestat.reports.sources`): an imported estimate or a
CodeCarbon CSV that does not say how it measured is not "measured". Nodes that exist
only through ``joulestat import`` hold exported snapshots: they are marked imported,
never "reporting", and have no "power now". A node reports while its ticks do: one whose
newest tick is :data:`QUIET_FLUSHES` of its writer's flushes old (30 s at the agent's
default 10 s; the writer records its interval with its lease) is "silent", with how long
ago it last measured, and has no "power now" (its last tick's power is history, not
now), whatever its agent's heartbeat says: an agent whose sensors hang keeps its
heartbeat. A writer that gave up the node's lease (a stopped agent, an ended run) or let
it lapse (a dead one) is said so at once, newest tick or not.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import pandas as pd
import streamlit as st

from joulestat.core import units
from joulestat.dashboard import analysis, charts, costing, fmt, state, ui
from joulestat.reports.sources import CLASSES, MEASURED

# Ticks reach the store a flush at a time; a node is silent once its newest tick is this
# many flushes old (issue 46: within 3 intervals, 30 s at the default).
QUIET_FLUSHES = 3
DEFAULT_FLUSH_S = 10.0  # the agent's --flush-interval default, for a writer that did not say
LOOKBACK_S = 86400.0  # how far back a silent node's last tick is looked for
# Running jobs listed here: a fleet runs tens of thousands at once, a table of them all
# would take seconds to read and draw (issue 28) and nobody reads it; the Jobs page does.
RUNNING_SHOWN = 100

url, now, tz = ui.open_page("Overview")
nodes = state.nodes(url)
imported = state.imported(url)
live = [n for n in nodes if n.node not in imported]
until = state.window_end_s(now)  # a window up to now ends here
last_ticks = state.last_ticks_s(url, now, LOOKBACK_S)


def quiet_after_s(node: state.NodeSummary) -> float:
    """How old ``node``'s newest tick may be while it still reports."""
    return QUIET_FLUSHES * (node.flush_interval_s or DEFAULT_FLUSH_S)


reporting_now = {n.node for n in live if n.writing(now) is not False
                 and now - last_ticks.get(n.node, -1e18) <= quiet_after_s(n)}
node_sources = state.energy_sources(url, tuple(n.node for n in nodes))

label, length_s = ui.period_picker("overview_period")
since = 0.0 if length_s is None else now - length_s
sources = state.sources(url, since, until)
node_energy: defaultdict[str, float] = defaultdict(float)
for row in sources:
    if row.component not in analysis.OVERLAPPING:
        node_energy[row.node] += row.energy_j
held_s = state.covered(url, since, until)
node_costs = {n.node: costing.node_cost(n.instance_type, n.region, node_energy.get(n.node, 0.0),
                                        held_s.get(n.node, 0.0)) for n in nodes}
energy_j = sum(node_energy.values())
operational = sum(c.operational_g or 0.0 for c in node_costs.values())
provenance = analysis.provenance_totals(sources)



def at_least(values: dict[str, float | None], shown: Callable[[float], str]) -> str:
    """The sum, or "≥ the known part" when some nodes' figure is unknown (an unknown
    embodied figure or price is not zero, and one such node must not hide the rest);
    "unknown" when every node's is ("≥ $0" would read as a figure)."""
    known = [v for v in values.values() if v is not None]
    if values and not known:
        return fmt.UNKNOWN
    total = shown(sum(known))
    return total if len(known) == len(values) else f"≥ {total}"


def unknown_on(values: dict[str, float | None]) -> str:
    missing = sorted(node for node, v in values.items() if v is None)
    return f"; unknown for {fmt.md(', '.join(missing))} (not in the catalog)" if missing else ""


embodied_by_node = {node: c.embodied_g for node, c in node_costs.items()}
cost_by_node = {node: c.cost_usd for node, c in node_costs.items()}
fleet = st.columns(4)
fleet[0].metric("Nodes", len(live), help=f"nodes with an agent; {len(imported)} more known "
                "only from imported files" if imported else "nodes with an agent")
fleet[1].metric("Instance types", len({n.instance_type for n in nodes}))
fleet[2].metric("Jobs running", state.running_count(url))
totals = st.columns(4)
totals[0].metric(f"Energy, {ui.SHORT[label]}", fmt.kwh(energy_j),
                 help=f"{fmt.energy(energy_j)} drawn by all nodes, {label.lower()}")
totals[1].metric("CO2e (operational)", fmt.mass(operational),
                 help="energy × PUE × grid intensity of each node's region (location-based)")
totals[2].metric("Embodied CO2e", at_least(embodied_by_node, fmt.mass),
                 help="manufacturing emissions for the hours held, apart from operational"
                      + unknown_on(embodied_by_node))
totals[3].metric("Cost", at_least(cost_by_node, fmt.usd),
                 help="hourly price × hours each node reported in the period; prices: "
                      f"{costing.price_source()}" + unknown_on(cost_by_node))
shares = [f"**{fmt.share(provenance[c] / energy_j)}** {fmt.md(c)}" for c in CLASSES
          if energy_j and provenance.get(c)]
st.caption(f"Energy in the period: {', '.join(shares) or 'none'}. Only energy read from a "
           "hardware counter counts as measured; estimates (`model:*`, also when imported) "
           "and imports that do not say how they measured (`import:codecarbon` CPU) do not. "
           f"Times in {ui.tz_label(tz)}.")
if MEASURED not in provenance and energy_j:
    st.warning("None of this period's energy was measured: every figure rests on "
               "documented estimates (see docs/methodology.md).", icon=":material/info:")

power = {node: watts for node, watts in state.current_power(url).items()
         if node in reporting_now}


def silent_for(node: state.NodeSummary) -> str:
    """Why a silent node is (its writer stopped, or went quiet) and how long ago it last
    measured, as the Nodes table says it."""
    last = last_ticks.get(node.node)
    ago = (f"last tick {fmt.duration(now - last)} ago" if last is not None
           else f"no tick in {fmt.duration(LOOKBACK_S)}")
    if node.writing(now) is False:
        why = "stopped" if node.lease_until_s is None else "writer gone"
        return f"no: {why}, {ago}"
    return f"no: {ago}"


# One chart per row: their legends sit right of the plot and name sources in full.
with st.container():
    st.subheader("Power now")
    power_rows = [{"node": f"{n.node} ({n.instance_type})", "component": component,
                   "power_w": watts, "text": fmt.power(watts)}
                  for n in live for component, watts in power.get(n.node, {}).items()
                  if component not in analysis.OVERLAPPING]
    if power_rows:
        st.altair_chart(charts.stacked_bars(
            pd.DataFrame(power_rows), category="node", value="power_w", stack="component",
            value_title="Power (W)", category_title="node (instance type)", text="text"),
            width="stretch")
    else:
        st.caption("No node reports now (a tick in its last "
                   f"{QUIET_FLUSHES} flushes, {fmt.duration(QUIET_FLUSHES * DEFAULT_FLUSH_S)} "
                   "by default).")
    silent = sorted(n.node for n in live if n.node not in reporting_now)
    if silent:
        st.caption(f"Silent nodes (no tick in their last {QUIET_FLUSHES} flushes, or their "
                   f"agent stopped) have no power now: {fmt.md(', '.join(silent))}.")
    if imported:
        st.caption(f"Imported nodes have no power now: {fmt.md(', '.join(sorted(imported)))}.")
with st.container():
    st.subheader("Energy by source")
    source_rows = [{"class": analysis.provenance_class(r.source), "source": r.source,
                    "energy_j": r.energy_j}
                   for r in sources if r.component not in analysis.OVERLAPPING]
    if source_rows:
        frame = pd.DataFrame(source_rows).groupby(["class", "source"], as_index=False).sum()
        divisor, unit = units.scale_for(list(frame["energy_j"] / units.J_PER_WH), "Wh")
        frame["energy"] = frame["energy_j"] / units.J_PER_WH / divisor
        frame["text"] = frame["energy_j"].map(fmt.kwh)
        st.altair_chart(charts.stacked_bars(
            frame, category="class", value="energy", stack="source",
            value_title=f"Energy ({unit})", category_title="provenance", text="text",
            height=max(120, 22 * frame["source"].nunique() + 30)), width="stretch")  # legend
    else:
        st.caption("No energy in this period.")


def reporting(node: state.NodeSummary) -> str:
    """Whether a node still measures (see the module's docstring); an imported node
    never does."""
    if node.node in imported:
        return "imported, no agent"
    return "yes" if node.node in reporting_now else silent_for(node)


st.subheader("Nodes")
period_energy = f"energy ({ui.SHORT[label]})"
# The name, how its energy was obtained, whether it measures now, then the figures; the
# CPU model last: at a laptop's width the columns past the eighth are off screen.
node_frame = pd.DataFrame([{
    "node": n.node,
    fmt.ENERGY_IS: fmt.energy_is(node_sources.get(n.node, ())),
    "reporting": reporting(n),
    period_energy: node_energy.get(n.node, 0.0),
    "CO2e (operational)": node_costs[n.node].operational_g,
    "cost": node_costs[n.node].cost_usd,
    "power now": (sum(w for c, w in power[n.node].items() if c not in analysis.OVERLAPPING)
                  if n.node in power else None),
    "instance type": n.instance_type,
    "embodied CO2e": node_costs[n.node].embodied_g,
    "region": n.region,
    "CPU": n.cpu_model,
} for n in nodes])
st.dataframe(fmt.styled(node_frame, {
    "power now": fmt.power, period_energy: fmt.kwh,
    "CO2e (operational)": fmt.mass, "embodied CO2e": fmt.mass, "cost": fmt.usd}),
    hide_index=True, width="stretch", placeholder=fmt.UNKNOWN,
    height=min(36 * (len(node_frame) + 1) + 4, 740),  # every node, imported ones too
    column_config={**ui.named_columns("node", 150, 230), "CO2e (operational)": st.column_config
                   .Column("CO2e", help="operational: energy × PUE × grid intensity; "
                                        "embodied apart")})

st.subheader("Jobs running")
running = state.jobs(url, status="running", newest=RUNNING_SHOWN)
if running:
    running_now = state.running_count(url)
    if running_now > len(running):
        st.caption(f"The {len(running)} started last of {running_now:,} running jobs; "
                   "the Jobs page lists them all (Status: running).")
    st.dataframe(pd.DataFrame([{
        "name": j.name,
        fmt.ENERGY_IS: fmt.energy_is(s for node, _t in j.nodes
                                     for s in node_sources.get(node, ())),
        "energy so far": fmt.energy(j.total_j),
        "units": ", ".join(f"{fmt.count(v)} {fmt.plural(u)}" for u, v in j.units.items()),
        "running for": fmt.duration(now - j.started_s),
        "nodes": ", ".join(f"{node} ({itype})" for node, itype in j.nodes),
        "kind": j.kind,
        "started": ui.to_local(j.started_s, tz),
        "id": analysis.short_id(j.id),
    } for j in running]), hide_index=True, width="stretch",
        placeholder=fmt.UNKNOWN, column_config=ui.named_columns("name"))
else:
    st.caption("No job is running.")
