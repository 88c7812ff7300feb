"""The writer's in-memory buffer: ticks, their job shares and unit counts as arrays.

One buffer holds every kind of per-tick row, in the order they were added, so that
when the database stays away too long and the oldest rows must go, a tick goes
together with its shares and unit counts (a job row must never be stored without its
tick, or conservation breaks). A row costs about 36 bytes (four 8-byte numbers and a
4-byte key index, no dicts); its strings live once in :attr:`RowBuffer.keys`.

Each buffer owns its key table and the writer starts a fresh buffer at every flush,
so the table never outgrows what is buffered: an agent that saw thousands of
short jobs does not keep their names forever.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from joulestat.store.tables import UNATTRIBUTED

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.attribution.shares import Share
    from joulestat.core.tick import Tick

# The kind of a row, first in its key:
TICK = "tick"  # (TICK, "", component, device, source); energy in dynamic_j
SHARE = "share"  # (SHARE, job or UNATTRIBUTED, component, device, source)
UNIT = "unit"  # (UNIT, job, unit, "", ""); the count in dynamic_j

_ARRAYS = ("t_end_ms", "t_start_ms", "dynamic_j", "idle_j", "key")

Key = tuple[str, str, str, str, str]
Params = list[tuple[Any, ...]]
TICK_COLUMNS = ("node", "t_end_ms", "component", "device", "t_start_ms", "energy_j", "source")
SHARE_COLUMNS = ("job_id", "node", "t_end_ms", "component", "device", "t_start_ms",
                 "dynamic_j", "idle_j", "source")
UNIT_COLUMNS = ("job_id", "node", "t_end_ms", "unit", "count")


class RowBuffer:
    """Rows ``(t_end_ms, t_start_ms, dynamic_j, idle_j, key)``; see the module doc.

    Not thread-safe on its own: the writer calls it under its buffer lock.
    """

    __slots__ = (*_ARRAYS, "keys", "_index")

    def __init__(self) -> None:
        self.t_end_ms = array("q")
        self.t_start_ms = array("q")
        self.dynamic_j = array("d")
        self.idle_j = array("d")
        self.key = array("I")
        self.keys: list[Key] = []
        self._index: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self.t_end_ms)

    def key_of(self, key: Key) -> int:
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.keys)
            self.keys.append(key)
        return index

    def append(self, t_end_ms: int, t_start_ms: int, dynamic_j: float, idle_j: float,
               key: Key) -> None:
        self.t_end_ms.append(t_end_ms)
        self.t_start_ms.append(t_start_ms)
        self.dynamic_j.append(dynamic_j)
        self.idle_j.append(idle_j)
        self.key.append(self.key_of(key))

    def append_tick(self, tick: Tick) -> int:
        """A tick's entries (each from its own start: a sensor gap is one long row);
        returns how many non-finite entries were skipped."""
        t_end_ms, bad = round(tick.t1_s * 1000), 0
        for entry in tick.entries:
            if not math.isfinite(entry.energy_j):
                bad += 1
                continue
            self.append(t_end_ms, round(tick.entry_t0_s(entry) * 1000), entry.energy_j, 0.0,
                        tick_key(entry.component, entry.device, entry.source))
        return bad

    def append_shares(self, tick: Tick, shares: Iterable[Share]) -> int:
        """A tick's attribution. ``job=None`` is stored under job id ``''``: the
        unattributed remainder, which keeps job rows summing to the tick's energy. Shares
        of one (job, component, device) are summed, as they are one row in the store.
        Returns how many non-finite shares were skipped."""
        t_end_ms, t_start_ms = round(tick.t1_s * 1000), round(tick.t0_s * 1000)
        merged: dict[Key, list[float]] = {}
        bad = 0
        for share in shares:
            if not (math.isfinite(share.dynamic_j) and math.isfinite(share.idle_j)):
                bad += 1
                continue
            total = merged.setdefault(
                share_key(share.job, share.component, share.device, share.source), [0.0, 0.0])
            total[0] += share.dynamic_j
            total[1] += share.idle_j
        for key, (dynamic_j, idle_j) in merged.items():
            self.append(t_end_ms, t_start_ms, dynamic_j, idle_j, key)
        return bad

    def append_units(self, job_id: str, t_end_s: float, deltas: Mapping[str, float]) -> int:
        """Units ``job_id`` counted in the tick ending at ``t_end_s``; returns how many
        counts were not finite numbers (skipped)."""
        t_end_ms, bad = round(t_end_s * 1000), 0
        for unit, count in deltas.items():
            if isinstance(count, bool) or not isinstance(count, int | float) or (
                    not math.isfinite(count)):
                bad += 1
            elif count:
                self.append(t_end_ms, t_end_ms, float(count), 0.0, unit_key(job_id, unit))
        return bad

    def prepend(self, older: RowBuffer) -> None:
        """Put ``older`` (a batch that failed to write) back in front of these rows."""
        remap = [self.key_of(key) for key in older.keys]
        for name in _ARRAYS[:-1]:
            mine = getattr(self, name)
            setattr(self, name, getattr(older, name) + mine)
        self.key = array("I", (remap[k] for k in older.key)) + self.key

    def fold_jobs(self, count: int) -> tuple[int, float, float]:
        """Make room without losing node energy: in the oldest ticks, fold each job's
        shares into that tick's unattributed row and drop the tick's unit counts, until
        at least ``count`` rows are gone (or no job row is left).

        The tick rows stay, and jobs + unattributed still equal each tick's energy: what
        is lost is who used it, never how much was used. Returns the rows removed and the
        first and last tick ends (seconds) that were folded.
        """
        n, removed, i = len(self), 0, 0
        keys = self.keys
        kept = RowBuffer()
        first = last = 0
        while i < n and removed < count:
            t_end = self.t_end_ms[i]
            j = i
            while j < n and self.t_end_ms[j] == t_end:
                j += 1
            folded: dict[Key, list[float]] = {}
            t_start = self.t_start_ms[i]
            rows_before = len(kept)
            for r in range(i, j):
                key = keys[self.key[r]]
                if key[0] == TICK:
                    kept.append(t_end, self.t_start_ms[r], self.dynamic_j[r], self.idle_j[r],
                                key)
                elif key[0] == SHARE:
                    total = folded.setdefault((SHARE, UNATTRIBUTED, *key[2:]), [0.0, 0.0])
                    total[0] += self.dynamic_j[r]
                    total[1] += self.idle_j[r]
                    t_start = self.t_start_ms[r]
            for key, (dynamic_j, idle_j) in folded.items():
                kept.append(t_end, t_start, dynamic_j, idle_j, key)
            if (j - i) > len(kept) - rows_before:
                first = first or t_end
                last = t_end
            removed += (j - i) - (len(kept) - rows_before)
            i = j
        if removed == 0:
            return 0, 0.0, 0.0
        for r in range(i, n):
            kept.append(self.t_end_ms[r], self.t_start_ms[r], self.dynamic_j[r],
                        self.idle_j[r], keys[self.key[r]])
        for name in (*_ARRAYS, "keys", "_index"):
            setattr(self, name, getattr(kept, name))
        return removed, first / 1000, last / 1000

    def drop_oldest(self, count: int) -> tuple[int, float, float]:
        """Drop at least ``count`` oldest rows, and the rest of the last dropped tick.

        Returns how many rows went and the first and last tick ends (seconds) among them.
        """
        count = min(count, len(self))
        if count <= 0:
            return 0, 0.0, 0.0
        last = self.t_end_ms[count - 1]
        while count < len(self) and self.t_end_ms[count] == last:
            count += 1  # a tick's shares and units follow its rows: keep them together
        first = self.t_end_ms[0]
        for name in _ARRAYS:
            del getattr(self, name)[:count]
        return count, first / 1000, last / 1000

    def params(
        self, node: str, start: int, end: int, floor_ms: int | None
    ) -> tuple[Params, Params, Params, int]:
        """Insert rows for ``[start, end)`` as tuples in :data:`TICK_COLUMNS`,
        :data:`SHARE_COLUMNS` and :data:`UNIT_COLUMNS` order: (ticks, shares, units,
        stale count). Tuples, not dicts: the writer hands them to the driver's
        ``executemany`` as they are, which halves a flush's CPU on a node with many jobs.

        Rows ending at or before ``floor_ms`` (the node's totals boundary) are stale:
        the job totals already cover that time and its raw rows may be pruned, so
        writing them would count them in some figures and not in others.
        """
        ticks: Params = []
        shares: Params = []
        units: Params = []
        stale = 0
        keys = self.keys
        t_end_all, t_start_all = self.t_end_ms, self.t_start_ms
        dynamic_all, idle_all, key_all = self.dynamic_j, self.idle_j, self.key
        for i in range(start, end):
            t_end_ms = t_end_all[i]
            if floor_ms is not None and t_end_ms <= floor_ms:
                stale += 1
                continue
            kind, job, component, device, source = keys[key_all[i]]
            if kind == TICK:
                ticks.append((node, t_end_ms, component, device, t_start_all[i],
                              dynamic_all[i], source))
            elif kind == SHARE:
                shares.append((job, node, t_end_ms, component, device, t_start_all[i],
                               dynamic_all[i], idle_all[i], source))
            else:
                units.append((job, node, t_end_ms, component, dynamic_all[i]))
        return ticks, shares, units, stale


def tick_key(component: str, device: str, source: str) -> Key:
    return (TICK, "", component, device, source)


def share_key(job: str | None, component: str, device: str, source: str) -> Key:
    """The key of an attribution share; ``job=None`` is the unattributed part."""
    return (SHARE, UNATTRIBUTED if job is None else job, component, device, source)


def unit_key(job: str, unit: str) -> Key:
    return (UNIT, job, unit, "", "")
