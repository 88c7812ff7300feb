"""A job's figures so far, as the job API serves them to code that logs them (the
Trainer and Lightning callbacks, the MLflow and W&B helpers: :mod:`joulestat.integrations`).

Why from the report: a number logged into an experiment tracker must be the number
``joulestat report`` gives for the job at that moment, or the two will be compared and
disagree. So the figures are a projection of :func:`joulestat.reports.model.report_from_detail`
(built without its per-tick series, which is what grows with a job's length), after
the agent has written the rows it still buffers (:class:`FiguresFromStore`): the store then
holds the job up to its last tick, not up to the last flush (10 s by default).

The CO2e and cost are the data's (no command-line overrides), as ``joulestat report``
gives them without carbon or price flags.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from joulestat.reports.narrative import measured_share
from joulestat.reports.provenance import energy_is

if TYPE_CHECKING:  # pragma: no cover - typing only
    from sqlalchemy.engine import Engine

    from joulestat.pipeline.tick_loop import SharedTick

__all__ = ["FIGURES_FORMAT", "FiguresFromStore", "figures_of"]

FIGURES_FORMAT = "joulestat-figures"
# Without a tick on demand, a caller asking more often than this reads the store as it
# is: a flush per request would let any client on the node turn the writer's batches
# into one commit each (with one, the ticks' gap bounds the commits).
FLUSH_AT_MOST_EVERY_S = 1.0
PER_UNIT_KEYS = ("energy_j", "dynamic_energy_j", "co2e_g", "cost_usd")


def figures_of(report: Mapping[str, Any]) -> dict[str, Any]:
    """The figures a callback logs, taken from ``report`` (a report dict): totals so
    far, per unit, and how the energy was obtained. Every name carries its unit."""
    sources = [s for per_component in report["sources"].values() for s in per_component]
    job = report["job"]
    return {
        "format": FIGURES_FORMAT,
        "job_id": job["id"],
        "name": job["name"],
        "status": job["status"],
        "duration_s": job["duration_s"],
        "energy_j": report["energy_j"]["total"],
        "dynamic_energy_j": report["dynamic_energy_j"]["total"],
        "idle_energy_j": report["idle_energy_j"]["total"],
        "co2e_g": report["co2e_g"],
        "total_co2e_g": report["total_co2e_g"],
        "cost_usd": report["cost_usd"],
        "work_units": dict(report["work_units"]),
        "per_unit": {unit: {key: figures.get(key) for key in PER_UNIT_KEYS}
                     for unit, figures in report["per_unit"].items()},
        # Provenance, from the same reading as every report and the dashboard
        # (joulestat.reports.sources): a phrase and the measured share of the energy.
        "energy_is": energy_is(sources),
        "measured_share": measured_share(report),
        "energy_by_class_j": dict(report["energy_by_class"]),
        "headline": report["headline"],
        "generated_s": report["generated_s"],
    }


class FiguresFromStore:
    """What the job API calls for ``GET /v1/jobs/{id}/figures`` and ``.../report``:
    brings the store up to the moment asked, then builds the report from it.

    ``flush``: the store writer's (None: nothing buffered elsewhere). ``ticks``: the
    pipeline's tick (:class:`~joulestat.pipeline.tick_loop.SharedTick`), given by a
    running agent or embedded measurement: a tick is taken after the ask (at most five
    a second) and written, so the figures hold every unit counted before the ask and
    the energy up to the same moment. Without it (a store read after the measurement
    ended), what is buffered is written at most once a second."""

    def __init__(self, engine: Engine, flush: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 ticks: SharedTick | None = None) -> None:
        self._engine, self._flush, self._clock = engine, flush, clock
        self._ticks = ticks
        self._lock = threading.Lock()
        self._flushed_at: float | None = None

    def _written(self) -> None:
        if self._flush is None:
            return
        asked_s = self._clock()
        if self._ticks is not None:
            self._ticks.since(asked_s)  # the same clock: time.monotonic
        with self._lock:
            now = self._clock()
            if self._ticks is None and self._flushed_at is not None \
                    and now - self._flushed_at < FLUSH_AT_MOST_EVERY_S:
                return
            self._flushed_at = now
            self._flush()  # False (store away): the report says what is stored

    def report(self, job_id: str, *, series: bool = True) -> dict[str, Any]:
        """The job's report as ``joulestat report --format json`` gives it now;
        :class:`~joulestat.store.jobs.UnknownJobError` when the store has no such job."""
        from joulestat.reports.model import build_report

        self._written()
        return build_report(self._engine, job_id, series=series)

    def figures(self, job_id: str) -> dict[str, Any]:
        """:func:`figures_of` the job's report (built without its series)."""
        return figures_of(self.report(job_id, series=False))
