"""joulestat: what ML work costs in energy, carbon and money, measured per node and job.

The public face, for ML code::

    from joulestat import track, count, serving, current_job

Importing ``joulestat`` costs the standard library only: the names above load
:mod:`joulestat.client` on first use (PEP 562), so a training script that imports
joulestat and never measures pays nothing, and the agent's own modules (the store,
Prometheus, the dashboard) load only where they are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from joulestat.core.version import __version__

if TYPE_CHECKING:  # pragma: no cover - typing only
    from joulestat.client.tracking import TrackedJob, count, current_job, serving, track

__all__ = ["TrackedJob", "__version__", "count", "current_job", "serving", "track"]

_PUBLIC = {"track", "count", "serving", "current_job", "TrackedJob"}


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        from joulestat.client import tracking

        return getattr(tracking, name)
    raise AttributeError(f"module 'joulestat' has no attribute {name!r}")
