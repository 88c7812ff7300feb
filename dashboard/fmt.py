"""Numbers as people read them: one place that picks units and writes deltas.

Every figure on a page goes through here, so a value shown as "4.51 kJ" in a table is
"4.51 kJ" in a chart tooltip too, and a reader never has to guess a unit. Deltas and
ratios ("−92 %", "×6.3") are written by :mod:`agent.reports.compare_words`, as
``joulestat compare`` writes them.
"""

from __future__ import annotations

import math
from datetime import datetime, tzinfo

from agent.reports import compare_words

J_PER_KWH = 3_600_000.0


def _scaled(value: float, steps: tuple[tuple[float, str], ...], digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    magnitude = abs(value)
    for factor, unit in steps:
        if magnitude >= factor or factor == steps[-1][0]:
            return f"{_sig(value / factor, digits)} {unit}"
    return f"{_sig(value, digits)}"  # pragma: no cover - the last step always matches


def _sig(value: float, digits: int) -> str:
    """``digits`` significant digits, without scientific notation for everyday values."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:,.{decimals}f}"


def energy(joules: float) -> str:
    """``312 J``, ``4.51 kJ``, ``30.6 MJ``."""
    return _scaled(joules, ((1e9, "GJ"), (1e6, "MJ"), (1e3, "kJ"), (1.0, "J"), (1e-3, "mJ")))


def kwh(joules: float) -> str:
    """Energy in kWh (or Wh below one), the unit of electricity bills."""
    if joules is None or not math.isfinite(joules):
        return "—"
    value = joules / J_PER_KWH
    return f"{_sig(value, 3)} kWh" if abs(value) >= 1 else f"{_sig(value * 1000, 3)} Wh"


def power(watts: float) -> str:
    return _scaled(watts, ((1e6, "MW"), (1e3, "kW"), (1.0, "W"), (1e-3, "mW")))


def mass(grams: float | None) -> str:
    """CO2e mass: ``12.3 g``, ``4.56 kg``, ``1.20 t``."""
    if grams is None:
        return "—"
    return _scaled(grams, ((1e6, "t"), (1e3, "kg"), (1.0, "g"), (1e-3, "mg")))


def usd(amount: float | None) -> str:
    if amount is None or not math.isfinite(amount):
        return "—"
    if abs(amount) >= 100:
        return f"${amount:,.0f}"
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    return f"${_sig(amount, 3)}" if amount else "$0"


def count(value: float) -> str:
    """``950``, ``34.5 k``, ``1.20 M``."""
    return _scaled(value, ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")), 3).rstrip()


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# One spelling of units and deltas everywhere: the comparison's (joulestat compare).
plural = compare_words.plural


def local_time(epoch_s: float | None, tz: tzinfo) -> str:
    if epoch_s is None:
        return "—"
    return datetime.fromtimestamp(epoch_s, tz).strftime("%Y-%m-%d %H:%M:%S")
