"""Rows waiting for the database, on local disk: an outage survives a restart.

When a flush fails, the writer hands its batch here instead of holding it in memory:
each batch becomes one segment file (``<seq>.json``, written to a temporary name,
fsynced and renamed, so a ``kill -9`` leaves whole segments or none). When the database
answers again the segments are written back oldest first, each in one transaction; the
inserts are ``ON CONFLICT DO NOTHING`` and the job and checkpoint rows upserts, so a
segment replayed twice (a crash between its commit and its deletion) is stored once.

The spool is bounded (``max_bytes``): past it the oldest segments go, with an error
saying which ticks were lost. At start-up the agent replays the spool before it reads
its checkpoint, so a crash during an outage resumes from the last checkpoint it took,
not from the last one the database saw.

A segment an agent wrote before the component ``gpu`` became ``accelerator`` (issue 14,
migration 0006) is written back under the new name, so an upgrade during an outage
stores no row under the old one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joulestat.devices.sensor import current_component
from joulestat.store.buffer import SHARE, TICK, Key, RowBuffer
from joulestat.store.job_writer import PendingJobs

log = logging.getLogger(__name__)

FORMAT = 1
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Segment:
    path: Path
    size_bytes: int


class Spool:
    """Segments of one node's unwritten batches under ``directory``."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = self.segments()
        self._next = (int(segments[-1].path.stem) + 1) if segments else 1
        self.bytes = sum(s.size_bytes for s in segments)
        self.dropped_batches = 0

    def segments(self) -> list[Segment]:
        found = []
        for path in self.directory.glob("*.json"):
            if path.stem.isdigit():
                try:
                    found.append(Segment(path, path.stat().st_size))
                except FileNotFoundError:
                    continue
        return sorted(found, key=lambda s: int(s.path.stem))

    def __bool__(self) -> bool:
        return self.bytes > 0

    def append(self, batch: RowBuffer, pending: PendingJobs) -> None:
        """Write one batch as a segment; OSError (disk full, ...) is the caller's."""
        data = json.dumps(_encode(batch, pending), separators=(",", ":")).encode()
        path = self.directory / f"{self._next:012d}.json"
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.directory)
        self._next += 1
        self.bytes += len(data)
        self._bound()

    def replay(self) -> Iterator[tuple[Segment, RowBuffer, PendingJobs]]:
        """Each segment, oldest first, decoded; :meth:`done` it once it is stored.
        A segment that cannot be read is set aside (renamed ``.bad``), never retried."""
        for segment in self.segments():
            try:
                batch, pending = _decode(json.loads(segment.path.read_bytes()))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("spool segment %s is unreadable (%s); set aside as .bad",
                          segment.path, exc)
                self._forget(segment, rename_to=segment.path.with_suffix(".bad"))
                continue
            yield segment, batch, pending

    def done(self, segment: Segment) -> None:
        self._forget(segment)

    def _forget(self, segment: Segment, rename_to: Path | None = None) -> None:
        try:
            if rename_to is None:
                segment.path.unlink()
            else:
                segment.path.replace(rename_to)
        except FileNotFoundError:
            pass
        self.bytes = max(0, self.bytes - segment.size_bytes)

    def _bound(self) -> None:
        while self.bytes > self.max_bytes:
            segments = self.segments()
            if len(segments) <= 1:
                return
            oldest = segments[0]
            try:
                batch, _ = _decode(json.loads(oldest.path.read_bytes()))
                span = (f"ticks ending {batch.t_end_ms[0] / 1000:.3f}.."
                        f"{batch.t_end_ms[-1] / 1000:.3f}" if len(batch) else "no rows")
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                span = "unreadable"
            self._forget(oldest)
            self.dropped_batches += 1
            log.error("spool %s over its %d bytes: dropped its oldest batch (%s); the "
                      "store has been away too long", self.directory, self.max_bytes, span)


def _encode(batch: RowBuffer, pending: PendingJobs) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "keys": [list(k) for k in batch.keys],
        "rows": [[batch.t_end_ms[i], batch.t_start_ms[i], batch.dynamic_j[i], batch.idle_j[i],
                  batch.key[i]] for i in range(len(batch))],
        "jobs": {job_id: list(rows) for job_id, rows in pending.jobs.items()},
        "checkpoint": pending.checkpoint,
    }


def _decode(data: dict[str, Any]) -> tuple[RowBuffer, PendingJobs]:
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown spool format {data.get('format')!r}")
    batch = RowBuffer()
    keys = [_renamed(tuple(k)) for k in data["keys"]]
    for t_end, t_start, dynamic_j, idle_j, key in data["rows"]:
        batch.append(int(t_end), int(t_start), float(dynamic_j), float(idle_j), keys[key])
    pending = PendingJobs()
    pending.jobs = {job_id: (rows[0], rows[1]) for job_id, rows in data["jobs"].items()}
    pending.checkpoint = data["checkpoint"]
    return batch, pending


def _renamed(key: tuple[Any, ...]) -> Key:
    """A tick's or share's key with its component's name today (units keep theirs)."""
    kind, who, component, device, source = key
    if kind in (TICK, SHARE):
        component = current_component(component)
    return (kind, who, component, device, source)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
