"""``compare --by model``: the models of multi-model servers as rows of a comparison.

A job that serves several models (``job.serving("model-a")``, docs/jobs.md) has its
energy split among them by busy time (:mod:`joulestat.store.model_split`). Here each such
job becomes one :class:`~joulestat.reports.compare.JobFigures` per model, plus one for its
idle part, which :func:`~joulestat.reports.compare.compare` then pools by model like any
group (``by="model"``). Each part is charged the job's figures in the proportion of
its energy: energy, CO2e, cost and the instance-hours held, so a model busy three
quarters of the time carries three quarters of the bill, and its throughput per
instance-hour is what it did with that share. The parts add up to the job: models +
idle = the job's energy, cost and hours. A job that named no model stays whole
(``model unset``). One proportion for every node of a multi-node job; the split itself
is per node and minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from joulestat.carbon.pricing import NodeFigures
from joulestat.reports.compare import JobFigures
from joulestat.reports.compare_groups import IDLE_MODEL
from joulestat.store.model_split import ModelSplit


def _scaled(value: float | None, fraction: float) -> float | None:
    return None if value is None else value * fraction


def _part(job: JobFigures, fraction: float, model: str, units: dict[str, float]
          ) -> JobFigures:
    """``fraction`` of ``job`` (energy, CO2e, cost, hours held), counting ``units``."""
    nodes = tuple(NodeFigures(n.node, n.instance_type, n.held_s * fraction,
                              n.energy_j * fraction, _scaled(n.cost_usd, fraction))
                  for n in job.nodes)
    return replace(job, nodes=nodes, units=units, energy_j=job.energy_j * fraction,
                   accelerator_j=job.accelerator_j * fraction,
                   operational_co2e_g=job.operational_co2e_g * fraction,
                   embodied_co2e_g=_scaled(job.embodied_co2e_g, fraction),
                   cost_usd=_scaled(job.cost_usd, fraction), model=model)


def by_model(jobs: Sequence[JobFigures], splits: Mapping[str, ModelSplit]
             ) -> list[JobFigures]:
    """``jobs`` as per-model parts (in model order, then idle), each job in turn; a job
    without a split (no per-model units) as it is."""
    parts: list[JobFigures] = []
    for job in jobs:
        split = splits.get(job.job_id)
        if split is None or split.energy_j <= 0:
            parts.append(job)
            continue
        for share in split.models:
            parts.append(_part(job, share.energy_j / split.energy_j, share.model,
                               dict(share.units)))
        parts.append(_part(job, max(split.idle_j, 0.0) / split.energy_j, IDLE_MODEL, {}))
    return parts
