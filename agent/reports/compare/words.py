"""A comparison in words: the sentences ``joulestat compare`` and the dashboard both
print, and the table as the command prints it (text and JSON).

``×6.3 throughput, −92 % energy per inference, −92 % CO2e per inference, $2.00 vs
$25.00 per million inferences``: the figures are :mod:`joulestat.reports.compare.table`'s;
this module only writes them, so every place that shows a delta writes it the same way.
Money is :func:`joulestat.core.units.usd`'s, as in the tables beside the sentences: a
page that wrote "USD 3.38" above a column of "$3.38" made a reader wonder whether they
differ. :func:`render_text` and :func:`as_json` are what ``joulestat compare`` prints:
the tables (per unit, then per run), headlines, SLA sizing, prices with their sources,
and notes; unknown figures read ``unknown`` (null in JSON), never 0. Energy is given
twice, in all and above idle (dynamic), under the idle policy that applied
(:mod:`joulestat.reports.idle`).

A change past ±99 % is written as a factor (:func:`format_pct`): "−100 %" for a job that
used 215 times less hid the size of the difference, "/215" says it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from joulestat.core import units
from joulestat.reports.compare.difference import Difference
from joulestat.reports.compare.table import (
    PER_UNIT,
    ComparisonRow,
    co2e_difference,
    energy_difference,
    pct_change,
    ratio_of,
)
from joulestat.reports.idle import MIXED, policy_words

MINUS = "\u2212"
TIMES = "\u00d7"
DIVIDED = "/"
FACTOR_PAST_PCT = 99.0  # a change beyond ±99 % is written as a factor


def plural(unit: str) -> str:
    """``inference`` -> ``inferences``; a unit counted as ``tokens`` stays as it is."""
    return unit if unit.endswith("s") else unit + "s"


def format_ratio(value: float) -> str:
    """``×6.3``; below 1, two significant digits (``×0.16``)."""
    return f"{TIMES}{value:.1f}" if value >= 0.995 else f"{TIMES}{value:.2g}"


def format_factor(ratio: float) -> str:
    """A ratio as a factor: ``×215`` (215 times more), ``/215`` (215 times less), ``×2.5``;
    two or three significant digits, never an exponent."""
    factor = ratio if ratio >= 1 else 1.0 / ratio
    text = f"{factor:,.0f}" if factor >= 9.95 else f"{factor:.1f}"
    return f"{TIMES if ratio >= 1 else DIVIDED}{text}"


def format_pct(value: float) -> str:
    """``−92 %``, ``+4.5 %``, ``±0 %`` (U+2212 minus, as typesetting wants); past ±99 %
    the factor (:func:`format_factor`: ``/215``, ``×3.0``), where a percentage hides the
    size of the difference. A drop to nothing stays ``−100 %``."""
    if abs(value) < 0.05:
        return "\u00b10 %"
    if abs(value) > FACTOR_PAST_PCT and value > -100.0:
        return format_factor(1.0 + value / 100.0)
    text = f"{abs(value):.0f}" if abs(value) >= 10 else f"{abs(value):.1f}"
    return f"{MINUS if value < 0 else '+'}{text} %"


def format_usd(value: float) -> str:
    """``2.00``, ``1,234.50``; sub-cent amounts with two significant digits."""
    return f"{value:,.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2g}"


NOT_DISTINGUISHABLE = "not distinguishable from the baseline"
ND = "n.d."  # the text table's cell for a delta within the intervals


def co2e_distinguishable(row: ComparisonRow, baseline: ComparisonRow) -> bool | None:
    """Whether ``row``'s CO2e differs from ``baseline``'s
    (:func:`~joulestat.reports.compare.table.co2e_difference`: the energy's rule at each
    row's CO2e per joule); None when that cannot be said, and for the baseline itself."""
    if row.is_baseline:
        return None
    difference = co2e_difference(row, baseline)
    return None if difference is None else difference.real


def interval_words(difference: Difference, with_change: bool = False) -> str:
    """What is known of a difference: its 95 % interval (``−55 to −43 %``, after the
    change itself with ``with_change``: ``+5 %, −12 to +24 %``), and that a row is of
    one run (``1 run, spread unknown``, where nothing else separates the rows)."""
    change = format_pct((difference.ratio - 1.0) * 100.0)
    bounds = difference.pct_interval
    if bounds is None:
        said = "1 run, spread unknown" if difference.one_run else "bounds unknown"
        return f"{change}, {said}" if with_change else said
    if max(abs(v) for v in (*bounds, (difference.ratio - 1.0) * 100.0)) > FACTOR_PAST_PCT:
        # past ±99 % a percentage hides the size: both ends as factors, as the change is
        low, high = (format_factor(v) for v in difference.interval or bounds)
    else:
        low, high = (format_pct(v).removesuffix(" %") for v in bounds)
        high += " %"
    said = f"{low} to {high}" + (", 1 run" if difference.one_run else "")
    return f"{change}, {said}" if with_change else said


def _delta_words(pct: float | None, what: str, per: str) -> str | None:
    """``−92 % energy per inference``; None when the change is unknown."""
    return None if pct is None else f"{format_pct(pct)} {what} {per}"


def headline(row: ComparisonRow, baseline: ComparisonRow) -> str:
    """``row``'s deltas against ``baseline`` in words, e.g. ``×6.3 throughput, −92 %
    energy per inference, −95 % dynamic energy per inference, −92 % CO2e per
    inference, $2.00 vs $25.00 per million inferences`` (dynamic: the energy above idle).
    A difference within the rows' intervals is written "energy per inference not
    distinguishable from the baseline" rather than as a percentage (the rule is
    :mod:`joulestat.reports.compare.table`'s; the dynamic energy follows the energy's).
    Rows on different bases (per unit vs per run) are not comparable."""
    if row.basis != baseline.basis:
        unit = row.unit or baseline.unit
        return f"not comparable: only one of them counted {plural(unit or 'units')}"
    if row.basis == PER_UNIT and row.unit is not None:
        per, cost_per = f"per {row.unit}", f"per million {plural(row.unit)}"
        costs = (row.cost_per_million_usd, baseline.cost_per_million_usd)
        pairs = [(pct_change(row.energy_per_unit_j, baseline.energy_per_unit_j), "energy"),
                 (pct_change(row.dynamic_per_unit_j, baseline.dynamic_per_unit_j),
                  "dynamic energy"),
                 (pct_change(row.co2e_per_unit_g, baseline.co2e_per_unit_g), "CO2e")]
        ratio = ratio_of(row.units_per_hour, baseline.units_per_hour)
        parts = [f"{format_ratio(ratio)} throughput" if ratio is not None
                 else "throughput not comparable"]
    else:
        per, cost_per = "per run", "per run"
        costs = (row.cost_per_run_usd, baseline.cost_per_run_usd)
        pairs = [(pct_change(row.energy_per_run_j, baseline.energy_per_run_j), "energy"),
                 (pct_change(row.dynamic_per_run_j, baseline.dynamic_per_run_j),
                  "dynamic energy"),
                 (pct_change(row.co2e_per_run_g, baseline.co2e_per_run_g), "CO2e")]
        parts = []
    energy = energy_difference(row, baseline)
    differences = {"energy": energy, "dynamic energy": None,
                   "CO2e": co2e_difference(row, baseline)}
    real = {"energy": row.energy_distinguishable, "dynamic energy": row.energy_distinguishable,
            "CO2e": co2e_distinguishable(row, baseline)}
    within = [what for pct, what in pairs if pct is not None and real[what] is False]
    for pct, what in pairs:
        if what in within[:1]:  # the figures within their intervals, said once together
            named = ", ".join(within[:-1]) + (" and " if len(within) > 1 else "") + within[-1]
            said = f" ({interval_words(energy, with_change=True)})" if energy else ""
            parts.append(f"{named} {per} {NOT_DISTINGUISHABLE}{said}")
        elif what not in within and (text := _delta_words(pct, what, per)):
            found = differences[what]
            said = found is not None and (what == "energy" or found.interval is not None)
            parts.append(f"{text} ({interval_words(found)})" if said else text)
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


# -- the comparison as `joulestat compare` prints it -----------------------------------

NOT_APPLICABLE = "-"
UNKNOWN = "unknown"
WIDTH = 100  # a terminal's columns the default text keeps to (--wide: every column)


def as_json(table: Any, notes: list[str], prices: list[Any] | None = None
            ) -> dict[str, Any]:
    """``{"unit", "by", "baseline", "sla_units_per_hour", "idle_policy", "rows",
    "headlines", "prices", "notes"}``; ``idle_policy`` is every row's (``mixed`` when
    they differ, null when not recorded; each row has its own); ``prices`` gives each
    instance type's USD per hour and its source (a prices file, the catalog, the
    override); unknown figures are null, never 0."""

    base = table.baseline_row
    return {
        "unit": table.unit, "by": table.by, "baseline": table.baseline,
        "sla_units_per_hour": table.sla_units_per_hour, "idle_policy": table.idle_policy,
        "rows": [asdict(row) for row in table.rows],
        "headlines": [{"row": row.label, "job_id": row.job_id, "text": headline(row, base),
                       "energy_distinguishable": row.energy_distinguishable,
                       "co2e_distinguishable": co2e_distinguishable(row, base)}
                      for row in table.rows if not row.is_baseline],
        "prices": [asdict(p) for p in prices or []],
        "notes": notes,
    }




def _sig(value: float | None, digits: int = 3, missing: str = UNKNOWN) -> str:
    """``digits`` significant digits with thousands separators, no exponent."""
    return missing if value is None else units.sig(value, digits)


def _figure(text: str) -> str:
    """A formatted figure; unknown reads ``unknown`` in the text table."""
    return UNKNOWN if text == units.UNKNOWN else text


def _grid(headers: list[str], rows: list[list[str]], left: int) -> list[str]:
    """Columns padded to width; the first ``left`` columns flush left, numbers right."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for cells in [headers, *rows]:
        parts = [c.ljust(w) if i < left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        lines.append("  ".join(parts).rstrip())
    return lines


def _local(t_s: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t_s).strftime("%Y-%m-%d %H:%M")


def _labels(rows: Any) -> dict[int, str]:
    """Row labels; runs of one name told apart by the labels that differ between them
    (else their start, else a short id); ``*`` marks the baseline."""
    return {i: name + (" *" if row.is_baseline else "")
            for i, (name, row) in enumerate(zip(row_names(rows, _local), rows, strict=True))}


def _lead(label: str, row: Any, by_group: bool) -> list[str]:
    """The label, and the row's instance types unless the label already is them."""
    return [label] if not by_group else [label, "+".join(row.instance_types)]


def _accelerators(row: Any) -> str:
    """What the row's nodes compute on ("1 x AWS Inferentia2"), as compare() names it."""
    return " + ".join(row.accelerators) or UNKNOWN


def _policy(row: Any, shown: bool) -> list[str]:
    """The row's idle policy cell (``share``, ``exclude``, ``mixed``, ``not recorded``)
    where the rows differ (``shown``), else none: the table's heading says the one."""
    return [row.idle_policy or "not recorded"] if shown else []


def _deltas(row: Any, base: Any, same: bool) -> list[str]:
    """A row's energy, dynamic energy, CO2e and cost delta cells against ``base``."""
    return [_delta(row.energy_pct, same, real=row.energy_distinguishable),
            _delta(row.dynamic_pct, same, real=row.energy_distinguishable),
            _delta(row.co2e_pct, same, real=co2e_distinguishable(row, base)),
            _delta(row.cost_pct, same)]


def _delta(value: float | None, comparable: bool, kind: str = "pct",
           real: bool | None = None) -> str:
    """A delta cell: ``−92 %``, ``×6.3``, ``n.d.`` within the intervals (``real`` False),
    ``-`` between rows of different bases."""
    if not comparable:
        return NOT_APPLICABLE
    if value is None:
        return UNKNOWN
    if real is False:
        return ND
    return format_ratio(value) if kind == "x" else format_pct(value)


def spread_text(row: Any) -> str:
    """The runs' mean +/- their spread (``2.05 mJ ± 0.31 mJ, 3 runs``), ``1 run`` alone."""
    if row.runs_mean_j is None:
        return UNKNOWN
    if row.runs_spread_j is None:
        return "1 run"
    return (f"{units.energy(row.runs_mean_j)} \u00b1 {units.energy(row.runs_spread_j)}, "
            f"{row.runs} runs")


def bounds_text(bounds: tuple[float, float] | None) -> str:
    """A row's within-run bounds, ``1.90–2.21 mJ``; unknown where a job's are."""
    return UNKNOWN if bounds is None else units.energy_range(*bounds)


def few_runs(table: Any, min_runs: int) -> list[str]:
    """A note per row with fewer runs than ``min_runs`` (``--min-runs``): its spread
    across runs is unknown or rests on too few, so its deltas may be noise."""
    if min_runs <= 1:
        return []
    return [f"{row.label}: {row.runs} run(s), fewer than --min-runs {min_runs}: one run is "
            "a sample, not a fact; its spread across runs is "
            + ("unknown" if row.runs < 2 else "from too few runs")
            for row in table.rows if row.runs < min_runs]


def _price_lines(prices: list[Any], wide: bool = True) -> list[str]:
    """``prices ...:`` and one line per instance type: its USD/h and where that came from
    (wrapped to :data:`WIDTH` unless ``wide``)."""
    if not prices:
        return []
    width = max(len(p.instance_type or "unknown") for p in prices)
    usds = [_figure(units.price_per_hour(p.usd_per_hour)) for p in prices]
    usd_width = max(len(u) for u in usds)
    lines = ["prices (USD per instance-hour):"]
    for p, usd in zip(prices, usds, strict=True):
        lines += _wrapped(f"{(p.instance_type or 'unknown').ljust(width)}  "
                          f"{usd.rjust(usd_width)}  {p.source}: {p.note}", wide, indent="  ")
    return [*lines, ""]


def render_text(table: Any, notes: list[str], prices: list[Any] | None = None,
                wide: bool = False) -> str:
    """The tables (per unit, then per run), headlines, SLA sizing, the price of each
    instance type with its source, and notes. Figures are :mod:`joulestat.core.units`' (``2.05
    mJ``, ``158 ng``, ``$12.03``), as the dashboard and the reports print them. By
    default the columns that matter, every line at most :data:`WIDTH` characters (the
    sentences under the table carry the deltas and their intervals); ``wide``: every
    column (bounds, spread, accelerators, each delta), whatever the width."""
    if not table.rows:
        return "no jobs to compare: run some with `joulestat run --name NAME -- CMD`"
    base = table.baseline_row
    labels = _labels(table.rows)
    base_label = next(labels[i] for i, r in enumerate(table.rows) if r.is_baseline)
    base_label = base_label.removesuffix(" *")
    by_job = table.by == "job"
    first = ("job" if by_job else "instance type" if table.by == "instance_type"
             else table.by.removeprefix("label:"))
    lead = [first] if table.by == "instance_type" or not wide else [first, "instance types"]
    grouped = table.by != "instance_type" and wide
    per_unit = [(i, r) for i, r in enumerate(table.rows) if r.basis == PER_UNIT]
    per_run = [(i, r) for i, r in enumerate(table.rows) if r.basis != PER_UNIT]
    legend = (["bounds = where the energy lies given its sources' accuracy; spread = the "
               f"runs' mean \u00b1 standard deviation; {ND} = not distinguishable from the "
               "baseline (the change's 95 % interval, in the lines below, holds no change)"]
              if wide else ["--wide adds bounds, spread, accelerators and every delta; "
                            "--json has every figure"])
    out = [*_wrapped(f"{len(table.rows)} row(s) by {table.by.replace('_', ' ')}, baseline "
                     f"(*) {base_label}: throughput per instance-hour, CO2e operational "
                     "(location-based), cost = hourly price x hours held (prices below)", wide),
           *_wrapped("energy = what the jobs were attributed; dynamic = its part above the "
                     f"node's idle power; {policy_words(table.idle_policy, jobs=True)}", wide),
           *(line for text in legend for line in _wrapped(text, wide)), ""]
    mixed = table.idle_policy == MIXED  # else the line above says the one policy
    policy_head = ["idle policy"] if mixed else []
    if per_unit:
        unit = table.unit
        out.append(f"per {unit}:")
        same = base.basis == PER_UNIT
        if wide:
            headers = [*lead, "accelerators", "runs", f"{plural(unit)}/instance-h",
                       f"energy/{unit}", "bounds", "spread", f"dynamic/{unit}",
                       f"accelerator energy/{unit}",
                       f"CO2e/{unit}", f"USD/1M {plural(unit)}", "energy/run",
                       "throughput", f"energy/{unit}", f"dynamic/{unit}", f"CO2e/{unit}",
                       f"cost/{unit}", *policy_head, "energy is"]
            cells = [[
                *_lead(labels[i], r, grouped), _accelerators(r), str(r.runs),
                _figure(units.count(r.units_per_hour)),
                _figure(units.energy(r.energy_per_unit_j)),
                bounds_text(r.energy_bounds_per_unit_j), spread_text(r),
                _figure(units.energy(r.dynamic_per_unit_j)),
                _figure(units.energy(r.accelerator_per_unit_j)),
                _figure(units.mass(r.co2e_per_unit_g)),
                _figure(units.usd(r.cost_per_million_usd)), units.energy(r.energy_per_run_j),
                _delta(r.throughput_x, same, "x"),
                *_deltas(r, base, same),
                *_policy(r, mixed), r.energy_class or UNKNOWN,
            ] for i, r in per_unit]
        else:
            headers = [*lead, "runs", f"{_short(unit)}/inst-h", f"energy/{_short(unit)}",
                       "dynamic", "CO2e", "USD/1M", *policy_head, "energy is"]
            cells = [[
                labels[i], str(r.runs), _figure(units.count(r.units_per_hour)),
                _figure(units.energy(r.energy_per_unit_j)),
                _figure(units.energy(r.dynamic_per_unit_j)),
                _figure(units.mass(r.co2e_per_unit_g)),
                _figure(units.usd(r.cost_per_million_usd)),
                *_policy(r, mixed), r.energy_class or UNKNOWN,
            ] for i, r in per_unit]
        out += _grid(headers, cells, left=len(lead) + (1 if wide else 0))
        out.append("")
    if per_run:
        counted = f" (no {plural(table.unit)} counted)" if table.unit else ""
        out.append(f"per run{counted}:")
        same = base.basis != PER_UNIT
        if wide:
            headers = [*lead, "accelerators", "runs", "energy/run", "bounds", "spread",
                       "dynamic/run", "CO2e/run",
                       "cost/run", "energy/run", "dynamic/run", "CO2e/run", "cost/run",
                       *policy_head, "energy is"]
            cells = [[
                *_lead(labels[i], r, grouped), _accelerators(r), str(r.runs),
                units.energy(r.energy_per_run_j), bounds_text(r.energy_bounds_per_run_j),
                spread_text(r), _figure(units.energy(r.dynamic_per_run_j)),
                units.mass(r.co2e_per_run_g), _figure(units.usd(r.cost_per_run_usd)),
                *_deltas(r, base, same),
                *_policy(r, mixed), r.energy_class or UNKNOWN,
            ] for i, r in per_run]
        else:
            headers = [*lead, "runs", "energy/run", "dynamic", "CO2e", "cost",
                       *policy_head, "energy is"]
            cells = [[
                labels[i], str(r.runs), units.energy(r.energy_per_run_j),
                _figure(units.energy(r.dynamic_per_run_j)), units.mass(r.co2e_per_run_g),
                _figure(units.usd(r.cost_per_run_usd)),
                *_policy(r, mixed), r.energy_class or UNKNOWN,
            ] for i, r in per_run]
        out += _grid(headers, cells, left=len(lead) + (1 if wide else 0))
        out.append("")
    lines = [f"{labels[i].removesuffix(' *')} vs {base_label}: {headline(r, base)}"
             for i, r in enumerate(table.rows) if not r.is_baseline and r.basis == base.basis]
    if lines:
        out += [*(wrapped for line in lines for wrapped in _wrapped(line, wide)), ""]
    if table.sla_units_per_hour is not None and per_unit:
        out.append(f"to serve {_sig(table.sla_units_per_hour, 6)} {plural(table.unit)}/h:")
        out += _grid([first, "instances", "fleet power", "fleet cost/h"], [[
            labels[i], str(r.instances_needed), _figure(units.power(r.fleet_power_w)),
            UNKNOWN if r.fleet_cost_per_hour_usd is None
            else f"${format_usd(r.fleet_cost_per_hour_usd)}",
        ] for i, r in per_unit if r.instances_needed is not None], left=1)
        out.append("")
    out += _price_lines(prices or [], wide)
    if notes:
        out += ["notes:", *(wrapped for note in notes
                            for wrapped in _wrapped(note, wide, indent="  "))]
    return "\n".join(out).rstrip()


def _wrapped(text: str, wide: bool, indent: str = "") -> list[str]:
    """``text`` as lines of at most :data:`WIDTH` characters (a word longer than that, a
    URL, alone on its line), continued two spaces further in; one line when ``wide``."""
    if wide:
        return [indent + text]
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def _short(unit: str | None) -> str:
    """A unit's name as a narrow column's heading says it (``output_token`` -> ``token``:
    the part after the last underscore, which the table's title names in full)."""
    return (unit or "unit").rsplit("_", 1)[-1]
