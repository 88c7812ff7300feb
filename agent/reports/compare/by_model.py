"""``compare --by model``: each job that served named models as one part per model.

A server that serves several models (``job.serving("model-a")``, docs/jobs.md) has one
energy figure, split among its models by the time each kept it busy
(:mod:`joulestat.store.model_split`). :func:`by_model` makes each such job one
:class:`~joulestat.reports.compare.table.JobFigures` per model, which
:func:`~joulestat.reports.compare.table.compare` then pools by model like any group
(``by="model"``); the rules (each model carries its share of its job's whole energy,
idle included; its throughput is over the whole hours its jobs were held) are in
:mod:`joulestat.reports.compare.table`'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from joulestat.carbon.pricing import NodeFigures
from joulestat.reports.compare.table import JobFigures
from joulestat.store.model_split import ModelSplit

__all__ = ["ModelParts", "by_model"]


def _scaled(value: float | None, fraction: float) -> float | None:
    return None if value is None else value * fraction


def _part(job: JobFigures, fraction: float, model: str, units: dict[str, float]
          ) -> JobFigures:
    """``fraction`` of ``job``'s energy, dynamic energy, CO2e and cost, counting
    ``units``, over the job's whole time held (see the module's docstring)."""
    nodes = tuple(NodeFigures(n.node, n.instance_type, n.held_s, n.energy_j * fraction,
                              _scaled(n.cost_usd, fraction))
                  for n in job.nodes)
    bounds = job.energy_bounds_j
    return replace(job, nodes=nodes, units=units, energy_j=job.energy_j * fraction,
                   energy_bounds_j=None if bounds is None else (bounds[0] * fraction,
                                                                bounds[1] * fraction),
                   dynamic_j=_scaled(job.dynamic_j, fraction),
                   accelerator_j=job.accelerator_j * fraction,
                   operational_co2e_g=job.operational_co2e_g * fraction,
                   embodied_co2e_g=_scaled(job.embodied_co2e_g, fraction),
                   cost_usd=_scaled(job.cost_usd, fraction), model=model)


@dataclass(frozen=True, slots=True)
class ModelParts:
    """:func:`by_model`'s answer: a part per model of each job that served named models
    (``parts``, what ``compare(by="model")`` takes), and the jobs that served none
    (``unassigned``), left out of a comparison by model."""

    parts: tuple[JobFigures, ...]
    unassigned: tuple[JobFigures, ...] = ()

    def notes(self) -> list[str]:
        """What a comparison by model says about the jobs it left out."""
        if not self.unassigned:
            return []
        names = ", ".join(dict.fromkeys(job.name for job in self.unassigned))
        return [f"{len(self.unassigned)} job(s) served no named model and are not in this "
                f"comparison by model ({names}): compare them by job"]


def by_model(jobs: Sequence[JobFigures], splits: Mapping[str, ModelSplit]) -> ModelParts:
    """``jobs`` as per-model parts (in model order), each job in turn; each model carries
    :meth:`~joulestat.store.model_split.ModelSplit.job_fractions` of its job. A job
    without a split (it served no named model) is :attr:`ModelParts.unassigned`."""
    parts: list[JobFigures] = []
    unassigned: list[JobFigures] = []
    for job in jobs:
        split = splits.get(job.job_id)
        fractions = split.job_fractions() if split is not None else {}
        if split is None or not fractions:
            unassigned.append(job)
            continue
        parts += [_part(job, fractions[share.model], share.model, dict(share.units))
                  for share in split.models]
    return ModelParts(tuple(parts), tuple(unassigned))
