"""Numbers as people read them: the one formatter of the CLI, the dashboard and reports.

Why one module: "0.002 J per sample" for both 2.05 and 1.91 mJ hid a 7 % difference,
``5.621e-09 USD`` and ``2.713e-04 kWh`` made readers count zeros, and one figure was
"0.02" in a table and "0.0282" beside it. Every figure a person reads goes through
here, so the same joules print the same text in ``joulestat run``'s summary, on every
dashboard page and in the HTML and PDF reports (JSON and CSV keep full precision).

The rules, the same for every quantity:

* three significant digits (``2.05 mJ``, ``13.4 g``, ``312 J``), trailing zeros kept
  (``1.20 kW``), thousands separators, never an exponent;
* an SI prefix chosen so the number sits in [1, 1000): ``mJ``, ``µg``, ``mWh``, ``kW``;
  CO2e mass goes up to tonnes (``t``);
* money is dollars and cents (``$74.23``, ``$1,235``); below a dollar three
  significant digits (``$0.00562``); a per-unit cost of inference belongs per million
  units, where it reads as dollars again;
* ``None`` (unknown) and NaN read :data:`UNKNOWN`, never ``0``.

Not here: unit conversions of the carbon data (:mod:`joulestat.carbon.units`) and the
wording of deltas (``−92 %``, ``×6.3``: :mod:`joulestat.reports.compare.words`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

UNKNOWN = "—"
J_PER_WH = 3600.0
DIGITS = 3

# (factor, prefix), largest first; the value is divided by the first factor it reaches.
_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
       (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"))
_MASS_G = ((1e6, "t"), (1e3, "kg"), (1.0, "g"), (1e-3, "mg"), (1e-6, "µg"), (1e-9, "ng"),
           (1e-12, "pg"))


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def sig(value: float, digits: int = DIGITS) -> str:
    """``value`` to ``digits`` significant digits, thousands separators, no exponent
    (``0.00562``, ``1,230``, ``12.0``; 9.996 reads ``10.0``)."""
    if value == 0:
        return "0"
    rounded = float(f"{value:.{digits}g}")  # C rounding: the Jobs page formats 10^5 cells
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{rounded:,.{decimals if decimals > 0 else 0}f}"


def _scaled(value: float, unit: str, steps: tuple[tuple[float, str], ...], digits: int,
            prefixed: bool = True) -> str:
    """``value`` in the step that puts it in [1, 1000), rounded first so that 999.7 J
    reads ``1.00 kJ``; values beyond the steps use the last one that applies.

    Steps are powers of 1000, largest first, so the step comes from the exponent
    directly: the Jobs page formats a hundred thousand cells, and a loop over the steps
    with two calls to :func:`sig` cost it half a second.
    """
    if value == 0:
        return f"0 {unit}".rstrip()
    below_top = round(math.log10(steps[0][0])) - math.floor(math.log10(abs(value)))
    index = min(len(steps) - 1, max(0, -(-below_top // 3)))  # ceil(below_top / 3)
    factor, name = steps[index]
    scaled = float(f"{value / factor:.{digits}g}")
    if index > 0 and abs(scaled) >= 1000:
        factor, name = steps[index - 1]
        scaled = float(f"{value / factor:.{digits}g}")
    decimals = digits - 1 - math.floor(math.log10(abs(scaled)))
    text = f"{scaled:,.{decimals if decimals > 0 else 0}f}"
    return f"{text} {name}{unit}" if prefixed else f"{text} {name}"


def si(value: float | None, unit: str, digits: int = DIGITS) -> str:
    """Any quantity with an SI prefix: ``si(0.00205, "J") == "2.05 mJ"``."""
    if not _known(value):
        return UNKNOWN
    assert value is not None
    return _scaled(value, unit, _SI, digits)


def seconds(value: float | None) -> str:
    """A short time with an SI prefix: ``3.06 ms``, ``412 µs``, ``1.20 s`` (a latency;
    :func:`duration` writes a job's length)."""
    return si(value, "s")


def energy(joules: float | None) -> str:
    """``2.05 mJ``, ``312 J``, ``4.51 kJ``, ``30.6 MJ``."""
    return si(joules, "J")


def energy_wh(joules: float | None) -> str:
    """Energy in watt-hours, the unit of electricity bills: ``271 mWh``, ``9.93 kWh``."""
    return si(None if joules is None else joules / J_PER_WH, "Wh")


def power(watts: float | None) -> str:
    """``850 mW``, ``14.2 W``, ``1.20 kW``."""
    return si(watts, "W")


def mass(grams: float | None) -> str:
    """CO2e mass: ``158 ng``, ``1.27 mg``, ``13.4 g``, ``2.41 kg``, ``1.20 t``."""
    if not _known(grams):
        return UNKNOWN
    assert grams is not None
    if grams == 0:
        return "0 g"
    return _scaled(grams, "", _MASS_G, DIGITS, prefixed=False)


def usd(amount: float | None) -> str:
    """``$1,235``, ``$74.23``, ``$0.377``, ``$0.00562``; unknown stays unknown."""
    if not _known(amount):
        return UNKNOWN
    assert amount is not None
    sign, value = ("-" if amount < 0 else ""), abs(amount)
    if value >= 1000:
        return f"{sign}${value:,.0f}"
    if value >= 1 or value == 0:
        return f"{sign}${value:,.2f}" if value else "$0"
    return f"{sign}${sig(value)}"


def price_per_hour(usd_per_hour: float | None) -> str:
    """An hourly price as price lists quote it, to four significant digits: ``$1.006/h``
    (two would round a list price to ``$1.01``)."""
    if not _known(usd_per_hour):
        return UNKNOWN
    assert usd_per_hour is not None
    return f"${sig(usd_per_hour, 4)}/h"


def count(value: float | None) -> str:
    """Units of work: ``950``, ``34.5 k``, ``1.20 M``; a fraction keeps 3 digits."""
    if not _known(value):
        return UNKNOWN
    assert value is not None
    if abs(value) < 1000:
        return f"{value:,.0f}" if float(value).is_integer() else sig(value)
    return _scaled(value, "", _SI[:4], DIGITS, prefixed=False).rstrip()


def intensity(g_per_kwh: float | None) -> str:
    """Grid intensity: ``56.0 gCO2e/kWh``."""
    return UNKNOWN if not _known(g_per_kwh) else f"{sig(g_per_kwh or 0.0)} gCO2e/kWh"


def share(fraction: float | None) -> str:
    """A share of a whole: ``12 %``, ``0.5 %``, ``100 %``."""
    if not _known(fraction):
        return UNKNOWN
    assert fraction is not None
    pct = fraction * 100
    if pct == 0 or abs(pct) >= 10:
        return f"{pct:.0f} %"
    return f"{sig(pct, 2)} %"


def duration(seconds: float | None) -> str:
    """``5.0 s``, ``45 s``, ``1 min 40 s``, ``5 min``, ``3 h 05 min``, ``2 d 04 h``."""
    if not _known(seconds):
        return UNKNOWN
    assert seconds is not None
    seconds = max(0.0, seconds)
    if seconds < 59.5:
        return f"{seconds:.0f} s" if seconds >= 10 or seconds == 0 else f"{sig(seconds, 2)} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest:02d} s" if rest else f"{minutes} min"
    minutes = round(seconds / 60)
    if minutes < 48 * 60:
        hours, rest = divmod(minutes, 60)
        return f"{hours} h {rest:02d} min" if rest else f"{hours} h"
    hours = round(seconds / 3600)
    days, rest = divmod(hours, 24)
    return f"{days} d {rest:02d} h" if rest else f"{days} d"


def per(figure: str, unit: str) -> str:
    """``2.05 mJ per sample``: a formatted figure per unit of work."""
    return f"{figure} per {unit}"


def scale_for(values: list[float], unit: str) -> tuple[float, str]:
    """(divisor, unit) for an axis or column of ``values`` in ``unit`` (``J``, ``W``,
    ``Wh`` or ``g`` of CO2e): the prefix that puts the largest in [1, 1000), so a chart of
    millijoules reads ``mJ``, not ``0.002``."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    steps = _MASS_G if unit == "g" else tuple((f, p + unit) for f, p in _SI)
    if not finite:
        return 1.0, unit
    top = max(finite)
    for factor, name in steps:
        if top >= factor:
            return factor, name
    return steps[-1]


EN_DASH = "\u2013"


def _range(low: float | None, high: float | None, one: Callable[[float | None], str],
           unit: str) -> str:
    """``20.1–28.9 kJ``: both ends in one unit when they share it, else each with its
    own (``950 J–1.20 kJ``); unknown when either end is."""
    if not (_known(low) and _known(high)):
        return UNKNOWN
    low_text, high_text = one(low), one(high)
    low_num, _sp, low_unit = low_text.partition(" ")
    high_num, _sp, high_unit = high_text.partition(" ")
    if low_unit == high_unit and low_unit.endswith(unit):
        return f"{low_num}{EN_DASH}{high_num} {high_unit}"
    return f"{low_text}{EN_DASH}{high_text}"


def energy_range(low_j: float | None, high_j: float | None) -> str:
    """Bounds of an energy figure: ``20.1–28.9 kJ``, as a report prints them beside it
    ("24.2 kJ, 20.1–28.9 kJ"); unknown bounds read :data:`UNKNOWN`."""
    return _range(low_j, high_j, energy, "J")


def mass_range(low_g: float | None, high_g: float | None) -> str:
    """Bounds of a CO2e mass: ``11.2–15.9 g``."""
    return _range(low_g, high_g, mass, "g")


def power_range(low_w: float | None, high_w: float | None) -> str:
    """Bounds of a power figure: ``41.2–47.9 W``."""
    return _range(low_w, high_w, power, "W")
