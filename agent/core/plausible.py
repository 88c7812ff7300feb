"""Physical limits every way in is held to: imports, replays, the job API.

Why: a figure no machine could produce (``idle_j = 1e308``) is not a measurement but a
typo or an attack, and once stored it poisons every sum built on it (1e308 + 1e308 is
Infinity, which JSON cannot say). Each way in refuses it with the field and the limit,
before anything is written. The limits are far above any real node and far below where
a float sum over a fleet could overflow; docs/reports.md and docs/jobs.md list them.
"""

from __future__ import annotations

import math
import time

# One node: 100 kW is a full rack of accelerators; no single node draws more.
MAX_NODE_POWER_W = 100_000.0
# One node's energy in one import entry: 1e12 J (278 MWh) is 100 kW for over 115 days.
MAX_NODE_ENERGY_J = 1e12
# The power check's shortest duration: a node part of under a second (rounded times) is
# held to the energy of one second at MAX_NODE_POWER_W.
MIN_POWER_DURATION_S = 1.0
# Timestamps (epoch seconds): nothing measured before 2000-01-01 or more than a day ahead
# of this machine's clock (another machine's clock may run a little ahead).
MIN_EPOCH_S = 946_684_800.0
MAX_FUTURE_S = 86_400.0


class Implausible(ValueError):
    """A figure past a physical limit; the message names the limit."""


def check_epoch(value_s: float, now_s: float | None = None) -> float:
    """``value_s`` if it is a time a measurement can have, else :class:`Implausible`."""
    now_s = time.time() if now_s is None else now_s
    if not math.isfinite(value_s) or value_s < MIN_EPOCH_S:
        raise Implausible(f"{value_s!r} is before 2000-01-01 (epoch {MIN_EPOCH_S:.0f} s)")
    if value_s > now_s + MAX_FUTURE_S:
        raise Implausible(f"{value_s:.0f} is {(value_s - now_s) / 86_400:.1f} days ahead of "
                          f"this machine's clock (at most {MAX_FUTURE_S / 86_400:g} day)")
    return value_s


def check_node_energy(energy_j: float, duration_s: float) -> float:
    """``energy_j`` if one node could have used it over ``duration_s``: at most
    :data:`MAX_NODE_ENERGY_J`, and at most :data:`MAX_NODE_POWER_W` over the duration
    (at least :data:`MIN_POWER_DURATION_S`)."""
    if not math.isfinite(energy_j) or energy_j > MAX_NODE_ENERGY_J:
        raise Implausible(f"{energy_j:g} J is over the limit of {MAX_NODE_ENERGY_J:g} J "
                          "per node")
    span_s = max(duration_s, MIN_POWER_DURATION_S)
    if energy_j > MAX_NODE_POWER_W * span_s:
        raise Implausible(f"{energy_j:g} J over {duration_s:g} s is {energy_j / span_s:g} W, "
                          f"over the limit of {MAX_NODE_POWER_W:g} W per node")
    return energy_j
