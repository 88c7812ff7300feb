"""The Compare page's figures: ``joulestat compare``'s arithmetic on the dashboard's reads.

The page must say what the command says about the same jobs, so nothing here computes a
figure: jobs read as :class:`~joulestat.store.jobs.JobTotals` become
:class:`~joulestat.reports.compare.table.JobFigures` by the command's own function
(:func:`joulestat.reports.compare.figures.totals_figures`, which
:mod:`joulestat.dashboard.state` calls with the pages'
:class:`~joulestat.carbon.pricing.Pricer`), and
:func:`joulestat.reports.compare.table.compare` groups them, takes the deltas and sizes
the fleet. By instance type over a window, the store adds the single-node jobs up per
setup instead (:func:`joulestat.reports.compare.setups.compare_setups`, which
``joulestat compare --by instance_type`` calls too) and :func:`pooled` takes its table.
This module only orders the jobs, picks the options the page offers (the
grouping, the default baseline) and collects the notes the command prints under its
table. ``by="model"`` takes the command's per-model figures too
(:func:`~joulestat.reports.compare.by_model.by_model`, which :mod:`joulestat.dashboard.state`
calls, with its note on the jobs that served no named model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from joulestat.reports.compare.table import (
    PER_UNIT,
    ComparisonRow,
    ComparisonTable,
    JobFigures,
    compare,
    rebase,
)
from joulestat.reports.compare.words import row_names

if TYPE_CHECKING:
    from joulestat.store.jobs import JobTotals

__all__ = ["Comparison", "comparison", "in_order", "pooled", "row_key", "row_labels",
           "slowest"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """A comparison table and its notes (``"<job name>: <note>"``, as the CLI prints
    them): plain frozen dataclasses, so ``st.cache_data`` can keep it."""

    table: ComparisonTable
    notes: tuple[str, ...]

    def against(self, baseline: str | None = None,
                sla_units_per_hour: float | None = None) -> Comparison:
        """The same rows against ``baseline``, sized for ``sla_units_per_hour``
        (:func:`~joulestat.reports.compare.table.rebase`: what ``compare()`` gives with them)."""
        return Comparison(rebase(self.table, baseline, sla_units_per_hour), self.notes)

    @property
    def per_unit(self) -> tuple[ComparisonRow, ...]:
        return tuple(r for r in self.table.rows if r.basis == PER_UNIT)

    @property
    def per_run(self) -> tuple[ComparisonRow, ...]:
        return tuple(r for r in self.table.rows if r.basis != PER_UNIT)


def in_order(found: Sequence[JobTotals], picked: Sequence[str] | None = None
             ) -> list[JobTotals]:
    """``found`` in store order (by start, as the CLI reads them), or in the order
    ``picked`` names them (as ``--jobs`` takes them): the order of the rows
    :func:`joulestat.reports.compare.figures.totals_figures` makes of them."""
    jobs = list(found)
    if picked is not None:
        order = {job_id: i for i, job_id in enumerate(picked)}
        jobs.sort(key=lambda j: order.get(j.id, len(order)))
    return jobs


def comparison(jobs: Sequence[JobFigures], unit: str, by: str,
               left_out: Sequence[str] = ()) -> Comparison | None:
    """``compare(jobs, by, unit)`` (against the first row; see :meth:`Comparison.against`)
    and the notes: ``left_out`` (what the grouping left out, as the command says it),
    then the jobs'; None when no job counted ``unit`` (nothing per unit to show)."""
    if not any(job.counted(unit) > 0 for job in jobs):
        return None
    table = compare(jobs, by=by, unit=unit)
    notes = tuple(dict.fromkeys([*left_out, *(f"{job.name}: {note}" for job in jobs
                                              for note in job.notes)]))
    return Comparison(table, notes)


def pooled(table: ComparisonTable, notes: Sequence[str]) -> Comparison | None:
    """A table the store pooled per setup
    (:func:`joulestat.reports.compare.setups.compare_setups`) and its notes, as
    :func:`comparison` gives them; None when no row is per unit (no job counted it)."""
    if not any(row.basis == PER_UNIT for row in table.rows):
        return None
    return Comparison(table, tuple(notes))


def row_key(row: ComparisonRow) -> str:
    """What ``compare(baseline=...)`` takes for this row: the job id, or the setup."""
    return row.job_id if row.job_id is not None else row.group


def row_labels(rows: Sequence[ComparisonRow],
               when: Callable[[float], str] | None = None) -> dict[str, str]:
    """:func:`row_key` -> the name the page shows: a setup or label row its group, a job
    row its name, told apart from runs of the same name by the labels that differ
    between them (``mlp-serve concurrency=4``), else by ``when(started_s)``
    (:func:`joulestat.reports.compare.words.row_names`, as ``joulestat compare`` does)."""
    return {row_key(r): name for r, name in zip(rows, row_names(rows, when), strict=True)}


def slowest(rows: Sequence[ComparisonRow]) -> ComparisonRow:
    """The default baseline: the per-unit row with the lowest throughput, so deltas read
    as what the faster setups gain over it."""
    return min(rows, key=lambda r: r.units_per_hour or 0.0)
