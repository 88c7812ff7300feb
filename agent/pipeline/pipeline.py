"""sensors -> sampler -> attribution -> sinks for one node, one tick at a time.

The daemon and embedded mode (``joulestat run`` with no agent, or the in-process
client) both drive a :class:`Pipeline`, so a job measured either way is measured by
the same code. Its outputs are a list of sinks (:mod:`joulestat.pipeline.sink`): the pipeline
knows none by name, so what the daemon exports and what embedded mode stores differ
only in the list :mod:`joulestat.runtime.assembly` builds.

The pipeline also carries the crash checkpoint: when it saves checkpoints and a sink
stores ticks, every tick's record holds the sampler's and the accounting's counters,
which that sink stores in the same transaction as the tick's rows; a restart on the
same boot resumes from them and its first tick covers the whole gap, so nothing is
lost or counted twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from joulestat.attribution.accounting import JobAccounting, TickResult
from joulestat.attribution.registry import JobRegistry
from joulestat.core.losses import EnergyLosses, LossReason
from joulestat.core.records import NodeInfo
from joulestat.core.tick import Tick
from joulestat.pipeline.sampler import Sampler
from joulestat.pipeline.sink import Sink, TickRecord

log = logging.getLogger(__name__)

# Older than this, a RAPL counter may have wrapped more than once unseen during the gap
# (262 kJ ranges wrap every ~11 min at 400 W), so the gap cannot be trusted.
CHECKPOINT_MAX_AGE_S = 300.0
# A `joulestat run` job whose command exited while the agent was away is ended by its
# wrapper, which retries its end (with the exit time) until the agent answers again.
# The first tick waits up to this long for those ends, so the gap it covers charges the
# job only until its command exited, rather than ending it at the tick's end.
RUN_END_WAIT_S = 3.0


def read_boot_id(procfs_root: Path) -> str:
    try:
        return (Path(procfs_root) / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


class CheckpointPart(Protocol):
    """Something outside the pipeline whose state a restart must find again, kept in the
    node's checkpoint under its name (:attr:`Pipeline.checkpoint_parts`)."""

    def checkpoint(self) -> dict[str, Any]:
        """Its state now, JSON-able (taken every tick a store keeps)."""
        ...

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave, when the pipeline resumes from it."""
        ...


@dataclass
class Pipeline:
    """One node's sampler and accounting, feeding ``sinks`` in list order."""

    sampler: Sampler
    node: NodeInfo
    accounting: JobAccounting | None = None
    sinks: list[Sink] = field(default_factory=list)
    boot_id: str = ""
    save_checkpoints: bool = True  # embedded mode leaves the node's checkpoint alone
    losses: EnergyLosses | None = None  # energy no job got, by reason (the store writer's)
    node_energy_j: float = 0.0  # every tick's energy since start (what a late restore cost)
    # The newest tick: whether its energy was measured is what a serving job's trace
    # counts as power coverage (joulestat.runtime.serving).
    last_tick: Tick | None = None
    # Parts of the checkpoint that live outside the pipeline, by name: what a tick hook
    # must find again after a restart (the serving engines' counters a job's tokens are
    # counted from), saved with the sensors' counters and restored with them.
    checkpoint_parts: dict[str, CheckpointPart] = field(default_factory=dict)

    def start(self, checkpoint: tuple[float, str, dict] | None = None, now_s: float = 0.0
              ) -> bool:
        """Baseline every counter, resuming from ``checkpoint`` when it is usable."""
        resumed, unusable = False, False
        if checkpoint is not None:
            saved_s, boot_id, state = checkpoint
            if boot_id and boot_id == self.boot_id and 0 <= now_s - saved_s <= CHECKPOINT_MAX_AGE_S:
                resumed = self.sampler.restore(state.get("sampler", {}))
                if resumed and self.accounting is not None:
                    self.accounting.restore(state.get("accounting", {}))
                if resumed:
                    for name, part in self.checkpoint_parts.items():
                        part.restore(state.get(name, {}))
                    log.info("resumed from the checkpoint of %.1f s ago: the first tick "
                             "covers the gap", now_s - saved_s)
            else:
                unusable = True
        if checkpoint is not None and self.accounting is not None:
            # Idle power outlives any checkpoint age: the node is the same node.
            self.accounting.idle.restore(checkpoint[2].get("accounting", {}).get("idle"))
        if unusable and checkpoint is not None:
            self._say_unmeasured(checkpoint[0], checkpoint[1], now_s)
        if not resumed:
            self.sampler.start()
            if self.accounting is not None:
                self.accounting.start()
        if checkpoint is not None and self.accounting is not None:  # a restart
            await_run_ends(self.accounting.registry, self.accounting.procfs_root)
        return resumed

    def _say_unmeasured(self, saved_s: float, boot_id: str, now_s: float) -> None:
        """Say, at WARNING with its length and a floor of its joules, the time since the
        last checkpoint that no tick will cover, and count it (issue 47: a 373.7 s hole,
        81 % of a run, was said at INFO). On another boot only the time since this boot
        ran; the floor is the node's learned idle power over it (what it drew at least)."""
        other_boot = not boot_id or boot_id != self.boot_id
        gap_s = max(0.0, now_s - saved_s)
        if other_boot:
            gap_s = min(gap_s, time.clock_gettime(time.CLOCK_BOOTTIME))
        idle_w = self.accounting.idle.carried_power_w() if self.accounting is not None else 0.0
        floor_j = gap_s * idle_w
        if self.losses is not None:
            self.losses.add(LossReason.UNMEASURED_GAP, floor_j, gap_s)
        log.warning("checkpoint not usable (%s): %.1f s since %s are not measured, at "
                    "least %.1f J of the node's energy (its idle power, %.1f W) that no "
                    "tick and no job holds", "another boot" if other_boot
                    else f"{now_s - saved_s:.0f} s old, over {CHECKPOINT_MAX_AGE_S:.0f} s",
                    gap_s, "this boot" if other_boot else "it was saved", floor_j, idle_w)

    def tick(self) -> tuple[Tick, TickResult | None]:
        """Sample, attribute, and hand the tick to every sink once, in order."""
        tick = self.sampler.tick()
        self.last_tick = tick
        for entry in tick.entries:
            self.node_energy_j += entry.energy_j
        result = self.accounting.on_tick(tick) if self.accounting is not None else None
        stored = any(sink.stores_ticks for sink in self.sinks)
        # Computed only when something stores it: it copies every sensor's counters.
        checkpoint = ((self.checkpoint(), self.boot_id)
                      if stored and self.save_checkpoints else None)
        record = TickRecord(tick, result, checkpoint)
        for sink in self.sinks:
            sink.on_tick(record)
        if (not stored and result is not None and result.finished_ids
                and self.accounting is not None):
            # Nothing to store: final as attributed. (A storing sink reports them final
            # once stored, through the callback the runtime gave it.)
            self.accounting.registry.mark_final(result.finished_ids)
        return tick, result

    def checkpoint(self) -> dict:
        state: dict[str, Any] = {"sampler": self.sampler.checkpoint()}
        if self.accounting is not None:
            state["accounting"] = self.accounting.checkpoint()
        for name, part in self.checkpoint_parts.items():
            state[name] = part.checkpoint()
        return state

    def close(self) -> None:
        """Close every sink (the store's flushes what is buffered), then the readers.

        A sink that fails to close does not keep the others open; the first error is
        raised once everything has been closed.
        """
        error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # re-raised below, once the rest are closed
                log.exception("closing sink %s failed", type(sink).__name__)
                error = error or exc
        if self.accounting is not None:
            self.accounting.close()
        self.sampler.close()
        if error is not None:
            raise error


def await_run_ends(registry: JobRegistry, procfs_root: Path, wait_s: float = RUN_END_WAIT_S,
                   sleep: Callable[[float], object] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> int:
    """At start-up, before the first tick: wait up to ``wait_s`` for the ends of
    restored ``joulestat run`` jobs none of whose processes is left (their commands
    exited while the agent was down), which their wrappers are retrying with the exit
    time. The job API is already up. Without the wait the first tick would find the
    processes gone and end each job at the tick's end, charging it for the whole time
    the agent was away. Returns how many such jobs it waited for; a wrapper that never
    comes (killed too) costs one wait, and its job ends as before."""
    waiting = [job for job in registry.measured_jobs()
               if job.origin == "run" and job.ended_s is None and job.pids
               and not any((Path(procfs_root) / str(pid)).exists() for pid in job.pids)]
    if not waiting:
        return 0
    log.info("%d `joulestat run` job(s) ended while the agent was away; waiting up to "
             "%.0f s for their wrappers to say when", len(waiting), wait_s)
    deadline = clock() + wait_s
    while any(job.ended_s is None for job in waiting) and clock() < deadline:
        sleep(0.05)
    late = [job.id for job in waiting if job.ended_s is None]
    if late:
        log.info("no end from the wrapper of job(s) %s; they end at the first tick",
                 ", ".join(late))
    return len(waiting)
