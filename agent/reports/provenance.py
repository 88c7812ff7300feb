"""Where each node's carbon factors came from, said plainly for a report.

A reader of a report must be able to tell a measured location from a fallback: a node
whose region was unknown is charged the world average, and the report has to say that
in words, not only as a source code. :func:`node_provenance` turns one
:class:`~joulestat.carbon.footprint.NodeFootprint` into the ``provenance`` entry of the
report schema. :func:`energy_is` says how a figure's energy was obtained ("estimated
(model: ccf-vcpu)"), the one phrase every dashboard table and report shows beside a
row's name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from joulestat.carbon.footprint import NodeFootprint
from joulestat.carbon.intensity import Intensity
from joulestat.reports.sources import (
    CLASSES,
    ESTIMATED,
    MEASURED,
    REPLAY,
    UNSTATED,
    originals,
    source_class,
)

# intensity source prefix -> how specific the figure is, most specific first
_LEVELS = (
    ("override", "override"),
    ("electricitymaps:", "live grid zone"),
    ("codecarbon:gcp-impact", "cloud region"),
    ("codecarbon:usa-egrid", "US state"),
    ("codecarbon:canada-mix", "Canadian province"),
    ("codecarbon:energy-mix:", "country"),
    ("codecarbon:world-average", "world average"),
)


def intensity_level(intensity: Intensity) -> str:
    """``override``, ``cloud region``, ``US state``, ``Canadian province``, ``country``,
    ``world average`` (or ``live grid zone``): which step of the chain answered."""
    for prefix, level in _LEVELS:
        if intensity.source.startswith(prefix):
            return level
    return "other"


def region_resolution(region: str | None, intensity: Intensity) -> str:
    """One sentence: the region asked for, the level it resolved to, and why."""
    level = intensity_level(intensity)
    asked = f"region {region!r}" if region else "no region recorded"
    if level == "override":
        return f"{asked}: intensity set by the user (carbon_intensity), region not used"
    fallback = " (fallback)" if level == "world average" and region else ""
    return (f"{asked} -> {level} figure{fallback} for {intensity.location}: "
            f"{intensity.note}")


def node_provenance(node: NodeFootprint) -> dict[str, Any]:
    """The report's provenance entry for one node."""
    live = node.live_intensity
    return {
        "node": node.node,
        "instance_type": node.instance_type,
        "region": node.region,
        "region_resolution": region_resolution(node.region, node.intensity),
        "intensity_level": intensity_level(node.intensity),
        "intensity_source": node.intensity.source,
        "intensity_year": node.intensity.year,
        "intensity_location": node.intensity.location,
        "carbon_intensity_g_per_kwh": node.intensity.g_per_kwh,
        "live_intensity_g_per_kwh": live.g_per_kwh if live is not None else None,
        "live_intensity_source": live.source if live is not None else None,
        "live_energy_kwh": node.live_energy_kwh,
        "pue": node.pue.value,
        "pue_source": node.pue.source,
        "price_usd_per_hour": node.price.usd_per_hour,
        "price_source": node.price.source,
        "price_note": node.price.note,
        "embodied_method": node.embodied.method,
        "embodied_note": node.embodied.note,
    }


# The order a mixed figure names its classes in, and the word each is written with
# (``unstated`` reads "not stated", as the dashboard's badges write it).
_ENERGY_WORDS = {MEASURED: "measured", ESTIMATED: "estimated", UNSTATED: "not stated",
                 REPLAY: "replayed"}


def _named(cls: str, parts: list[str]) -> str:
    """One class with the sources that make it: models by name (``model: ccf-vcpu``),
    an unstated import by its tool (``import:codecarbon``); measured needs no names."""
    if cls == ESTIMATED:
        models = sorted({atom.removeprefix("model:") for part in parts
                         for atom in originals(part) if atom.startswith("model:")})
        return f"estimated (model: {', '.join(models)})" if models else "estimated"
    if cls == UNSTATED:
        return f"not stated ({', '.join(sorted(set(parts)))})"
    return _ENERGY_WORDS.get(cls, cls)


def energy_is(sources: Iterable[str]) -> str:
    """How a figure's energy was obtained, in the words every table puts right after the
    row's name: ``measured``, ``estimated (model: ccf-vcpu, dram-gib)``, ``not stated
    (import:codecarbon)``, or the classes of a mixed figure one after the other
    (``measured, estimated (model: tdp-curve)``); ``unknown`` without a source.

    Why one phrase: a table that said only "estimated" left the reader to find out from
    what, and an estimated row next to measured ones read as their equal. Classes are
    :func:`joulestat.reports.sources.source_class`'s, so this never calls measured what a
    badge, a report or ``joulestat compare`` calls estimated."""
    by_class: dict[str, list[str]] = {}
    for source in sources:
        for part in (p for p in source.split("+") if p):  # a rollup's "a+b": each apart
            by_class.setdefault(source_class(part), []).append(part)
    if not by_class:
        return "unknown"
    return ", ".join(_named(cls, by_class[cls]) for cls in CLASSES if cls in by_class)
