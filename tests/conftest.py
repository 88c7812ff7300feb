"""Fixtures shared by every tier: tests/unit/ and tests/store/ (in process), tests/system/.

The tiers and when to run which are in docs/testing.md; the in-process tiers' rule (no
process, no network socket) is enforced by tests/helpers/isolation.py, whose hooks are
imported here.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
from collections.abc import Iterator

import psutil
import pytest

# The in-process tiers' check: its hooks, registered by being in this module's namespace.
from tests.helpers.isolation import (  # noqa: F401
    pytest_collection_modifyitems,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    unguarded,
)
from tests.helpers.pg import PostgresServer, running_postgres

# pytester runs a pytest session inside a test: how the isolation check is itself tested.
# xdist_groups keeps `pytest.mark.xdist_group` working under pytest 9.2 (its docstring);
# store_fixtures has `store` and its kin, one store per backend.
pytest_plugins = ["pytester", "tests.helpers.xdist_groups", "tests.helpers.store_fixtures"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once when the editable install's tree of links (``make dev``, strict mode:
    the Makefile) misses a module of the checkout: one added since, which would fail
    as an ImportError deep in some test."""
    from pathlib import Path

    import joulestat

    tree = Path(joulestat.__file__).parent
    if "__editable__" not in str(tree):
        return  # a plain or default-mode install: nothing to compare
    root = Path(__file__).resolve().parents[1]
    folders = {"agent": tree, "dashboard": tree / "dashboard", "migrations": tree / "migrations"}
    missing = [str(path.relative_to(root)) for folder, linked in folders.items()
               for path in (root / folder).rglob("*.py")
               if "__pycache__" not in path.parts
               and not (linked / path.relative_to(root / folder)).exists()]
    if missing:
        pytest.exit(f"the editable install misses {', '.join(sorted(missing)[:5])}: run "
                    "`make dev` (a module added since it was made)", returncode=4)


@pytest.fixture(scope="session")
def pg() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the whole session (each xdist worker has its own);
    tests take a database of their own on it (tests/helpers/stores.py). Skipped with the
    reason where no server can start (tests/helpers/pg.py)."""
    stack = contextlib.ExitStack()
    # Started in a PostgreSQL test's setup; stopped at the session's end, which falls in
    # the teardown of whichever test runs last, perhaps an in-process one.
    with unguarded():
        server = stack.enter_context(running_postgres())
    try:
        yield server
    finally:
        with unguarded():
            stack.close()


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
