"""A fake node for embedded mode (`joulestat run` and track() measuring in-process): a
/proc with one job process (:data:`PID`) and an empty /sys, so the CPU is estimated,
no accelerator library, and a SQLite store in ``tmp_path``. Shared by
tests/unit/runtime/test_embedded.py and tests/system/test_embedded_job.py."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from joulestat.runtime.assembly import PipelineSettings
from joulestat.runtime.embedded import EMBEDDED_OPTIONS, embedded_settings
from joulestat.runtime.settings import resolve
from joulestat.store.engine import make_engine
from tests.fakes.procfs import FakeProc

PID = 4242

EmbeddedNode = tuple[FakeProc, Callable[..., PipelineSettings], Callable[[], Any]]


@contextmanager
def embedded_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNode]:
    """(the fake /proc, settings(**overrides) for an embedded job on it, engine() on its
    store); the engines made are disposed of on leaving."""
    for module in ("pynvml", "amdsmi", "pyhlml"):  # no accelerator library
        monkeypatch.setitem(sys.modules, module, None)
    proc = FakeProc(tmp_path / "proc")
    (proc.root / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU\n\n")
    (proc.root / "meminfo").write_text("MemTotal:       16384000 kB\n")
    proc.add(PID, start_s=1000.0)
    proc.write()
    (tmp_path / "sys").mkdir()
    db_url = f"sqlite:///{tmp_path / 'store.db'}"

    def settings(**overrides: Any) -> PipelineSettings:
        values = {"sysfs_root": str(tmp_path / "sys"), "procfs_root": str(proc.root),
                  "db": db_url, "node": "n1", "instance_type": "test.xlarge",
                  "region": "us-east-1", "cloud_metadata": False, "nvml": False,
                  **overrides}
        return embedded_settings(resolve(values, EMBEDDED_OPTIONS, env={}))

    engines: list[Any] = []

    def engine() -> Any:
        engines.append(make_engine(db_url))
        return engines[-1]

    try:
        yield proc, settings, engine
    finally:
        for made in engines:
            made.dispose()
