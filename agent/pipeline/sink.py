"""What every output of the pipeline is: a sink that sees each tick once, then closes.

The pipeline (:mod:`joulestat.pipeline.pipeline`) hands each tick to a list of sinks in order and
names none of them, so an output is added by appending to that list, not by teaching
the pipeline a new field. Today's sinks: the Prometheus node metrics
(:mod:`joulestat.outputs.prometheus`) and the store writer (:mod:`joulestat.store.writer`). The
job metrics are not one: they copy the jobs when scraped, not every tick.

One frozen :class:`TickRecord` per tick carries everything any sink needs: the tick,
its attribution, and the crash checkpoint taken after it. The checkpoint is only worth
computing for a sink that stores ticks (``stores_ticks``): it has to land in the same
transaction as that tick's rows, else a restart would count the tick twice or not at
all. The same flag says who makes finished jobs ``final``: a storing sink does once
their last tick is stored, by handing their ids to the owner of the live jobs (the
store writer's ``on_final``, the registry's ``mark_final``: the record carries job
records and ids, never the registry's jobs); with none, nothing more will happen to
their figures, so the pipeline marks them final right away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.accounting import TickResult
    from joulestat.core.tick import Tick

# (state, boot id): the sampler's and the accounting's counters after the tick, and the
# boot they are valid on (see joulestat.pipeline.pipeline).
Checkpoint = tuple[Mapping[str, Any], str]


@dataclass(frozen=True, slots=True)
class TickRecord:
    """One tick as every sink receives it.

    ``result`` is None when the pipeline attributes nothing (no job accounting);
    ``checkpoint`` is None unless the pipeline saves checkpoints and some sink stores
    ticks.
    """

    tick: Tick
    result: TickResult | None = None
    checkpoint: Checkpoint | None = None


class Sink(Protocol):
    """An output of the pipeline. Called on the tick thread: ``on_tick`` must be cheap
    (copy or buffer, never block on I/O), since a slow sink delays the next tick."""

    # True for a sink that stores ticks durably: it gets checkpoints and reports the
    # result's finished jobs final once their last tick is stored.
    stores_ticks: bool

    def on_tick(self, record: TickRecord) -> None: ...

    def close(self) -> None: ...
