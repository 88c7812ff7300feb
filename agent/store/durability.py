"""What makes the store's rows survive the agent: the spool, the node's lease, what a
restart reads back, and what the writer does while the store is away (:class:`Outage`:
failures in a row, the doubling retry delay, the probe every
:data:`RECONNECT_EVERY_S`, the batches it hands the spool, throttled warnings).

**The spool.** When a flush fails, the writer hands its batch to :class:`Spool` instead
of holding it in memory: each batch becomes one segment file (``<seq>.json``, written to
a temporary name, fsynced and renamed, so a ``kill -9`` leaves whole segments or none).
When the database answers again the segments are written back oldest first, each in
one transaction; the inserts are ``ON CONFLICT DO NOTHING`` and the job and checkpoint
rows upserts, so a segment replayed twice (a crash between its commit and its deletion)
is stored once. The spool is bounded (``max_bytes``): past it the oldest segments go,
their rows counted in :attr:`Spool.dropped_rows` (the writer's ``dropped``), with an
error saying which ticks were lost (once per outage; DEBUG after). The spool holds a
node's energy and its jobs' names and labels, so it is private whatever the umask: its
directories are created 0700 (and the spool's own one set to 0700) and each segment
0600. At start-up the agent replays the spool
before it reads its checkpoint, so a crash during an outage resumes from the last
checkpoint it took, not from the last one the database saw. A segment that cannot be
written back as it is (not JSON, a field missing, a component this joulestat does not
measure: one spooled during joulestat's development before its first release, with
component ``gpu`` or job rows without ``agent_labels``) is set aside as ``<seq>.bad``,
never deleted, with an error naming the file and the field. The agent holds its spool
directory locked (``.lock``, for the life of the
process): two agents of one node on one machine would share the default directory and
overwrite each other's segments, and since an agent measures while it waits for its
store, the second is refused here rather than by the node's lease.

**One writer per node.** Two processes writing one node's ticks (an agent started twice
with one ``--node``, or a ``joulestat run`` that missed the agent's address and
measured in-process beside it) would make that node's stored energy overlap in time:
27.6 s of ticks over 17.6 s was seen. So the node's row names its writer (``<boot
id>:<pid>``, host, mode) and until when its :class:`NodeLease` holds; the writer renews
it with every flush and gives it up at a clean stop.

* An agent finding a live lease of another agent is refused, with a message naming it.
  A lease of an embedded run is taken over: the agent is the node's writer.
* An embedded run finding a live lease writes its job's rows only, never the node's
  ticks, so the node is measured once and the job counted once.
* A holder is live while its lease has not expired; one on this machine's boot whose
  process is gone is dead at once (an agent restarted after ``kill -9`` takes its node
  back without waiting).
* An agent that started while its store did not answer takes the lease when the store
  answers; refused then, it stops, and what it measured meanwhile is not written (its
  spooled segments are set aside, :meth:`Spool.set_aside_own`).

**What a restart reads back**: its running jobs (:func:`load_unsettled_jobs`) and its
last checkpoint (:func:`load_checkpoint`), with Core table clauses only, within the
agent's memory budget (``test_agent_path_imports_neither_alembic_nor_the_orm``). Both
raise :class:`~joulestat.store.engine.StoreError` when the store cannot be read, so a
restart can tell "nothing saved" from "store away".
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import and_, bindparam, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from joulestat.core.losses import EnergyLosses, LossReason
from joulestat.core.records import JobRecord, StoredJob
from joulestat.core.tick import Component, is_component
from joulestat.store.engine import StoreError, describe_error, redact_url
from joulestat.store.jobs import (
    by_component,
    by_unit,
    part_energy,
    part_units,
    stored_serving_trace,
)
from joulestat.store.rows import SHARE, TICK, Key, PendingJobs, RowBuffer
from joulestat.store.schema import JOB_NODES, JOBS, NODE_CHECKPOINTS, NODES

if TYPE_CHECKING:  # pragma: no cover - typing only: the writer's queue
    from joulestat.store.row_queue import RowQueue

log = logging.getLogger(__name__)


# -- Rows waiting for the database, on local disk: an outage survives a restart --------

FORMAT = 1
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Segment:
    path: Path
    size_bytes: int


class Spool:
    """Segments of one node's unwritten batches under ``directory``."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES, *,
                 exclusive: bool = False) -> None:
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        make_private_dir(self.directory)
        self._lock_fd = _lock_directory(self.directory) if exclusive else None
        segments = self.segments()
        self._next = (int(segments[-1].path.stem) + 1) if segments else 1
        # Segments from here on are this process's own (those below it were there when
        # it started): what a writer refused its node's lease sets aside.
        self.first_own = self._next
        self.bytes = sum(s.size_bytes for s in segments)
        self.dropped_batches = 0
        self.dropped_rows = 0  # rows in the segments dropped over max_bytes
        self.losses = EnergyLosses()  # its writer's, once it has one
        self._said_full = False  # the over-max_bytes error is said once per outage

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
        # 0600 from the start (not chmod after): no moment where another user can read it.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            tmp.unlink(missing_ok=True)  # a half-written segment must not hold the disk
            raise
        os.replace(tmp, path)
        _fsync_dir(self.directory)
        self._next += 1
        self.bytes += len(data)
        self._bound()

    def replay(self) -> Iterator[tuple[Segment, RowBuffer, PendingJobs]]:
        """Each segment, oldest first, decoded; :meth:`done` it once it is stored.
        A segment that cannot be read is set aside (renamed ``.bad``), never retried and
        never deleted: its rows are not written, and the file stays for a person."""
        for segment in self.segments():
            try:
                batch, pending = _decode(json.loads(segment.path.read_bytes()))
            except (OSError, ValueError, LookupError, TypeError) as exc:
                bad = segment.path.with_suffix(".bad")
                log.error("spool segment %s cannot be written back (%s); set aside as %s, "
                          "its rows not written", segment.path, exc, bad.name)
                self._forget(segment, rename_to=bad)
                continue
            yield segment, batch, pending

    def done(self, segment: Segment) -> None:
        self._forget(segment)
        self._said_full = False  # the store took rows: a later overflow is news again

    def _forget(self, segment: Segment, rename_to: Path | None = None) -> None:
        try:
            if rename_to is None:
                segment.path.unlink()
            else:
                segment.path.replace(rename_to)
        except FileNotFoundError:
            pass
        self.bytes = max(0, self.bytes - segment.size_bytes)

    def latest_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint of the newest segment that holds one (``saved_s``, ``boot_id``,
        ``state``), or None. The spool's segments are newer than anything in the store
        (a flush writes the spool back before its own batch), so while the store is away
        this is the node's latest checkpoint."""
        for segment in reversed(self.segments()):
            try:
                checkpoint = json.loads(segment.path.read_bytes()).get("checkpoint")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(checkpoint, dict):
                return checkpoint
        return None

    def set_aside_own(self, suffix: str = ".refused") -> tuple[int, int, str]:
        """Rename this process's own segments (``first_own`` on) to ``<seq><suffix>``,
        so no start replays them: (segments, rows, which ticks). For a writer refused
        its node's lease once the store answered: what it measured meanwhile would count
        the node a second time beside the lease's holder."""
        count = rows = 0
        first_ms: int | None = None
        last_ms: int | None = None
        for segment in self.segments():
            if int(segment.path.stem) < self.first_own:
                continue
            try:
                batch, _ = _decode(json.loads(segment.path.read_bytes()))
            except (OSError, ValueError, KeyError, TypeError):
                batch = RowBuffer()
            if len(batch):
                rows += len(batch)
                first_ms = min(batch.t_end_ms[0], first_ms if first_ms is not None
                               else batch.t_end_ms[0])
                last_ms = max(batch.t_end_ms[-1], last_ms or 0)
            self._forget(segment, rename_to=segment.path.with_suffix(suffix))
            count += 1
        span = (f"ticks ending {first_ms / 1000:.3f}..{last_ms / 1000:.3f}"
                if first_ms is not None and last_ms is not None else "no ticks")
        return count, rows, span

    def _bound(self) -> None:
        while self.bytes > self.max_bytes:
            segments = self.segments()
            if len(segments) <= 1:
                return
            oldest = segments[0]
            rows, node_j, jobs_j, seconds = 0, 0.0, 0.0, 0.0
            try:
                batch, _ = _decode(json.loads(oldest.path.read_bytes()))
                rows = len(batch)
                node_j, jobs_j, seconds = batch.energy_j()
                span = (f"ticks ending {batch.t_end_ms[0] / 1000:.3f}.."
                        f"{batch.t_end_ms[-1] / 1000:.3f}" if len(batch) else "no rows")
            except (OSError, ValueError, KeyError, TypeError, IndexError):
                span = "unreadable"
            self._forget(oldest)
            self.dropped_batches += 1
            self.dropped_rows += rows
            self.losses.add(LossReason.SPOOL_DROPPED, node_j, seconds)
            # Every drop is energy lost from the store: said each time with its amount.
            level = logging.WARNING if self._said_full else logging.ERROR
            self._said_full = True
            log.log(level, "spool %s over its %d bytes (--spool-max): dropped its oldest "
                    "batch (%d rows, %s): %.1f J of the node's energy over %.1f s "
                    "(%.1f J of it jobs') will never be stored; %d rows dropped from the "
                    "spool in total; the store has been away too long", self.directory,
                    self.max_bytes, rows, span, node_j, seconds, jobs_j, self.dropped_rows)


class SpoolInUse(OSError):
    """Another process holds the spool directory (an agent of the same node)."""


def _lock_directory(directory: Path) -> int:
    """Hold ``directory/.lock`` for the life of this process (the kernel lets go at exit,
    ``kill -9`` included); :class:`SpoolInUse` when another process holds it.

    Why: segments are named by a sequence each process counts on its own, so two agents
    spooling into one directory (one node's agent started twice on a machine: the same
    default ``spool/<node>``) would overwrite each other's segments. Before an agent
    measured while waiting for its store, the second never got that far (refused by the
    node's lease in the store); now it must be refused here, store or not."""
    import fcntl

    path = directory / ".lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        finally:
            os.close(fd)
        raise SpoolInUse(exc.errno, f"in use by another process (pid {holder}): an agent "
                         "of the same node? Give each agent its own --node or --spool-dir"
                         ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


class NotOurs(OSError):
    """A directory or file the agent would trust is another user's, or a link."""


def check_ours(path: Path) -> os.stat_result:
    """``path``'s status, once it is known to be the agent's user's own and not a
    symbolic link; :class:`NotOurs` naming the owner otherwise.

    Why: the spool holds what the agent has measured and not yet stored, and the
    secret every job token derives from (``job-token.key``). A directory another user
    made (a world-writable one, an all-zero key in it: issue 47) would let that user
    plant the key and so end or count into root's jobs, or swap segments."""
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        raise NotOurs(errno.EPERM, f"{path} is a symbolic link; the agent uses only a "
                      "directory and files of its own")
    if found.st_uid != os.geteuid():
        raise NotOurs(errno.EPERM, f"{path} is owned by uid {found.st_uid}, not by the "
                      f"agent's user (uid {os.geteuid()}); another user may have made it: "
                      "give the agent a directory of its own")
    return found


def make_private_dir(directory: Path) -> None:
    """``directory`` and any missing parents, created 0700 whatever the umask; the
    directory itself set to 0700 if it existed, once it is known to be this agent's
    user's own (:class:`NotOurs` otherwise: it is refused, never taken over)."""
    directory = Path(directory)
    missing = []
    for parent in (directory, *directory.parents):
        if parent.exists():
            break
        missing.append(parent)
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    if not missing and check_ours(directory).st_mode & 0o077:
        os.chmod(directory, 0o700)  # ours: readable by others no longer


def _encode(batch: RowBuffer, pending: PendingJobs) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "keys": [list(k) for k in batch.keys],
        "rows": [[batch.t_end_ms[i], batch.t_start_ms[i], batch.dynamic_j[i], batch.idle_j[i],
                  batch.key[i]] for i in range(len(batch))],
        "jobs": {job_id: list(rows) for job_id, rows in pending.jobs.items()},
        "checkpoint": pending.checkpoint,
        # Where a window must start (RowBuffer.cuts); absent in older spools (none).
        "cuts": list(batch.cuts),
    }


def _decode(data: Any) -> tuple[RowBuffer, PendingJobs]:
    """A segment's batch and job rows; :class:`ValueError` naming the field that is
    missing or wrong.

    Why checked here: the rows go into the store as they are, in one transaction with
    the rest of the segment, so a segment that would store something this joulestat
    does not read (a tick of component ``gpu``, a job row without ``agent_labels``) or
    fail halfway with a ``KeyError`` must be refused before any of it is written."""
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object but {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise ValueError(f"unknown spool format {data.get('format')!r}")
    batch = RowBuffer()
    keys = [_key(k, f"keys[{i}]") for i, k in enumerate(_field(data, "keys", list))]
    for t_end, t_start, dynamic_j, idle_j, key in _field(data, "rows", list):
        batch.append(int(t_end), int(t_start), float(dynamic_j), float(idle_j), keys[key])
    batch.cuts = [int(c) for c in data.get("cuts", ())]
    pending = PendingJobs()
    for job_id, rows in _field(data, "jobs", dict).items():
        job_row, part_row = rows
        if not isinstance(job_row, dict) or not isinstance(part_row, dict):
            raise ValueError(f"jobs.{job_id}: malformed rows {rows!r:.80}")
        if "agent_labels" not in job_row:
            raise ValueError(f"jobs.{job_id}: no agent_labels (a job row spooled during "
                             "joulestat's development before its first release, 0.1.0, "
                             "which this joulestat does not write back)")
        pending.jobs[job_id] = (job_row, part_row)
    pending.checkpoint = _field(data, "checkpoint", dict | None)
    return batch, pending


def _field(data: dict[str, Any], name: str, kind: Any) -> Any:
    """``data[name]`` when it is there and of ``kind``, else :class:`ValueError`
    naming it (a ``KeyError`` would say only the name, in quotes)."""
    if name not in data:
        raise ValueError(f"no {name!r} field")
    value = data[name]
    if not isinstance(value, kind):
        raise ValueError(f"{name!r} is {type(value).__name__}, not what this joulestat "
                         "writes there")
    return value


def _key(key: Any, where: str) -> Key:
    """A row key as :class:`~joulestat.store.rows.RowBuffer` holds it; a tick's or
    share's component one this joulestat measures (a unit's third field is its name)."""
    if not (isinstance(key, list) and len(key) == 5 and all(isinstance(k, str) for k in key)):
        raise ValueError(f"{where}: malformed key {key!r:.80}")
    kind, who, component, device, source = key
    if kind in (TICK, SHARE) and not is_component(component):
        raise ValueError(f"{where}: component {component!r} is not one this joulestat "
                         f"measures ({', '.join(Component)})")
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


# -- One writer per node: a lease on the node's row that its writer renews -------------

LEASE_S = 60.0  # renewed with every flush (default 10 s); expires this long after


class NodeLeaseError(RuntimeError):
    """Another live writer holds this node's lease."""


@dataclass(frozen=True, slots=True)
class Writer:
    writer_id: str
    host: str
    mode: str  # "agent" or "embedded"
    api_url: str | None = None  # an agent's job API, for a run that missed it
    # how often it flushes: the Overview's measure of a node gone quiet; None: unsaid
    flush_interval_s: float | None = None

    @classmethod
    def this_process(cls, boot_id: str, mode: str, api_url: str | None = None,
                     flush_interval_s: float | None = None) -> Writer:
        return cls(f"{boot_id or 'unknown-boot'}:{os.getpid()}", socket.gethostname(), mode,
                   api_url, flush_interval_s)


@dataclass(frozen=True, slots=True)
class Holder:
    writer: Writer
    until_s: float | None

    def describe(self) -> str:
        """The writer in words, for a log line. A writer that stopped cleanly gave its
        lease up (``until_s`` None) and is still named, as the node's last writer."""
        boot, _, pid = self.writer.writer_id.rpartition(":")
        api = f", job API at {self.writer.api_url}" if self.writer.api_url else ""
        lease = ("lease given up" if self.until_s is None
                 else f"lease until {self.until_s:.0f}")
        return f"{self.writer.mode} pid {pid} on host {self.writer.host} ({lease}{api})"


def current_holder(connection: Connection, node: str) -> Holder | None:
    row = connection.execute(
        select(NODES.c.writer_id, NODES.c.writer_host, NODES.c.writer_mode,
               NODES.c.lease_until_s, NODES.c.writer_api_url,
               NODES.c.writer_flush_interval_s).where(NODES.c.node == node)
    ).first()
    if row is None or row.writer_id is None:
        return None
    return Holder(Writer(row.writer_id, row.writer_host or "?", row.writer_mode or "agent",
                         row.writer_api_url, row.writer_flush_interval_s), row.lease_until_s)


def is_live(holder: Holder, now_s: float, boot_id: str, procfs_root: Path) -> bool:
    if holder.until_s is None or holder.until_s < now_s:
        return False
    boot, _, pid = holder.writer.writer_id.rpartition(":")
    if boot == boot_id and pid.isdigit():
        return (Path(procfs_root) / pid).exists()
    return True  # another machine or boot: trust the lease until it expires


def acquire(connection: Connection, node: str, me: Writer, now_s: float, boot_id: str,
            procfs_root: Path) -> Holder | None:
    """Take ``node``'s lease for ``me`` (the node row must exist). Returns the live
    holder that keeps it (``me`` must not write the node's ticks), else None."""
    holder = current_holder(connection, node)
    if (holder is not None and holder.writer.writer_id != me.writer_id
            and is_live(holder, now_s, boot_id, procfs_root)
            and not (me.mode == "agent" and holder.writer.mode == "embedded")):
        return holder
    connection.execute(update(NODES).where(NODES.c.node == node).values(
        writer_id=me.writer_id, writer_host=me.host, writer_mode=me.mode,
        writer_api_url=me.api_url, writer_flush_interval_s=me.flush_interval_s,
        lease_until_s=now_s + LEASE_S))
    return None


# Built once: renewed with every flush, and building the statement again each time
# cost more than the UPDATE it runs (about 70 us of 80 on SQLite).
_RENEW = update(NODES).where(
    NODES.c.node == bindparam("lease_node"), NODES.c.writer_id == bindparam("lease_writer"),
).values(lease_until_s=bindparam("lease_until"))


def renew(connection: Connection, node: str, me: Writer, now_s: float) -> bool:
    """Extend ``me``'s lease; False when it is no longer ``me``'s."""
    result = connection.execute(_RENEW, {"lease_node": node, "lease_writer": me.writer_id,
                                         "lease_until": now_s + LEASE_S})
    return result.rowcount == 1


def release(connection: Connection, node: str, me: Writer) -> None:
    connection.execute(update(NODES).where(
        NODES.c.node == node, NODES.c.writer_id == me.writer_id,
    ).values(lease_until_s=None))


class NodeLease:
    """A writer's side of the lease: take it, keep it with every flush, give it up.

    ``ticks_allowed`` says whether this writer may write the node's ticks (and the
    unattributed remainder); when not, it writes its jobs' rows only. ``replaced`` is
    the other writer whose lease this one took, if any (an agent does not resume a
    checkpoint across ticks an embedded run wrote meanwhile).
    """

    def __init__(self, node: str, me: Writer, boot_id: str, procfs_root: Path) -> None:
        self.node, self.me, self.boot_id, self.procfs_root = node, me, boot_id, procfs_root
        self.ticks_allowed = True
        self.replaced: Holder | None = None

    def take(self, connection: Connection, now_s: float) -> None:
        before = current_holder(connection, self.node)
        other = acquire(connection, self.node, self.me, now_s, self.boot_id, self.procfs_root)
        if other is None:
            self.ticks_allowed = True
            if before is not None and before.writer.writer_id != self.me.writer_id:
                self.replaced = before
            return
        if self.me.mode == "agent":
            raise NodeLeaseError(
                f"node {self.node!r} is written by {other.describe()}: a second writer of "
                "one node would store its energy twice; stop that one, or give this agent "
                "another --node")
        self.ticks_allowed = False
        hint = (f"; to have it measure your jobs, point JOULESTAT_AGENT_URL at "
                f"{other.writer.api_url}" if other.writer.api_url else "")
        log.warning("node %r is written by %s: this run records its job only and leaves "
                    "the node's ticks to it (the node is measured once)%s", self.node,
                    other.describe(), hint)

    def keep(self, connection: Connection, now_s: float) -> None:
        if not self.ticks_allowed or renew(connection, self.node, self.me, now_s):
            return
        other = acquire(connection, self.node, self.me, now_s, self.boot_id, self.procfs_root)
        if other is not None:
            self.ticks_allowed = False
            log.warning("node %r is now written by %s: from now on this %s writes its jobs' "
                        "rows only, never the node's ticks a second time", self.node,
                        other.describe(), self.me.mode)

    def give_up(self, connection: Connection) -> None:
        if self.ticks_allowed:
            release(connection, self.node, self.me)


# -- What the agent reads back when it starts ------------------------------------------

class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns: the state a node saved, and when."""

    saved_s: float
    boot_id: str
    state: dict[str, Any]


def load_unsettled_jobs(engine: Engine, node: str) -> list[StoredJob]:
    """This node's running jobs (and those ended after its last checkpoint), for a
    restart: each one's record as ``node`` saved it
    and the energy and units ``node`` recorded for it (the registry rebuilds its jobs
    from them: :meth:`joulestat.attribution.registry.Job.from_stored`). Pids, start and
    instance type are this node's too, and its serving trace (so it goes on); latency is
    not read back. Raises
    :class:`~joulestat.store.engine.StoreError` when the store cannot be read.
    """
    parts = JOB_NODES.c
    # Running, or ended after the node's last checkpoint: an end the API acknowledged
    # (saved before its answer) whose last ticks a crash kept from the store. Restored
    # ended, such a job takes its share of the ticks up to its end and is then final,
    # as it would have been without the crash (issue 47).
    last_saved = (select(NODE_CHECKPOINTS.c.saved_s)
                  .where(NODE_CHECKPOINTS.c.node == node).scalar_subquery())
    return _load_parts(engine, node, or_(parts.ended_s.is_(None), parts.ended_s > last_saved),
                       "the running jobs")


def load_ended_job(engine: Engine, node: str, job_id: str) -> StoredJob | None:
    """Job ``job_id`` as ``node`` stored it, if it ended there (else None): its figures
    are final. For the job API of a restarted agent, which puts back only the jobs a
    restart must go on measuring (:func:`load_unsettled_jobs`): a client that asks after
    a job whose end and last tick were stored before the crash gets it from here, not a
    404. Raises :class:`~joulestat.store.engine.StoreError` when the store cannot be read."""
    parts = JOB_NODES.c
    found = _load_parts(engine, node, and_(parts.job_id == job_id, parts.ended_s.is_not(None)),
                        f"job {job_id!r}")
    return found[0] if found else None


def _load_parts(engine: Engine, node: str, which: Any, what: str) -> list[StoredJob]:
    """``node``'s parts of the jobs ``which`` selects, with the energy and units it
    recorded for them, oldest start first."""
    jobs, parts = JOBS.c, JOB_NODES.c
    chosen = and_(parts.node == node, which)
    query = (
        select(jobs.id, jobs.name, jobs.kind, jobs.labels, jobs.origin, parts.pids,
               parts.started_s, parts.instance_type, jobs.agent_labels, parts.ended_s,
               parts.serving_trace)
        .select_from(JOBS.join(JOB_NODES, parts.job_id == jobs.id))
        .where(chosen)
        .order_by(parts.started_s, jobs.id)
    )
    job_ids = select(parts.job_id).where(chosen)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).all()
            energy = part_energy(connection, job_ids, node)
            units = part_units(connection, job_ids, node)
    except SQLAlchemyError as exc:
        raise StoreError(f"{redact_url(engine.url)}: cannot load {what} of node "
                         f"{node!r}: {describe_error(exc)}") from exc
    result = []
    for (job_id, name, kind, labels, origin, pids, started_s, instance_type, agent_labels,
         ended_s, serving_trace) in rows:
        dynamic, idle = by_component(energy, job_id, node)
        record = JobRecord(  # the type it ran as stays, if the node's changed since
            id=job_id, name=name, kind=kind, labels=json.loads(labels),
            pids=frozenset(json.loads(pids)), started_s=started_s, origin=origin,
            ended_s=ended_s, instance_type=instance_type,
            agent_labels=json.loads(agent_labels),
            serving_trace=stored_serving_trace(serving_trace))
        result.append(StoredJob(record, dynamic_j=dynamic, idle_j=idle,
                                units=by_unit(units, job_id, node)))
    return result


def load_checkpoint(engine: Engine, node: str) -> Checkpoint | None:
    """The checkpoint ``node`` saved last, or None (never saved, or unreadable state).

    Raises :class:`~joulestat.store.engine.StoreError` when the database cannot be read,
    so a restart can tell "no checkpoint" from "store away".
    """
    query = select(NODE_CHECKPOINTS.c.saved_s, NODE_CHECKPOINTS.c.boot_id,
                   NODE_CHECKPOINTS.c.state).where(NODE_CHECKPOINTS.c.node == node)
    try:
        with engine.connect() as connection:
            row = connection.execute(query).first()
    except SQLAlchemyError as exc:
        raise StoreError(f"{redact_url(engine.url)}: cannot read the checkpoint of node "
                         f"{node!r}: {describe_error(exc)}") from exc
    if row is None:
        return None
    saved_s, boot_id, text = row
    try:
        state = json.loads(text)
    except ValueError as exc:
        log.warning("checkpoint of node %r is not valid JSON (%s); ignoring it", node, exc)
        return None
    if not isinstance(state, dict):
        log.warning("checkpoint of node %r is not a JSON object; ignoring it", node)
        return None
    return Checkpoint(float(saved_s), str(boot_id), state)


# -- What the store writer does while the database does not take its writes ------------

MAX_RETRY_DELAY_S = 60.0
WARN_EVERY_S = 60.0
# While the store is away: how often a cheap probe (one connection, one small read)
# asks whether it is back; a full write (which spools its batch when it fails) keeps
# the doubling above. 2 s: the rows go in within ~2 s of the store's return, and a
# refused connection costs microseconds.
RECONNECT_EVERY_S = 2.0


class Outage:
    """Failures in a row, throttled warnings and the spool of one node's writer."""

    def __init__(self, url: str, queue: RowQueue, spool: Spool | None) -> None:
        self.url = url  # redacted: it goes into logs
        self.queue = queue
        self.spool = spool
        self.failures = 0
        self.spooled_rows = 0  # rows handed to the spool while the store was away
        self.spool_write_failures = 0  # batches the spool could not write (disk full...)
        self._spool_failing = False  # said once until a spool write succeeds again
        self._last_warning = -math.inf

    def retry_delay_s(self, flush_interval_s: float) -> float:
        """How long to wait after the latest failure: doubling, capped at a minute."""
        return min(MAX_RETRY_DELAY_S, flush_interval_s * 2 ** min(self.failures, 10))

    def keep(self, batch: RowBuffer, pending: PendingJobs, finishing: list[str]) -> None:
        """A batch the store did not take: to the spool, else back into memory. The ids
        of the jobs to report final wait in memory either way, for the flush that
        stores their rows."""
        if self.spool is not None and (len(batch) or pending):
            try:
                self.spool.append(batch, pending)
            except OSError as exc:
                self.spool_write_failures += 1
                level = logging.DEBUG if self._spool_failing else logging.ERROR
                self._spool_failing = True
                log.log(level, "cannot spool %d rows to %s (%s); keeping them in memory, "
                        "up to %d rows, then dropping the oldest (counted as dropped); "
                        "said once until the spool writes again", len(batch),
                        self.spool.directory, exc, self.queue.max_rows)
            else:
                self.spooled_rows += len(batch)
                batch, pending = RowBuffer(), PendingJobs()
                if self._spool_failing:
                    self._spool_failing = False
                    log.warning("spool %s writes again (%d batch(es) could not be "
                                "written)", self.spool.directory, self.spool_write_failures)
        self.queue.put_back(batch, pending, finishing)

    def replay(self, write: Callable[[RowBuffer, PendingJobs], tuple[int, int]]
               ) -> tuple[int, int]:
        """Spooled batches into the store, oldest first, each through ``write`` (one
        transaction, returning rows written and stale); a segment is deleted only once
        its transaction committed."""
        assert self.spool is not None
        written = stale = replayed = 0
        for segment, batch, pending in self.spool.replay():
            seg_written, seg_stale = write(batch, pending)
            self.spool.done(segment)
            written, stale, replayed = written + seg_written, stale + seg_stale, replayed + 1
        if replayed:
            log.info("store %s: wrote %d spooled batch(es) (%d rows) back", self.url,
                     replayed, written)
        return written, stale

    def failed(self, exc: Exception, action: str) -> None:
        self.failures += 1
        if self.failures == 1 or self.may_warn():
            kept = f"keeping {len(self.queue)} rows in memory"
            if self.spool is not None:
                kept += f" and {self.spool.bytes} bytes in the spool {self.spool.directory}"
            self.warn(f"cannot {action} the store {self.url} ({describe_error(exc)}); "
                      f"{kept} and retrying (attempt {self.failures})")

    def recovered(self) -> None:
        self.queue.said_dropping = False
        if self.failures:
            log.info("store %s reachable again after %d failed attempt(s)",
                     self.url, self.failures)
            self.failures = 0

    def report_shutdown(self) -> None:
        """The store is still away at exit: say where rows wait, or how many are lost."""
        if self.spool is not None and not len(self.queue):
            log.warning("store %s unreachable at shutdown: %d bytes of rows wait in the "
                        "spool %s and go to the store at the next start", self.url,
                        self.spool.bytes, self.spool.directory)
            return
        log.error("store %s unreachable at shutdown: %d buffered rows and %d job "
                  "updates are lost", self.url, len(self.queue), len(self.queue.pending.jobs))

    def may_warn(self) -> bool:
        return time.monotonic() - self._last_warning >= WARN_EVERY_S

    def warn(self, message: str) -> None:
        self._last_warning = time.monotonic()
        log.warning("%s", message)
