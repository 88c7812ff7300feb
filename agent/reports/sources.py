"""Measured, estimated or not stated: the one reading of a source chain.

Why one place: the dashboard once called every source not starting with ``model:``
measured, so ``import:joulestat/model:ccf-vcpu`` (a VM's CPU *estimate*, imported) and
``import:codecarbon`` (CodeCarbon in its CPU-load fallback) wore green "measured"
badges, and the Overview said "Measured: 11 %" on a machine with no sensor. The
dashboard, the reports and ``joulestat compare`` all classify through
:func:`source_class`, so a figure is called measured in one view only if it is in all.

A source is a chain (see docs/reports.md):

* a sensor's own name: ``rapl``, ``nvml_energy``, ``nvml_power``, ``amdsmi``,
  ``amdsmi_power``, ``neuron``, ``hlml``, ``hlml_power`` (measured), ``model:<name>``
  (estimated, e.g. ``model:neuron-util``), ``replay``;
* ``fill:<sensor>`` (``fill:rapl``): ticks whose counter faulted (froze, reset, jumped,
  vanished), filled from the device's recent power: estimated;
* ``import:<tool>/<original>[,<original>...]``: an import keeps the originals, and is
  what they are: ``import:joulestat/model:ccf-vcpu`` is an estimate,
  ``import:codecarbon/nvml_energy`` measured (CodeCarbon reads NVML's counter);
* ``import:<tool>`` with nothing after it: the file did not say how the energy was
  obtained (a CodeCarbon CSV never says whether its CPU figure came from RAPL or from
  its TDP x load fallback), so the class is ``unstated``, never measured;
* a minute rollup whose source changed inside the minute joins them with ``+``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from joulestat.core.tick import FILL_PREFIX

MEASURED_SOURCES = frozenset({"rapl", "nvml_energy", "nvml_power", "amdsmi", "amdsmi_power",
                              "neuron", "hlml", "hlml_power"})
MEASURED, ESTIMATED, REPLAY, UNSTATED, MIXED = (
    "measured", "estimated", "replay", "unstated", "mixed")
CLASSES = (MEASURED, ESTIMATED, UNSTATED, REPLAY, MIXED)
IMPORT_PREFIX = "import:"
WHY = {
    MEASURED: "read from a hardware energy or power counter",
    ESTIMATED: "computed by a documented model, not read from a counter",
    UNSTATED: "imported from a file that does not say whether it was measured",
    REPLAY: "replayed from a recorded trace",
    MIXED: "partly measured and partly not",
}


def originals(source: str) -> list[str]:
    """The sensor-level sources inside a chain: ``import:joulestat/model:a,rapl`` ->
    ``["model:a", "rapl"]``; ``import:codecarbon`` -> ``[]``; ``rapl+model:a`` -> both."""
    found: list[str] = []
    for part in (p for p in source.split("+") if p):
        if part.startswith(IMPORT_PREFIX):
            _tool, _slash, inner = part[len(IMPORT_PREFIX):].partition("/")
            found += [a for a in inner.split(",") if a]
        else:
            found.append(part)
    return found


def _atom_class(atom: str) -> str:
    if atom.startswith(("model:", FILL_PREFIX)):
        return ESTIMATED
    if atom == "replay":
        return REPLAY
    if atom.startswith(IMPORT_PREFIX):  # nested: import:x/import:y/... read as y's
        return source_class(atom)
    return MEASURED if atom in MEASURED_SOURCES else UNSTATED


def source_class(source: str) -> str:
    """``measured``, ``estimated``, ``replay``, ``unstated`` or, when the chain holds
    several of those, ``mixed``."""
    classes: set[str] = set()
    for part in (p for p in source.split("+") if p):
        inner = originals(part)
        if part.startswith(IMPORT_PREFIX) and not inner:
            classes.add(UNSTATED)
        classes.update(_atom_class(atom) for atom in inner)
    if not classes:
        return UNSTATED
    return classes.pop() if len(classes) == 1 else MIXED


def sources_class(sources: Iterable[str]) -> str:
    """One class for several sources of one figure (a component on several nodes)."""
    classes = {source_class(s) for s in sources}
    if not classes:
        return UNSTATED
    return classes.pop() if len(classes) == 1 else MIXED


def energy_by_class(energy_by_source: Mapping[str, float]) -> dict[str, float]:
    """Joules per class from joules per source (``+``-joined minute sources count with
    their class, ``mixed`` when they disagree)."""
    totals: defaultdict[str, float] = defaultdict(float)
    for source, joules in energy_by_source.items():
        totals[source_class(source)] += joules
    return dict(totals)


def estimated_sources(sources: Iterable[str]) -> list[str]:
    """The sources among ``sources`` that are not measured, deduplicated, in order."""
    return list(dict.fromkeys(s for s in sources if source_class(s) != MEASURED))
