"""One training run as one job, whatever its loop: what the Trainer and Lightning
callbacks share.

A run of several processes (ranks, over one node or several) is one job, counted once:

* the job's id is global rank 0's (the enclosing ``joulestat run``'s, the one given, or
  a new one) and every rank learns it through one ``all_gather`` of the framework's
  process group (``gather``), which every rank calls at the same point, so no rank
  waits on another that skipped it;
* on each node, the lowest rank registers that id with the node's agent, claiming the
  processes of all the node's ranks (an agent's job is its processes and their
  descendants); a job of several nodes is one id across their agents, as
  ``joulestat run --job-id`` makes it;
* under ``joulestat run`` every rank is already in the run's job (a descendant of it)
  and only joins it;
* only global rank 0 counts (steps, and samples and tokens for the whole run) and logs:
  the figures are the job's, read from the agent (:meth:`TrackedJob.figures`).

Nothing here raises into the training loop: a failure is said once on the
``joulestat`` logger and the run goes on, measured as well as it can be.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from joulestat.client.context import enclosing_job
from joulestat.client.notice import warn_once
from joulestat.client.tracking import TrackedJob

log = logging.getLogger(__name__)

__all__ = ["METRIC_PREFIX", "RankInfo", "TrainingRun", "metrics_of", "params_of"]

METRIC_PREFIX = "joulestat/"
# How often the agent is asked for figures at most: they change once a tick, and each
# ask reads the store. A logging step more often than this logs the last figures.
FIGURES_EVERY_S = 1.0
# The units a training run counts, as every report and `joulestat compare` name them.
STEP, SAMPLE, TOKEN = "step", "sample", "token"


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One process of a run, as every rank tells the others."""

    rank: int
    host: str
    pid: int
    job_id: str  # the id this rank would give the job: global rank 0's is taken


def metrics_of(figures: Mapping[str, Any], units: Iterable[str] = (STEP, SAMPLE, TOKEN)
               ) -> dict[str, float]:
    """The numbers a tracker logs from a job's figures (:func:`TrackedJob.figures`):
    ``joulestat/energy_j``, ``joulestat/co2e_g``, ``joulestat/cost_usd`` so far, the
    same per unit (``joulestat/energy_j_per_step``, ...), and
    ``joulestat/measured_share``; a figure the report does not know (a cost without a
    price) is left out rather than logged as 0."""
    found: dict[str, float] = {}

    def put(name: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            found[METRIC_PREFIX + name] = float(value)

    for name in ("energy_j", "dynamic_energy_j", "co2e_g", "cost_usd", "measured_share"):
        put(name, figures.get(name))
    per_unit = figures.get("per_unit") or {}
    for unit in units:
        for name, value in (per_unit.get(unit) or {}).items():
            put(f"{name}_per_{unit}", value)
    for unit in units:
        put(f"{unit}s", (figures.get("work_units") or {}).get(unit))
    return found


def params_of(figures: Mapping[str, Any] | None, job: TrackedJob | None) -> dict[str, str]:
    """What a tracker records once, as parameters: the job's id and how its energy was
    obtained (``joulestat.energy_is``: "measured", "estimated (model: ...)", ...)."""
    measured = job is not None and job.mode is not None
    return run_params(figures, job.id if measured else None,
                      str(job.mode) if measured else None)


def run_params(figures: Mapping[str, Any] | None, job_id: str | None,
               measured_by: str | None) -> dict[str, str]:
    """:func:`params_of` from the job's id and who measured it (``agent``,
    ``embedded``): how the ``joulestat run`` wrapper names its job."""
    params: dict[str, str] = {}
    if job_id is not None and measured_by is not None:
        params["joulestat.job_id"] = job_id
        params["joulestat.measured_by"] = measured_by
    if figures is not None:
        params["joulestat.energy_is"] = str(figures.get("energy_is"))
    return params


class TrainingRun:
    """The job one training run is measured as (see the module's docstring).

    ``start(rank, gather)``: ``rank`` this process's global rank, ``gather`` an
    all_gather of a picklable object over the run's processes (None: one process).
    """

    def __init__(self, name: str | None, kind: str = "training",
                 labels: Mapping[str, str] | None = None, job_id: str | None = None,
                 agent_url: str | None = None, *, figures_every_s: float = FIGURES_EVERY_S
                 ) -> None:
        self.name, self.kind, self.labels = name, kind, dict(labels or {})
        self.requested_id, self.agent_url = job_id, agent_url
        self.figures_every_s = figures_every_s
        self.job: TrackedJob | None = None
        self.counts = False  # global rank 0: counts and logs
        self._figures: dict[str, Any] | None = None
        self._figures_at: float | None = None

    def start(self, default_name: str, rank: int = 0,
              gather: Callable[[Any], list[Any]] | None = None) -> None:
        """Register or join the run's job; never raises."""
        try:
            self._start(default_name, rank, gather)
        except Exception as exc:
            warn_once(("training run", "start", type(exc).__name__),
                      f"joulestat: measuring the training run failed ({exc!r}); "
                      "training goes on unmeasured")

    def _start(self, default_name: str, rank: int,
               gather: Callable[[Any], list[Any]] | None) -> None:
        name = self.name or default_name
        enclosing = enclosing_job()
        proposed = self.requested_id or (enclosing.job_id if enclosing else uuid.uuid4().hex)
        me = RankInfo(rank, socket.gethostname(), os.getpid(), proposed)
        ranks = [me]
        if gather is not None:
            try:
                ranks = [r for r in gather(me) if isinstance(r, RankInfo)] or [me]
            except Exception as exc:  # a group that cannot gather: measure this rank only
                warn_once(("training run", "gather"),
                          f"joulestat: the ranks of this run could not share a job id "
                          f"({exc!r}); each process is measured as a job of its own")
                ranks = [me]
        first = min(ranks, key=lambda r: r.rank)
        job_id = first.job_id
        on_this_node = [r for r in ranks if r.host == me.host]
        self.counts = me.rank == first.rank
        registers = me.rank == min(r.rank for r in on_this_node)
        if not (self.counts or registers):
            return  # measured as part of the job its node's first rank registered
        pids = sorted({r.pid for r in on_this_node})
        self.job = TrackedJob(name, self.kind, self.labels, job_id, self.agent_url,
                              pids=pids)
        self.job.start()
        log.info("joulestat: training run %r is job %s (%d process(es) on this node, "
                 "%d in all)", name, job_id, len(on_this_node), len(ranks))

    def count(self, unit: str, n: float) -> None:
        if self.counts and self.job is not None and n > 0:
            self.job.count(unit, n)

    def figures(self, fresh: bool = False) -> dict[str, Any] | None:
        """The job's figures, asked of the agent at most every ``figures_every_s``
        (``fresh``: now); None where there are none (said once by the job)."""
        if not self.counts or self.job is None:
            return None
        now = time.monotonic()
        if fresh or self._figures_at is None or now - self._figures_at >= self.figures_every_s:
            got = self.job.figures()
            self._figures_at = now
            if got is not None:
                self._figures = got
        return self._figures

    def metrics(self, fresh: bool = False) -> dict[str, float]:
        figures = self.figures(fresh)
        return metrics_of(figures) if figures is not None else {}

    def params(self) -> dict[str, str]:
        return params_of(self._figures, self.job) if self.counts else {}

    def end(self) -> dict[str, Any] | None:
        """End the job (a joined one goes on) and return its final figures, read after
        its last tick is stored: the numbers `joulestat report` will give."""
        if self.job is None:
            return None
        self.job.end()
        if not self.counts:
            return None
        return self.figures(fresh=True)


def report_files(job: TrackedJob | None, directory: str) -> list[str]:
    """The job's report written as ``joulestat-report-<id>.json`` and ``.html`` in
    ``directory`` (what the trackers attach as artifacts); [] where there is no report,
    said once by the job."""
    report = job.report() if job is not None else None
    return [] if report is None else write_report(report, directory)


def write_report(report: Mapping[str, Any], directory: str) -> list[str]:
    """``report`` written as ``joulestat-report-<id>.json`` and ``.html`` in
    ``directory``; the paths."""
    from pathlib import Path

    from joulestat.reports.html_report import render_html
    from joulestat.reports.json_report import render_json

    stem = Path(directory) / f"joulestat-report-{report['job']['id']}"
    written = []
    for suffix, text in ((".json", render_json(report)), (".html", render_html(report))):
        path = stem.with_suffix(suffix)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
    return written


def batch_size(batch: Any) -> int | None:
    """The samples in a batch: the first dimension of its ``input_ids``, else of its
    first tensor (a batch may be a tensor, a sequence or a mapping of them); None when
    it holds no tensor."""
    if hasattr(batch, "shape"):
        return int(batch.shape[0]) if len(batch.shape) > 0 else None
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        if ids is not None and hasattr(ids, "shape") and len(ids.shape) > 0:
            return int(ids.shape[0])
        values: Iterable[Any] = batch.values()
    elif isinstance(batch, list | tuple):
        values = batch
    else:
        return None
    for value in values:
        found = batch_size(value)
        if found is not None:
            return found
    return None


def batch_tokens(batch: Any) -> Any:
    """The tokens of a batch of text: its ``attention_mask``'s ones, else every input
    id; 0 for a batch with neither. A tensor sum stays on its device (adding it up
    costs no host sync per batch; ``.item()`` when sent)."""
    if not isinstance(batch, Mapping):
        return 0
    mask, ids = batch.get("attention_mask"), batch.get("input_ids")
    if mask is not None and hasattr(mask, "sum"):
        return mask.sum()
    if ids is not None and hasattr(ids, "numel"):
        return ids.numel()
    return 0


def as_number(value: Any) -> float:
    """A count that may be a tensor (a device sync, once per send) as a float."""
    return float(value.item() if hasattr(value, "item") else value)


def torch_gather() -> Callable[[Any], list[Any]] | None:
    """An all_gather of one picklable object over torch.distributed's default group,
    which the Trainer (through Accelerate) or Lightning's strategy set up; None where
    there is none (one process)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None

    def gather(obj: Any) -> list[Any]:
        found: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(found, obj)
        return found

    return gather
