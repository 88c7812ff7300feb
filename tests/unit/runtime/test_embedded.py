"""Embedded mode over a fake node (tests/helpers/embedded_node.py), what needs no port:
invalid input fails before anything is opened, and a store it cannot open raises with
no thread left behind. (The job's lifecycle through its API on a port, stored final,
and the store flushed from the tick loop: tests/system/test_embedded_job.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from joulestat.core.errors import ConfigError
from joulestat.core.validation import JobError
from joulestat.runtime.embedded import EmbeddedJob
from tests.helpers.embedded_node import PID, EmbeddedNode, embedded_node


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedNode]:
    with embedded_node(tmp_path, monkeypatch) as made:
        yield made


def test_invalid_input_fails_before_anything_is_opened(node: Any) -> None:
    _proc, settings, _engine = node
    with pytest.raises(JobError, match="name"):
        EmbeddedJob("a\\b", "training", None, {PID}, settings=settings())
    with pytest.raises(JobError, match="kind"):
        EmbeddedJob("bert", "nap", None, {PID}, settings=settings())


def test_a_store_it_cannot_open_raises_with_nothing_left_open(node: Any, tmp_path: Path
                                                              ) -> None:
    _proc, settings, _engine = node
    before = {thread.ident for thread in threading.enumerate()}
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the store's directory should be")
    job = EmbeddedJob("bert", "training", None, {PID}, job_id="j1",
                      settings=settings(db=f"sqlite:///{blocked / 'store.db'}"))
    with pytest.raises(ConfigError, match="cannot open the store"):
        job.start()
    assert job.api_url is None
    # No tick loop, no API thread outlives the failed start: the client goes on without it.
    left = [t.name for t in threading.enumerate() if t.ident not in before]
    assert left == []
