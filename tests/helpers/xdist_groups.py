"""``pytest.mark.xdist_group`` kept working under ``--dist loadgroup`` on pytest 9.2.

pytest-xdist (3.8.0) tells its scheduler a test's group by appending ``@<group>`` to the
test's node id in the worker, writing ``item._nodeid``. pytest 9.2 builds a node id from
a structured ``item._id`` and no longer reads ``_nodeid``, so the suffix never shows and
every group is spread over the workers as if unmarked: a module's costly fixture (a
wheel, a demo store, a Chromium) is then built once per worker that runs one of its
tests (pytest-dev/pytest-xdist#1386; the fix, #1388, is not released). The hook below
puts the suffix where pytest 9.2 reads it. It does nothing where the suffix is already
there (an older pytest, a fixed xdist), outside ``--dist loadgroup`` and outside xdist.

A plugin: registered by ``pytest_plugins = ["tests.helpers.xdist_groups"]`` in
tests/conftest.py (or ``-p tests.helpers.xdist_groups`` on the command line).
"""

from __future__ import annotations

import pytest


def _group(item: pytest.Item) -> str | None:
    """The item's group as xdist names it: its xdist_group marks' names, sorted, joined."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which may have done it already
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # a pytest without structured ids: xdist's own suffix holds
        return
    for item in items:
        group = _group(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        # NodeId.parse keeps the string it was given as the id's text: the scheduler
        # splits the group off at the last "@", as it did before pytest 9.2.
        item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]
