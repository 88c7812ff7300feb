"""One writer per node: a lease on the node's row that its writer renews.

Two processes writing one node's ticks (an agent started twice with one ``--node``, or a
``joulestat run`` that missed the agent's address and measured in-process beside it)
would make that node's stored energy overlap in time: 27.6 s of ticks over 17.6 s was
seen. So the node's row names its writer (``<boot id>:<pid>``, host, mode) and until when
its lease holds; the writer renews it with every flush and gives it up at a clean stop.

* An agent finding a live lease of another agent is refused, with a message naming it.
  A lease of an embedded run is taken over: the agent is the node's writer.
* An embedded run finding a live lease writes its job's rows only, never the node's
  ticks, so the node is measured once and the job counted once.
* A holder is live while its lease has not expired; one on this machine's boot whose
  process is gone is dead at once (an agent restarted after ``kill -9`` takes its node
  back without waiting).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from joulestat.store.tables import NODES

log = logging.getLogger(__name__)

LEASE_S = 60.0  # renewed with every flush (default 10 s); expires this long after


class NodeLeaseError(RuntimeError):
    """Another live writer holds this node's lease."""


@dataclass(frozen=True, slots=True)
class Writer:
    writer_id: str
    host: str
    mode: str  # "agent" or "embedded"

    @classmethod
    def this_process(cls, boot_id: str, mode: str) -> Writer:
        return cls(f"{boot_id or 'unknown-boot'}:{os.getpid()}", socket.gethostname(), mode)


@dataclass(frozen=True, slots=True)
class Holder:
    writer: Writer
    until_s: float | None

    def describe(self) -> str:
        boot, _, pid = self.writer.writer_id.rpartition(":")
        return (f"{self.writer.mode} pid {pid} on host {self.writer.host} "
                f"(lease until {self.until_s:.0f})")


def current_holder(connection: Connection, node: str) -> Holder | None:
    row = connection.execute(
        select(NODES.c.writer_id, NODES.c.writer_host, NODES.c.writer_mode,
               NODES.c.lease_until_s).where(NODES.c.node == node)
    ).first()
    if row is None or row.writer_id is None:
        return None
    return Holder(Writer(row.writer_id, row.writer_host or "?", row.writer_mode or "agent"),
                  row.lease_until_s)


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
        lease_until_s=now_s + LEASE_S))
    return None


def renew(connection: Connection, node: str, me: Writer, now_s: float) -> bool:
    """Extend ``me``'s lease; False when it is no longer ``me``'s."""
    result = connection.execute(update(NODES).where(
        NODES.c.node == node, NODES.c.writer_id == me.writer_id,
    ).values(lease_until_s=now_s + LEASE_S))
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
        log.warning("node %r is written by %s: this run records its job only and leaves "
                    "the node's ticks to it (the node is measured once)", self.node,
                    other.describe())

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
