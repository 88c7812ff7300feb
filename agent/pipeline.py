"""sensors -> sampler -> attribution -> sinks for one node, one tick at a time.

The daemon and embedded mode (``joulestat run`` with no agent, or the in-process
client) both drive a :class:`Pipeline`, so a job measured either way is measured by
the same code. The pipeline also carries the crash checkpoint: every tick hands the
writer the sampler's and the accounting's counters, which the writer stores in the
same transaction as that tick's rows; a restart on the same boot resumes from them
and its first tick covers the whole gap, so nothing is lost or counted twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.identity import NodeInfo
from agent.jobs.accounting import JobAccounting, TickResult
from agent.sampler import Sampler
from agent.sinks.prometheus import NodeMetrics
from agent.tick import Tick

log = logging.getLogger(__name__)

# Older than this, a RAPL counter may have wrapped more than once unseen during the gap
# (262 kJ ranges wrap every ~11 min at 400 W), so the gap cannot be trusted.
CHECKPOINT_MAX_AGE_S = 300.0


def read_boot_id(procfs_root: Path) -> str:
    try:
        return (Path(procfs_root) / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass
class Pipeline:
    sampler: Sampler
    node: NodeInfo
    accounting: JobAccounting | None = None
    metrics: NodeMetrics | None = None
    writer: Any = None  # agent.store.writer.StoreWriter
    boot_id: str = ""
    save_checkpoints: bool = True  # embedded mode leaves the node's checkpoint alone

    def start(self, checkpoint: tuple[float, str, dict] | None = None, now_s: float = 0.0
              ) -> bool:
        """Baseline every counter, resuming from ``checkpoint`` when it is usable."""
        resumed = False
        if checkpoint is not None:
            saved_s, boot_id, state = checkpoint
            if boot_id and boot_id == self.boot_id and 0 <= now_s - saved_s <= CHECKPOINT_MAX_AGE_S:
                resumed = self.sampler.restore(state.get("sampler", {}))
                if resumed and self.accounting is not None:
                    self.accounting.restore(state.get("accounting", {}))
                if resumed:
                    log.info("resumed from the checkpoint of %.1f s ago: the first tick "
                             "covers the gap", now_s - saved_s)
            else:
                log.info("checkpoint not usable (other boot, or %.0f s old); the gap since "
                         "the last run is not measured", now_s - saved_s)
        if checkpoint is not None and self.accounting is not None:
            # Idle power outlives any checkpoint age: the node is the same node.
            self.accounting.idle.restore(checkpoint[2].get("accounting", {}).get("idle"))
        if not resumed:
            self.sampler.start()
            if self.accounting is not None:
                self.accounting.start()
        return resumed

    def tick(self) -> tuple[Tick, TickResult | None]:
        tick = self.sampler.tick()
        result = self.accounting.on_tick(tick) if self.accounting is not None else None
        if self.metrics is not None:
            self.metrics.observe(tick)
        if self.writer is not None:
            checkpoint = (self.checkpoint(), self.boot_id) if self.save_checkpoints else None
            self.writer.record(tick, result, checkpoint)
        elif result is not None:
            for job in result.finished_jobs:  # nothing to store: final as attributed
                job.final = True
        return tick, result

    def checkpoint(self) -> dict:
        state: dict[str, Any] = {"sampler": self.sampler.checkpoint()}
        if self.accounting is not None:
            state["accounting"] = self.accounting.checkpoint()
        return state

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.accounting is not None:
            self.accounting.close()
        self.sampler.close()
