"""The demo's jobs: each one process measured as one job, by the node's agent when one
answers (through its job API, as ``joulestat run`` does) or in this process (embedded
mode), under a placeholder instance type (``demo-1vcpu``, ``demo-2vcpu``) that prices it
at the demo's made-up rates (:data:`joulestat.carbon.catalog.DEMO_PRICES_USD_PER_H`).

What every stage of the demo is handed: a :class:`Measurement` (where its jobs are
measured), a :class:`Progress` (where it says how far it got; the command draws it), and
:class:`DemoJob` for each job it runs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.api.agent_client import AgentClient
    from joulestat.runtime.assembly import PipelineSettings
    from joulestat.runtime.embedded import EmbeddedJob


class Progress(Protocol):
    """Where a stage says how far it got: a new step, then its part done (0..1)."""

    def step(self, text: str) -> None: ...

    def update(self, part: float, detail: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class Measurement:
    """Where the demo's jobs are measured: through ``agent``'s job API when an agent
    answers, else in this process with ``pipeline``'s settings (None: no agent)."""

    agent: AgentClient | None
    pipeline: PipelineSettings

    def interval_s(self) -> float:
        """How often the measurement reads (and counts) a job: the agent's tick, or the
        in-process pipeline's."""
        given = self.agent.health().get("interval_s") if self.agent is not None else None
        return float(given or self.pipeline.tick.interval_s)


class DemoJob:
    """One demo job on one process, through the agent's API or measured in-process."""

    def __init__(self, measurement: Measurement, name: str, kind: str,
                 labels: dict[str, str], pid: int, instance_type: str,
                 agent_labels: dict[str, str] | None = None) -> None:
        api, settings = measurement.agent, measurement.pipeline
        self.api, self.name, self.kind, self.pid = api, name, kind, pid
        self.labels, self.id = dict(labels), uuid.uuid4().hex
        self.embedded: EmbeddedJob | None = None
        self.instance_type, self.agent_labels = instance_type, dict(agent_labels or {})
        if api is not None:  # the agent records the placeholder type: the job is priced
            api.register(name, kind, [pid], self.labels, self.id,
                         instance_type=instance_type, agent_labels=self.agent_labels or None)
            return
        from joulestat.runtime.embedded import EmbeddedJob

        node = replace(settings.node, instance_type=instance_type)
        self.embedded = EmbeddedJob(name, kind, self.labels, {pid}, self.id,
                                    replace(settings, node=node), reason="demo",
                                    agent_labels=self.agent_labels or None).start()

    def count(self, unit: str, n: float) -> None:
        if n <= 0:
            return
        if self.embedded is not None:
            self.embedded.count(unit, n)
        else:
            self.api.count(self.id, unit, n)

    def relabel(self, extra: dict[str, str]) -> None:
        """A running job takes new labels when registered again under its id."""
        self.labels.update(extra)
        if self.embedded is not None:
            self.embedded.add_pid(self.pid, labels=self.labels)
        else:
            self.api.register(self.name, self.kind, [self.pid], self.labels, self.id,
                              instance_type=self.instance_type,
                              agent_labels=self.agent_labels or None)

    def counted(self, unit: str) -> float:
        """How much of ``unit`` the running job has counted so far."""
        if self.embedded is not None:
            assert self.embedded.job is not None
            return float(self.embedded.job.units.get(unit, 0.0))
        return float((self.api.get(self.id).get("units") or {}).get(unit, 0.0))

    def end(self, cpu_s: float | None = None) -> dict[str, Any]:
        """End it; the summary is the stored one (its last tick attributed and stored)."""
        if self.embedded is not None:
            return self.embedded.end(cpu_s=cpu_s)
        self.api.end(self.id, cpu_s=cpu_s)
        return self.api.wait_final(self.id, self.api.final_timeout_s() or 10.0)
