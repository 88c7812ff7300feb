"""joulestat agent: samples node energy, attributes it to jobs, exports it."""

from __future__ import annotations

__version__ = "0.1.0"
