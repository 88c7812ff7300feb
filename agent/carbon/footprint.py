"""A job's carbon and cost: the one function reports and :mod:`joulestat.carbon.pricing` call.

    operational_co2e_g = Σ_points kWh × PUE(node) × I(node[, time])
    embodied_co2e_g    = Σ_nodes TE × (reserved time / lifetime) × (vCPUs / family max vCPUs)
    cost_usd           = Σ_nodes USD/h × reserved hours

Energy comes in as the job's joules per tick (or per minute once rolled up) per node, as
:func:`joulestat.store.series.job_energy_series` returns them; placement (instance type,
region, how long the node was held) as :class:`NodePlacement`, which
:func:`joulestat.carbon.pricing.placements` builds from a job's parts. Each node resolves
its own intensity, PUE, price and embodied share, so a job spread over a GPU node in one
region and a CPU node in another is charged what each actually cost. Operational and
embodied are kept apart (SCI's O and M): the first rests on measured energy, the second
on coarse server footprints. An unknown price or embodied figure on any node makes the total None,
with a note naming the node, never a silent zero.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from joulestat.carbon import live
from joulestat.carbon.catalog import Price, lookup, price_per_hour
from joulestat.carbon.codecarbon_data import GridData
from joulestat.carbon.embodied import Embodied, embodied_g
from joulestat.carbon.intensity import Intensity, resolve_intensity
from joulestat.carbon.prices import PriceTable
from joulestat.carbon.pue import Pue, pue_for
from joulestat.carbon.units import j_to_kwh, s_to_hours

METHODOLOGY = """\
Operational emissions (SCI's E x I, GHG Protocol Scope 2 location-based): each energy
reading in kWh (J / 3,600,000) x the node's PUE x the node's grid intensity in gCO2e/kWh.
Intensity: an override if set; else the GCP region's published figure, the US state's
EPA eGRID2023 rate (lb/MWh x 454 g per lb), the Canadian province's generation mix x
lifecycle factors, the country's figure (Our World in Data / Ember) or the world average,
all from codecarbon 3.3.2's bundled data; with an Electricity Maps token, energy measured
within the cache TTL of now uses the zone's latest live value instead.
PUE: override, else Cloud Carbon Footprint's per-provider average (AWS 1.14, GCP 1.10,
Azure 1.19, each to 3 digits), else 1.0 for unknown/on-prem facilities.
Embodied emissions (SCI's M, reported apart): the whole server's manufacturing emissions
(CCF method) x reserved time / 4-year life x instance vCPUs / family's largest vCPUs.
Cost: USD per hour x reserved hours; the hourly price is --price-per-hour if set (one
price for all), else the --prices file's row for the instance type, else the catalog's
on-demand list price (its SageMaker column for ml.* types), else unknown.
Offsets and market-based instruments never reduce these figures. Sources: docs/carbon.md.
"""


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where a node of the job ran and for how long it was held (reserved), in seconds."""

    instance_type: str | None
    region: str | None
    duration_s: float


@dataclass(frozen=True, slots=True)
class CarbonSettings:
    """User overrides; each None means "use the data". Applied to every node of a job."""

    carbon_intensity_g_per_kwh: float | None = None
    pue: float | None = None
    price_per_hour_usd: float | None = None
    prices: PriceTable | None = None  # --prices FILE: per-type prices, below the above
    electricity_maps_token: str | None = None
    electricity_maps_url: str = live.DEFAULT_URL
    electricity_maps_ttl_s: float = live.DEFAULT_TTL_S


@dataclass(frozen=True, slots=True)
class NodeFootprint:
    """One node's share, with the provenance of every factor used."""

    node: str
    instance_type: str | None
    region: str | None
    duration_s: float
    energy_kwh: float
    operational_co2e_g: float
    embodied: Embodied
    price: Price
    cost_usd: float | None
    intensity: Intensity  # static (or override) intensity
    live_intensity: Intensity | None  # used for live_energy_kwh of energy_kwh
    live_energy_kwh: float
    pue: Pue
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Footprint:
    """A job's totals (None = unknown, see ``notes``), per-node detail and methodology."""

    energy_kwh: float
    operational_co2e_g: float
    embodied_co2e_g: float | None
    cost_usd: float | None
    nodes: tuple[NodeFootprint, ...]
    notes: tuple[str, ...]
    methodology: str

    @property
    def total_co2e_g(self) -> float | None:
        """Operational + embodied (SCI's C before dividing by R); None if embodied unknown."""
        if self.embodied_co2e_g is None:
            return None
        return self.operational_co2e_g + self.embodied_co2e_g


def _energy_by_node(energy_series: Iterable[tuple[float, str, float]]
                    ) -> dict[str, list[tuple[float, float]]]:
    by_node: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    for t_end_s, node, energy_j in energy_series:
        energy = float(energy_j)
        if math.isnan(energy) or math.isinf(energy) or energy < 0:
            raise ValueError(f"energy for node {node!r} at {t_end_s} must be a finite "
                             f"number >= 0 J, got {energy_j!r}")
        by_node[node].append((float(t_end_s), energy))
    return by_node


def _live_client(overrides: CarbonSettings,
                 client: live.ElectricityMapsClient | None) -> live.ElectricityMapsClient | None:
    if overrides.carbon_intensity_g_per_kwh is not None or not overrides.electricity_maps_token:
        return None
    if client is not None:
        return client
    return live.shared_client(overrides.electricity_maps_token, overrides.electricity_maps_url,
                              overrides.electricity_maps_ttl_s)


def _node_footprint(
    node: str,
    placement: NodePlacement | None,
    points: list[tuple[float, float]],
    overrides: CarbonSettings,
    client: live.ElectricityMapsClient | None,
    now_s: float,
    grid: GridData | None,
) -> NodeFootprint:
    notes: list[str] = []
    if placement is None:
        notes.append(f"node {node!r} has no placement: instance type, region and time held "
                     "unknown")
        placement = NodePlacement(None, None, 0.0)
    if placement.duration_s < 0:
        raise ValueError(f"node {node!r}: duration_s must be >= 0, got {placement.duration_s}")
    intensity = resolve_intensity(placement.region, overrides.carbon_intensity_g_per_kwh,
                                  grid=grid)
    pue = pue_for(placement.instance_type, placement.region, overrides.pue)

    live_value: Intensity | None = None
    live_kwh = 0.0
    operational_g = 0.0
    energy_kwh = 0.0
    if client is not None:
        recent = [p for p in points if now_s - p[0] <= client.ttl_s]
        zone = live.emaps_zone_for(placement.region)
        if recent and zone is None:
            notes.append(f"no Electricity Maps zone known for region {placement.region!r}: "
                         "static intensity")
        elif recent:
            live_value = client.latest(zone)
            if live_value is None:
                notes.append(f"Electricity Maps gave no value for {zone}: static intensity")
    live_window_s = client.ttl_s if client is not None else 0.0
    for t_end_s, energy_j in points:
        kwh = j_to_kwh(energy_j)
        energy_kwh += kwh
        if live_value is not None and now_s - t_end_s <= live_window_s:
            live_kwh += kwh
            operational_g += kwh * pue.value * live_value.g_per_kwh
        else:
            operational_g += kwh * pue.value * intensity.g_per_kwh

    embodied = embodied_g(lookup(placement.instance_type), placement.duration_s)
    price = price_per_hour(placement.instance_type, overrides.price_per_hour_usd,
                           overrides.prices)
    cost = (price.usd_per_hour * s_to_hours(placement.duration_s)
            if price.usd_per_hour is not None else None)
    return NodeFootprint(
        node=node, instance_type=placement.instance_type, region=placement.region,
        duration_s=placement.duration_s, energy_kwh=energy_kwh,
        operational_co2e_g=operational_g, embodied=embodied, price=price, cost_usd=cost,
        intensity=intensity, live_intensity=live_value, live_energy_kwh=live_kwh, pue=pue,
        notes=tuple(notes),
    )


def footprint(
    energy_series: Iterable[tuple[float, str, float]],
    node_placements: Mapping[str, NodePlacement],
    overrides: CarbonSettings | None = None,
    *,
    now_s: float | None = None,
    live_client: live.ElectricityMapsClient | None = None,
    grid: GridData | None = None,
) -> Footprint:
    """Carbon and cost of one job.

    ``energy_series``: ``(t_end_s, node, energy_j)`` of the job's energy per tick or per
    minute per node. ``node_placements``: node -> :class:`NodePlacement`; a node with energy
    but no placement is charged at the world average with unknown cost. ``now_s`` (epoch
    seconds, default now) decides which readings are recent enough for live intensity;
    ``live_client`` replaces the shared Electricity Maps client; ``grid`` codecarbon's tables.
    """
    overrides = overrides if overrides is not None else CarbonSettings()
    now = time.time() if now_s is None else float(now_s)
    by_node = _energy_by_node(energy_series)
    client = _live_client(overrides, live_client)
    nodes = tuple(
        _node_footprint(node, node_placements.get(node), sorted(by_node.get(node, [])),
                        overrides, client, now, grid)
        for node in sorted(set(by_node) | set(node_placements))
    )
    notes: list[str] = [n for node in nodes for n in node.notes]
    unknown_embodied = [n.node for n in nodes if n.embodied.g is None]
    if unknown_embodied:
        notes.append(f"embodied emissions unknown for node(s) {', '.join(unknown_embodied)}: "
                     "total embodied unknown")
    unpriced = [n for n in nodes if n.cost_usd is None]
    for node in unpriced:
        notes.append(f"cost unknown for node {node.node}: {node.price.note}")
    return Footprint(
        energy_kwh=sum(n.energy_kwh for n in nodes),
        operational_co2e_g=sum(n.operational_co2e_g for n in nodes),
        embodied_co2e_g=None if unknown_embodied else sum(
            n.embodied.g for n in nodes if n.embodied.g is not None),
        cost_usd=None if unpriced else sum(n.cost_usd for n in nodes if n.cost_usd is not None),
        nodes=nodes,
        notes=tuple(notes),
        methodology=METHODOLOGY,
    )


def energy_points(node: str, series: Iterable[tuple[float, str, float, float]]
                  ) -> list[tuple[float, str, float]]:
    """``job_energy_series(engine, job_id, node)`` rows (t_end_s, component, dynamic_j,
    idle_j) -> ``(t_end_s, node, energy_j)`` points, components summed per time."""
    totals: defaultdict[float, float] = defaultdict(float)
    for t_end_s, _component, dynamic_j, idle_j in series:
        totals[float(t_end_s)] += float(dynamic_j) + float(idle_j)
    return [(t, node, j) for t, j in sorted(totals.items())]
