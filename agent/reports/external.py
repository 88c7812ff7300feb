"""Another tool's own result for an imported job, kept beside joulestat's.

Why: a CodeCarbon run that wrote 1.74 mg CO2e showed 13.8 mg in joulestat (joulestat
applies its own grid intensity and PUE to CodeCarbon's energy) with no word about it.
A reader must see both figures, named, and why they differ. The CodeCarbon import keeps
the tool's result as labels (``codecarbon_emissions_kg``, ``codecarbon_energy_kwh``,
verbatim from the CSV; see :mod:`joulestat.reports.codecarbon_import`), so it travels with
the job through exports and imports; :func:`external_figures` reads them back for the
report and the dashboard alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from joulestat.carbon.units import G_PER_KG
from joulestat.core import units


@dataclass(frozen=True, slots=True)
class ExternalFigures:
    """What another tool reported for the job: its CO2e, and the energy it applied its
    intensity to (with its own PUE); ``intensity_g_per_kwh`` is their ratio."""

    tool: str
    version: str | None
    co2e_g: float
    energy_kwh: float | None
    intensity_g_per_kwh: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Labels that carry another tool's result: shown as figures, not as label text (a raw
# "codecarbon_emissions_kg=1.7032270257536265e-06" is what the formatter exists to avoid).
RESULT_LABEL_KEYS = ("codecarbon_emissions_kg", "codecarbon_energy_kwh")


def shown_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A job's labels as a page lists them: without the result labels above."""
    return {k: v for k, v in labels.items() if k not in RESULT_LABEL_KEYS}


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def external_figures(labels: Mapping[str, str]) -> list[ExternalFigures]:
    """The other tools' own results among a job's labels (CodeCarbon's, for now)."""
    co2e_kg = _number(labels.get("codecarbon_emissions_kg"))
    if co2e_kg is None:
        return []
    energy_kwh = _number(labels.get("codecarbon_energy_kwh"))
    co2e_g = co2e_kg * G_PER_KG
    intensity = co2e_g / energy_kwh if energy_kwh else None
    return [ExternalFigures("CodeCarbon", labels.get("codecarbon_version"), co2e_g,
                            energy_kwh, intensity)]


def comparison_note(figures: ExternalFigures, joulestat_co2e_g: float | None) -> str:
    """One sentence naming both figures and why they differ."""
    tool = f"{figures.tool} {figures.version}" if figures.version else figures.tool
    own = (f"{tool}'s own CO2e is {units.mass(figures.co2e_g)}"
           + (f" ({units.intensity(figures.intensity_g_per_kwh)} over its "
              f"{units.energy_wh((figures.energy_kwh or 0.0) * 3.6e6)})"
              if figures.intensity_g_per_kwh is not None else ""))
    if joulestat_co2e_g is None:
        return f"{own}; joulestat's recomputation is unknown."
    ratio = (joulestat_co2e_g / figures.co2e_g) if figures.co2e_g else None
    differ = "" if ratio is None else (
        "; the two agree" if abs(ratio - 1) < 0.005
        else f"; joulestat's figure is {ratio:.2g}× {figures.tool}'s")
    return (f"{own}; joulestat recomputed {units.mass(joulestat_co2e_g)} from the same "
            f"energy with its own grid intensity and PUE (see provenance){differ}.")
