"""A comparison row in words, as ``joulestat compare`` and the dashboard both print it.

``×6.3 throughput, −92 % energy per inference, −92 % CO2e per inference, USD 2.00 vs
25.00 per million inferences``: the figures are :mod:`agent.reports.compare`'s; this
module only writes them, so every place that shows a delta writes it the same way.
"""

from __future__ import annotations

from agent.reports.compare import PER_UNIT, ComparisonRow, pct_change, ratio_of

MINUS = "\u2212"
TIMES = "\u00d7"


def plural(unit: str) -> str:
    """``inference`` -> ``inferences``; a unit counted as ``tokens`` stays as it is."""
    return unit if unit.endswith("s") else unit + "s"


def format_ratio(value: float) -> str:
    """``×6.3``; below 1, two significant digits (``×0.16``)."""
    return f"{TIMES}{value:.1f}" if value >= 0.995 else f"{TIMES}{value:.2g}"


def format_pct(value: float) -> str:
    """``−92 %``, ``+4.5 %``, ``±0 %`` (U+2212 minus, as typesetting wants)."""
    if abs(value) < 0.05:
        return "\u00b10 %"
    text = f"{abs(value):.0f}" if abs(value) >= 10 else f"{abs(value):.1f}"
    return f"{MINUS if value < 0 else '+'}{text} %"


def format_usd(value: float) -> str:
    """``2.00``, ``1,234.50``; sub-cent amounts with two significant digits."""
    return f"{value:,.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2g}"


def headline(row: ComparisonRow, baseline: ComparisonRow) -> str:
    """``row``'s deltas against ``baseline`` in words, e.g. ``×6.3 throughput, −92 %
    energy per inference, −92 % CO2e per inference, USD 2.00 vs 25.00 per million
    inferences``. Rows on different bases (per unit vs per run) are not comparable."""
    if row.basis != baseline.basis:
        unit = row.unit or baseline.unit
        return f"not comparable: only one of them counted {plural(unit or 'units')}"
    if row.basis == PER_UNIT and row.unit is not None:
        per, cost_per = f"per {row.unit}", f"per million {plural(row.unit)}"
        costs = (row.cost_per_million_usd, baseline.cost_per_million_usd)
        pairs = [(pct_change(row.energy_per_unit_j, baseline.energy_per_unit_j), "energy"),
                 (pct_change(row.co2e_per_unit_g, baseline.co2e_per_unit_g), "CO2e")]
        ratio = ratio_of(row.units_per_hour, baseline.units_per_hour)
        parts = [f"{format_ratio(ratio)} throughput" if ratio is not None
                 else "throughput not comparable"]
    else:
        per, cost_per = "per run", "per run"
        costs = (row.cost_per_run_usd, baseline.cost_per_run_usd)
        pairs = [(pct_change(row.energy_per_run_j, baseline.energy_per_run_j), "energy"),
                 (pct_change(row.co2e_per_run_g, baseline.co2e_per_run_g), "CO2e")]
        parts = []
    parts += [f"{format_pct(pct)} {what} {per}" for pct, what in pairs if pct is not None]
    if costs[0] is None or costs[1] is None:
        unknown = [r.label for r, c in zip((row, baseline), costs, strict=True) if c is None]
        parts.append(f"cost {cost_per} unknown for {' and '.join(unknown)}")
    else:
        parts.append(f"USD {format_usd(costs[0])} vs {format_usd(costs[1])} {cost_per}")
    return ", ".join(parts)
