"""Fixtures the system tests share: real agents, CLI processes, Chromium, the wheel.

PostgreSQL is the session's one server, ``pg`` (tests/conftest.py).
"""

from __future__ import annotations

import pytest

# -- Moved from tests/unit/conftest.py with the tests that need a port (imports are
# local so this block stands alone at the end of the file).

@pytest.fixture
def registry():
    """An empty job registry (joulestat.attribution.registry.JobRegistry)."""
    from joulestat.attribution.registry import JobRegistry

    return JobRegistry()


@pytest.fixture
def api(registry):
    """The job API on a free loopback port, over :func:`registry`."""
    from joulestat.api.server import ApiServer

    server = ApiServer(registry, "127.0.0.1", 0, node="node-a", request_timeout_s=1.0)
    server.start()
    yield server
    server.close()


# The fake Kubernetes pod list of tests/helpers/kube.py (test_kube_pods.py).

@pytest.fixture
def kube():
    """A pod-list endpoint on a loopback port (tests/helpers/kube.py)."""
    from tests.helpers.kube import FakeKube

    fake = FakeKube()
    yield fake
    fake.close()


@pytest.fixture
def sa_dir(tmp_path):
    """A service account as Kubernetes mounts it."""
    from tests.helpers.kube import service_account

    return service_account(tmp_path / "serviceaccount")


@pytest.fixture
def node(tmp_path, kube, sa_dir):
    """A node whose discovery names pods from :func:`kube` (tests/helpers/kube.py)."""
    from tests.helpers.kube import Clock, PodNode, directory

    clock = Clock()
    return PodNode(tmp_path / "proc", directory(kube, sa_dir, clock), clock)
