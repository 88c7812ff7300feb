"""The fake ``pynvml`` for a real ``joulestat agent`` process: GPUs kept in a JSON file.

A test cannot reach into another process's fake, so here the GPUs' state lives in a
file that the test and the workloads change (:func:`update`) and that every device call
of :class:`FileBackedNvml` reads first. :func:`site_dir` writes a ``sitecustomize.py``
that installs it at interpreter start-up, before the agent imports anything: put that
folder on ``PYTHONPATH`` and the file's path in ``FAKE_NVML_STATE``, and the agent's
``open_nvidia`` finds "pynvml" already imported (as it would the real one), so it never
looks for the driver's library. Everything else is :mod:`tests.fakes.nvml`'s, the fake
the unit tests use, so the agent process sees the same API.

The file: ``{"gpus": [{<FakeGpu field>: value, ...}, ...]}`` (fields of
:class:`~tests.fakes.nvml.FakeGpu` with JSON values: name, uuid, energy_mj, power_mw,
compute_pids, power_limit_mw, ...).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from tests.fakes.nvml import FakeGpu, FakeNvml

ENV_STATE = "FAKE_NVML_STATE"
REPO = Path(__file__).resolve().parents[2]
_FIELDS = {f.name for f in fields(FakeGpu)}


class FileBackedNvml(FakeNvml):
    """:class:`FakeNvml` whose GPUs are re-read from ``path`` before every device call."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        super().__init__(_load(self.path))

    def _gpu(self, handle: Any, func: str) -> FakeGpu:
        current = _load(self.path)
        if len(current) == len(self.gpus):
            self.gpus[:] = current
        return super()._gpu(handle, func)


def _load(path: Path) -> list[FakeGpu]:
    """The GPUs of the state file; a file being replaced is retried, never half-read."""
    for _attempt in range(50):
        try:
            doc = json.loads(path.read_text())
            return [FakeGpu(**{k: v for k, v in gpu.items() if k in _FIELDS})
                    for gpu in doc["gpus"]]
        except (OSError, ValueError):
            time.sleep(0.01)
    raise OSError(f"fake NVML state {path} unreadable")


def write(path: Path, gpus: list[dict[str, Any]]) -> None:
    """Write the state atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"gpus": gpus}))
    os.replace(tmp, path)


def update(path: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Apply ``change`` to the GPUs of the state file (one writer at a time: the test's
    workloads take turns, so no lock is needed)."""
    gpus = json.loads(Path(path).read_text())["gpus"]
    change(gpus)
    write(Path(path), gpus)


def install_from_env() -> None:
    """Called by the generated ``sitecustomize``: the fake as ``pynvml``, if asked for."""
    state = os.environ.get(ENV_STATE)
    if state:
        sys.modules["pynvml"] = FileBackedNvml(Path(state)).module


def site_dir(folder: Path) -> Path:
    """A folder holding a ``sitecustomize.py`` that installs the fake; for PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.fakes.nvml_file import install_from_env\n"
        "install_from_env()\n")
    return folder
