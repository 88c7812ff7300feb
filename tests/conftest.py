"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import logging
import resource
import sys
from collections.abc import Iterator

import psutil
import pytest


@pytest.fixture
def many_fds() -> Iterator[None]:
    """Room for thousands of client sockets here, and in an agent started from here (it
    inherits the limit); skipped with the reason where the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if wanted < 3000:
        pytest.skip(f"needs 3000 file descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture(autouse=True)
def fresh_streamlit() -> Iterator[None]:
    """Every test meets Streamlit as a newly started server would: no cached reads or
    engines from an earlier test's pages (``st.cache_data``/``st.cache_resource`` live
    as long as the process, and the dashboard keys them by store URL and time)."""
    _clear_streamlit_caches()
    yield
    _clear_streamlit_caches()


def _clear_streamlit_caches() -> None:
    if "streamlit" not in sys.modules:  # never imported: nothing cached, nothing to pay
        return
    import streamlit as st

    quiet = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "No runtime found": outside AppTest there is none
    try:
        st.cache_data.clear()
        st.cache_resource.clear()
    finally:
        quiet.setLevel(level)


@pytest.fixture(autouse=True)
def no_process_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A process a test starts ends with it: what is left is killed and the test fails,
    naming it, so no later test meets a server, agent or job an earlier one left."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    left = [child for child in me.children(recursive=True)
            if child.pid not in before and not _under(child, before, me.pid)]
    if not left:
        return
    _gone, alive = psutil.wait_procs(left, timeout=5)  # a process exiting on its own
    named = []
    for child in alive:
        try:
            named.append(f"{child.pid} {' '.join(child.cmdline()[:6])}")
            child.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=5)
    if named:
        pytest.fail(f"{request.node.nodeid} left processes running (killed now): "
                    + "; ".join(named), pytrace=False)


def _under(process: psutil.Process, owners: set[int], me: int) -> bool:
    """Whether ``process`` descends from one of ``owners``: a process a longer-lived
    fixture started (a module's Chromium starts renderers as pages load), not the test."""
    try:
        parent = process.parent()
        while parent is not None and parent.pid != me:
            if parent.pid in owners:
                return True
            parent = parent.parent()
    except psutil.NoSuchProcess:
        return False
    return False
