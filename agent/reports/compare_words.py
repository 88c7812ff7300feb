"""A comparison row in words, as ``joulestat compare`` and the dashboard both print it.

``×6.3 throughput, −92 % energy per inference, −92 % CO2e per inference, $2.00 vs
$25.00 per million inferences``: the figures are :mod:`joulestat.reports.compare`'s; this
module only writes them, so every place that shows a delta writes it the same way.
Money is :func:`joulestat.core.units.usd`'s, as in the tables beside the sentences: a page that
wrote "USD 3.38" above a column of "$3.38" made a reader wonder whether they differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from joulestat.core import units
from joulestat.reports.compare import PER_UNIT, ComparisonRow, pct_change, ratio_of

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
    energy per inference, −92 % CO2e per inference, $2.00 vs $25.00 per million
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
        parts.append(f"{units.usd(costs[0])} vs {units.usd(costs[1])} {cost_per}")
    return ", ".join(parts)


def row_names(rows: Sequence[ComparisonRow], when: Callable[[float], str] | None = None
              ) -> list[str]:
    """Each row's name, told apart where several job rows share one: by the labels that
    differ between those runs (``mlp-serve concurrency=4``), else by their start
    (``when(started_s)``, e.g. local time), else by a short id. A setup or label row is
    its group."""
    names = Counter(row.label for row in rows)
    result = []
    for row in rows:
        if names[row.label] < 2 or row.job_id is None:
            result.append(row.label)
            continue
        twins = [r for r in rows if r.label == row.label and r.job_id is not None]
        keys = sorted({k for r in twins for k, _v in r.labels})
        differing = [k for k in keys
                     if len({dict(r.labels).get(k) for r in twins}) > 1]
        mine = dict(row.labels)
        if differing:
            result.append(f"{row.label} " + " ".join(
                f"{k}={mine[k]}" if k in mine else f"{k} unset" for k in differing))
        elif when is not None and row.started_s is not None:
            result.append(f"{row.label} · {when(row.started_s)}")
        else:
            result.append(f"{row.label} [{row.job_id[:8]}]")
    repeated = Counter(result)
    return [name if repeated[name] < 2 or row.job_id is None else
            f"{name} · {when(row.started_s)}" if when is not None and row.started_s is not None
            and f"{when(row.started_s)}" not in name else f"{name} [{row.job_id[:8]}]"
            for name, row in zip(result, rows, strict=True)]
