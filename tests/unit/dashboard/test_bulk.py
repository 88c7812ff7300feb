"""The dashboard's bulk reads pause the cyclic garbage collector, and always resume it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from joulestat.dashboard.bulk import gc_paused


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_paused_during_the_read_and_resumed_after_it_even_on_error():
    seen: list[bool] = []

    @gc_paused
    def read(fail: bool) -> int:
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("bad read")
        return 7

    assert read(False) == 7
    assert gc.isenabled()
    with pytest.raises(ValueError, match="bad read"):
        read(True)
    assert seen == [False, False] and gc.isenabled()


def test_concurrent_reads_resume_when_the_last_one_ends():
    inside, release = threading.Event(), threading.Event()

    @gc_paused
    def slow() -> None:
        inside.set()
        release.wait(5)

    @gc_paused
    def quick() -> bool:
        return gc.isenabled()

    worker = threading.Thread(target=slow)
    worker.start()
    assert inside.wait(5)
    assert quick() is False
    assert not gc.isenabled()  # the slow read still runs
    release.set()
    worker.join(5)
    assert gc.isenabled()


def test_a_collector_turned_off_elsewhere_stays_off():
    gc.disable()
    assert gc_paused(gc.isenabled)() is False
    assert not gc.isenabled()
