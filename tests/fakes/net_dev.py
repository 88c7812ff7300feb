"""A fake ``/proc/net/dev``: the kernel's two header lines and a line per interface."""

from __future__ import annotations

from pathlib import Path

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n"
)


def net_dev_line(iface: str, rx: int, tx: int) -> str:
    return f"{iface:>6}: {rx} 10 0 0 0 0 0 0 {tx} 12 0 0 0 0 0 0\n"


def write_net_dev(procfs: Path, counters: dict[str, tuple[int, int]]) -> None:
    (procfs / "net").mkdir(parents=True, exist_ok=True)
    body = "".join(net_dev_line(i, rx, tx) for i, (rx, tx) in counters.items())
    (procfs / "net" / "dev").write_text(HEADER + body)
