"""Idle power per (component, device): what the node would draw with no work on it.

Estimators know their idle power (the model at 0 % load). Measured sources learn it:
the 5th percentile of the power seen over the last ``window_s`` seconds, so a node
that has been busy for an hour still has a sensible baseline from its quieter ticks,
and a single noisy low sample does not drag it down (Kepler uses the minimum ever
seen; a low percentile is the same idea, robust to one odd reading).

The learned values go into the agent's crash checkpoint: without them a restarted agent
would count the whole package as dynamic until it had learned again (the gap tick and
the next ``min_samples``), and under ``--idle-policy share`` a lone job's idle share
would go to "unattributed" after every crash. Restored values stand in until the new
window holds ``min_samples`` ticks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from joulestat.core.tick import Component, Tick, is_component

IDLE_PERCENTILE = 5
NO_IDLE_COMPONENTS = (Component.NET,)  # the network model is per byte: all of it is dynamic


class IdleBaselines:
    def __init__(
        self,
        fixed_w: Mapping[tuple[str, str], float] | None = None,
        window_s: float = 600.0,
        min_samples: int = 10,
        recompute_every: int = 10,
    ) -> None:
        self._fixed_w = dict(fixed_w or {})
        self._window_s = window_s
        self._min_samples = min_samples
        self._recompute_every = recompute_every
        self._samples: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        self._learned_w: dict[tuple[str, str], float] = {}
        self._carried_w: dict[tuple[str, str], float] = {}  # from a checkpoint
        self._ticks = 0

    def update(self, tick: Tick) -> dict[tuple[str, str], float]:
        """Record this tick's power and return the idle power to use for it."""
        self._ticks += 1
        recompute = (self._ticks - 1) % self._recompute_every == 0  # ticks 1, 1+n, 1+2n...
        result: dict[tuple[str, str], float] = {}
        for entry in tick.entries:
            key = (entry.component, entry.device)
            if key in self._fixed_w:
                result[key] = self._fixed_w[key]
                continue
            if entry.component in NO_IDLE_COMPONENTS or tick.entry_duration_s(entry) <= 0:
                result[key] = 0.0
                continue
            samples = self._samples.setdefault(key, deque())
            samples.append((tick.t1_s, tick.power_w(entry)))
            while samples and samples[0][0] < tick.t1_s - self._window_s:
                samples.popleft()
            if recompute or key not in self._learned_w:
                self._learned_w[key] = self._percentile(samples, key)
            result[key] = self._learned_w[key]
        return result

    def _percentile(self, samples: deque[tuple[float, float]], key: tuple[str, str]) -> float:
        """Until enough samples exist, the value from before a restart, else no idle is
        assumed: everything counts as dynamic."""
        if len(samples) < self._min_samples:
            return self._carried_w.get(key, 0.0)
        # A list, not a generator: up to 600 samples a device (at the defaults) every
        # tenth tick, and a generator's steps made the sort a third slower (19 us, 14).
        ordered = sorted([power for _, power in samples])
        return ordered[int(len(ordered) * IDLE_PERCENTILE / 100)]

    def carried_power_w(self) -> float:
        """The node's idle power as learned before this start (0 W: none learned), the
        floor of what it drew through a gap no tick covers."""
        return sum(self._carried_w.values())

    def current(self) -> dict[tuple[str, str], float]:
        return {**self._learned_w, **self._fixed_w}

    def checkpoint(self) -> list[list]:
        """The learned idle powers, ``[[component, device, watts], ...]`` (JSON-able)."""
        learned = {**self._carried_w, **{k: w for k, w in self._learned_w.items() if w > 0}}
        return [[component, device, w] for (component, device), w in learned.items()]

    def restore(self, state: object) -> None:
        """Take learned idle powers from :meth:`checkpoint`; bad entries are skipped, and
        so is a component this joulestat does not measure (``gpu`` of a development
        checkpoint from before the first release): carried, it would be saved again with
        every checkpoint and match nothing."""
        if not isinstance(state, list):
            return
        for item in state:
            try:
                component, device, watts = item
                watts = float(watts)
            except (TypeError, ValueError):
                continue
            if (watts >= 0 and watts == watts and watts != float("inf")
                    and is_component(component)):
                self._carried_w[(str(component), str(device))] = watts
