"""A job's figures, priced in one place: energy, CO2e, cost, and which prices were used.

``joulestat compare`` and the dashboard (Jobs, Compare, Job detail and Overview pages)
show the same jobs' CO2e and cost, so they price them here, with the same rules and the
same unknowns, and a figure cannot mean one thing in the terminal and another on a page:

* each node of a job is held from its start to its end, or to now while it runs
  (:class:`joulestat.carbon.held.Held`); cost is its hourly price x hours held, embodied
  CO2e linear in the time held, operational CO2e its energy x PUE x grid intensity;
* the factors are :func:`joulestat.carbon.footprint.footprint`'s, with its sources and
  fallbacks, and an unknown price or embodied figure on any node leaves the job's total
  unknown (None) with footprint's note saying why, never a silent zero.

Why rates: without live intensity every factor is constant per (instance type, region),
so a :class:`Pricer` asks ``footprint()`` once per pair for one kWh over one hour and
scales each node from that: a loop of float arithmetic, as the dashboard prices ten
thousand jobs per page. Live intensity (an Electricity Maps token) depends on when the
energy was used; then the job's energy series is read and ``footprint()`` prices it
whole. A test checks that the two give the same figures.

Plain values in, plain records out (a job's parts are anything with a node, instance
type, region, energy and held time), so this carbon module never imports the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from joulestat.carbon.catalog import price_per_hour
from joulestat.carbon.footprint import CarbonSettings, NodePlacement, footprint
from joulestat.carbon.units import J_PER_KWH, S_PER_HOUR

# (t_end_s, node, energy_j) points, as footprint() takes them.
Points = Iterable[tuple[float, str, float]]


class PricedPart(Protocol):
    """What pricing needs of one node's part in a job (the store's ``JobNodePart`` and
    ``PartTotals`` are such parts)."""

    @property
    def node(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def total_j(self) -> float: ...
    def held_s(self, now_s: float) -> float: ...


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """One node of a job: its type, how long it was held, its energy and its cost."""

    node: str
    instance_type: str
    held_s: float
    energy_j: float
    cost_usd: float | None


@dataclass(frozen=True, slots=True)
class JobPrice:
    """A job's CO2e and cost over its nodes. ``operational_g`` is always known (world
    average intensity at worst); ``embodied_g`` and ``cost_usd`` are None once any
    node's is unknown, and ``notes`` say why. ``nodes`` and ``notes`` stay empty where
    only the sums were asked (:meth:`Pricer.cost`)."""

    operational_g: float
    embodied_g: float | None
    cost_usd: float | None
    nodes: tuple[NodeFigures, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total_g(self) -> float | None:
        """Operational + embodied; None while embodied is unknown."""
        return None if self.embodied_g is None else self.operational_g + self.embodied_g


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-joule and per-second factors of one (instance type, region)."""

    operational_g_per_j: float
    embodied_g_per_s: float | None
    usd_per_s: float | None
    intensity_g_per_kwh: float
    intensity_source: str
    pue: float
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PriceUsed:
    """The hourly price one instance type was charged, and where that price came from
    (``prices file /path``, ``catalog:<url>``, ``override`` or ``unknown``)."""

    instance_type: str
    usd_per_hour: float | None
    source: str
    note: str


def placements(parts: Iterable[PricedPart], now_s: float) -> dict[str, NodePlacement]:
    """``footprint()``'s placements of a job's parts, each held until ``now_s`` while it
    runs; an empty instance type or region means unknown."""
    return {part.node: NodePlacement(part.instance_type or None, part.region or None,
                                     part.held_s(now_s)) for part in parts}


def live_intensity_applies(settings: CarbonSettings) -> bool:
    """Whether ``footprint()`` would ask Electricity Maps: a token and no fixed intensity."""
    return bool(settings.electricity_maps_token) and settings.carbon_intensity_g_per_kwh is None


def prices_used(instance_types: Iterable[str], settings: CarbonSettings | None = None
                ) -> list[PriceUsed]:
    """Each of ``instance_types`` (sorted, once) with the hourly price it is charged.

    Asked of :func:`joulestat.carbon.catalog.price_per_hour` with the settings that price the
    figures, the one function ``footprint()`` asks, so the source printed beside a table
    is the source of the table's costs: a reader can tell a negotiated rate from a list
    price.
    """
    settings = settings if settings is not None else CarbonSettings()
    used = []
    for itype in sorted(set(instance_types)):
        price = price_per_hour(itype or None, settings.price_per_hour_usd, settings.prices)
        used.append(PriceUsed(itype, price.usd_per_hour, price.source, price.note))
    return used


class Pricer:
    """Prices jobs under one :class:`CarbonSettings`, remembering the rates of each
    (instance type, region) and the notes of each set of nodes it has seen. One per
    command, or one per prices file in the dashboard."""

    def __init__(self, settings: CarbonSettings | None = None) -> None:
        self.settings = settings if settings is not None else CarbonSettings()
        self.live = live_intensity_applies(self.settings)
        # The rates are the static ones (no live feed): live intensity is priced whole.
        self._static = replace(self.settings, electricity_maps_token=None)
        self._rates: dict[tuple[str, str], Rates] = {}
        self._notes: dict[tuple[tuple[str, str, str], ...], tuple[str, ...]] = {}

    def rates(self, instance_type: str, region: str) -> Rates:
        """The factors ``footprint()`` applies to a node of this type in this region."""
        found = self._rates.get((instance_type, region))
        if found is None:
            found = self._rates[(instance_type, region)] = self._rates_of(instance_type,
                                                                         region)
        return found

    def _rates_of(self, instance_type: str, region: str) -> Rates:
        result = footprint([(0.0, "n", J_PER_KWH)],
                           {"n": NodePlacement(instance_type or None, region or None,
                                               S_PER_HOUR)}, self._static, now_s=0.0)
        [node] = result.nodes
        return Rates(
            operational_g_per_j=node.operational_co2e_g / J_PER_KWH,
            embodied_g_per_s=None if node.embodied.g is None else node.embodied.g / S_PER_HOUR,
            usd_per_s=None if node.cost_usd is None else node.cost_usd / S_PER_HOUR,
            intensity_g_per_kwh=node.intensity.g_per_kwh,
            intensity_source=node.intensity.source,
            pue=node.pue.value,
            notes=tuple(n.replace("'n'", "this node") for n in result.notes),
        )

    def node_cost(self, instance_type: str, region: str, energy_j: float, held_s: float
                  ) -> JobPrice:
        """A node using ``energy_j`` while held ``held_s`` seconds (the Overview's nodes,
        which belong to no job), at static intensity."""
        rate = self.rates(instance_type, region)
        return JobPrice(
            operational_g=energy_j * rate.operational_g_per_j,
            embodied_g=None if rate.embodied_g_per_s is None else held_s * rate.embodied_g_per_s,
            cost_usd=None if rate.usd_per_s is None else held_s * rate.usd_per_s)

    def cost(self, parts: Sequence[PricedPart], now_s: float,
             series: Callable[[], Points] | None = None) -> JobPrice:
        """A job's sums only (no per-node figures, no notes): what a job list shows."""
        if self.live:
            return self.job(parts, now_s, series)
        return JobPrice(*self._summed(parts, now_s, None))

    def job(self, parts: Sequence[PricedPart], now_s: float,
            series: Callable[[], Points] | None = None) -> JobPrice:
        """A job's figures with each node's and ``footprint()``'s notes; a running part
        counts up to ``now_s``. ``series`` gives the job's ``(t_end_s, node, energy_j)``
        points, read only where live intensity applies (and then required)."""
        if self.live:
            if series is None:
                raise ValueError("live intensity prices a job's energy series: pass series")
            return self._from_footprint(parts, now_s, series())
        nodes: list[NodeFigures] = []
        operational, embodied, cost = self._summed(parts, now_s, nodes)
        known = embodied is not None and cost is not None
        return JobPrice(operational, embodied, cost, tuple(nodes),
                        () if known else self.notes(parts))

    def _summed(self, parts: Sequence[PricedPart], now_s: float,
                nodes: list[NodeFigures] | None
                ) -> tuple[float, float | None, float | None]:
        """(operational g, embodied g, cost USD): one loop of float arithmetic over the
        parts, appending each node's figures to ``nodes`` when given; a tuple, as a
        frozen record per job is what the Compare page would spend its time on."""
        operational = 0.0
        embodied: float | None = 0.0
        cost: float | None = 0.0
        for part in parts:
            rate = self._rates.get((part.instance_type, part.region)) or self.rates(
                part.instance_type, part.region)
            held_s = part.held_s(now_s)
            node_usd = None if rate.usd_per_s is None else held_s * rate.usd_per_s
            if nodes is not None:
                nodes.append(NodeFigures(part.node, part.instance_type, held_s, part.total_j,
                                         node_usd))
            operational += part.total_j * rate.operational_g_per_j
            if embodied is not None:
                embodied = (None if rate.embodied_g_per_s is None
                            else embodied + held_s * rate.embodied_g_per_s)
            if cost is not None:
                cost = None if node_usd is None else cost + node_usd
        return operational, embodied, cost

    def notes(self, parts: Sequence[PricedPart]) -> tuple[str, ...]:
        """``footprint()``'s notes for these nodes: without a live feed they depend on
        nothing but the nodes' names, types and regions (which lacks a price or an
        embodied figure, and why), so one call per distinct set of nodes gives every
        job's."""
        placed = tuple((p.node, p.instance_type, p.region) for p in parts)
        found = self._notes.get(placed)
        if found is None:
            found = self._notes[placed] = footprint(
                [], {node: NodePlacement(itype or None, region or None, 0.0)
                     for node, itype, region in placed}, self._static, now_s=0.0).notes
        return found

    def _from_footprint(self, parts: Sequence[PricedPart], now_s: float,
                        points: Points) -> JobPrice:
        placed = placements(parts, now_s)
        found = footprint(points, placed, self.settings, now_s=now_s)
        costs = {n.node: n.cost_usd for n in found.nodes}
        return JobPrice(
            operational_g=found.operational_co2e_g, embodied_g=found.embodied_co2e_g,
            cost_usd=found.cost_usd,
            nodes=tuple(NodeFigures(p.node, p.instance_type, placed[p.node].duration_s,
                                    p.total_j, costs.get(p.node)) for p in parts),
            notes=found.notes)
