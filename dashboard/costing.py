"""The pages' prices: which prices file is in force, and the pricer that uses it.

Every figure is :class:`joulestat.carbon.pricing.Pricer`'s, the pricing ``joulestat
compare`` uses too, so the pages and the command cannot disagree; this module only
chooses the prices and turns the pricer's answers into what the pages show
(:class:`~joulestat.dashboard.analysis.JobCost`; the Compare page's
:class:`~joulestat.reports.compare.table.JobFigures` are the command's own,
:func:`joulestat.reports.compare.figures.totals_figures`, priced by :func:`pricer`).

Prices: ``joulestat dashboard --prices FILE`` hands the file on as ``JOULESTAT_PRICES``
(absolute path). :func:`pricer` reads it once per path per process and keeps one
:class:`Pricer` per path, so a cached rate is always the rate of the prices in force:
the same precedence as ``joulestat compare --prices`` (``price_per_hour()``: the file's
row for the type, else the catalog). The dashboard passes no Electricity Maps token, so
every figure is priced from rates, without reading a job's energy series.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from joulestat.carbon.footprint import CarbonSettings
from joulestat.carbon.prices import PriceTable, load_prices
from joulestat.carbon.pricing import Pricer
from joulestat.dashboard.analysis import JobCost

if TYPE_CHECKING:
    from joulestat.store.jobs import JobDetail, JobTotals

__all__ = ["ENV_PRICES", "job_cost", "job_costs", "node_cost", "price_source",
           "price_table", "pricer"]

ENV_PRICES = "JOULESTAT_PRICES"


def pricer() -> Pricer:
    """The pricer of the prices file named by ``JOULESTAT_PRICES`` (the catalog's prices
    when unset). A bad file raises :class:`joulestat.carbon.prices.PricesError` naming the
    file and line (``joulestat dashboard`` checks it before Streamlit starts)."""
    return _pricer(os.environ.get(ENV_PRICES, "").strip())


@functools.lru_cache(maxsize=8)
def _pricer(path: str) -> Pricer:
    """Keyed by the path, not the table: the Jobs page asks once per job, and a path is
    cheaper to hash than every row of a file."""
    return Pricer(CarbonSettings(prices=load_prices(path) if path else None))


def price_table() -> PriceTable | None:
    """The prices file in force, read and checked once per path; None when unset."""
    return pricer().settings.prices


def price_source() -> str:
    """Where the pages' hourly prices come from, in a sentence (Markdown)."""
    table = price_table()
    catalog = "catalog list prices (on-demand; SageMaker's for `ml.*`)"
    if table is None:
        return (f"{catalog}; give your own with `joulestat dashboard --prices FILE` "
                "(or `--price-per-hour` for the CLI)")
    return (f"prices file `{table.path}` for the {len(table.rows)} instance type(s) it "
            f"lists, else {catalog}")


def node_cost(instance_type: str, region: str, energy_j: float, held_s: float) -> JobCost:
    """Operational CO2e, embodied CO2e and cost of a node using ``energy_j`` while held
    ``held_s`` seconds; embodied and cost are None where the catalog cannot say, and
    operational is known whenever the energy is (world-average intensity at worst)."""
    price = pricer().node_cost(instance_type, region, energy_j, held_s)
    return JobCost(price.operational_g, price.embodied_g, price.cost_usd)


def job_cost(job: JobTotals | JobDetail, now_s: float, by: Pricer | None = None) -> JobCost:
    """A job's CO2e and cost summed over its nodes, each held to ``now_s`` while it runs;
    an unknown embodied figure or price on any node makes that total None (operational
    CO2e is always known). A job with no node part yet has no cost to speak of. ``by``:
    the :func:`pricer` to use, when pricing many jobs."""
    if not job.per_node:
        return JobCost(operational_g=0.0)
    price = (by or pricer()).cost(job.per_node, now_s)
    return JobCost(price.operational_g, price.embodied_g, price.cost_usd)


def job_costs(jobs: Iterable[JobTotals], now_s: float) -> dict[str, JobCost]:
    """:func:`job_cost` of every job, by id (the Jobs page's thousands, one pricer)."""
    by = pricer()
    return {job.id: job_cost(job, now_s, by) for job in jobs}
