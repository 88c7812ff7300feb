"""``joulestat dashboard`` run in-process with ``os.execve`` faked: what it would hand to
Streamlit (arguments and environment), without starting it."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

from joulestat.cli import dashboard
from joulestat.cli import main as cli


class Exec(Exception):
    """Raised by the fake execve so the command stops where the real one would."""


def run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """The argv and environment handed to Streamlit. The data directory (where the
    dashboard announces its URL) is a temporary one unless the test set its own."""
    seen: dict[str, object] = {}
    if "XDG_DATA_HOME" not in os.environ or not os.environ["XDG_DATA_HOME"].startswith(
            tempfile.gettempdir()):
        monkeypatch.setenv("XDG_DATA_HOME", tempfile.mkdtemp(prefix="joulestat-data-"))

    def fake_execve(path: str, args: list[str], env: dict[str, str]) -> None:
        seen.update(path=path, args=args, env=env)
        raise Exec

    monkeypatch.setattr(dashboard.os, "execve", fake_execve)
    with pytest.raises(Exec):
        cli.main(["dashboard", *argv])
    assert seen["path"] == sys.executable
    return seen["args"], seen["env"]  # type: ignore[return-value]
