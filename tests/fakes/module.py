"""The part every fake vendor binding shares: the module it builds, and its install."""

from __future__ import annotations

import sys
import types
from typing import Self

import pytest


class FakeModule:
    """A vendor's Python binding faked as a module, built by the subclass's ``_build`` once
    its own fields are set; ``install`` puts it in ``sys.modules`` for one test."""

    MODULE_NAME: str  # the name the sensor imports

    def __init__(self) -> None:
        self.shutdown_calls = 0
        self.module = self._build()

    def _build(self) -> types.ModuleType:
        raise NotImplementedError

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Self:
        monkeypatch.setitem(sys.modules, self.MODULE_NAME, self.module)
        return self
