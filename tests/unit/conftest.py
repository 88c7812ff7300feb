"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from tests.helpers.kube import Clock, FakeKube, PodNode, directory
from tests.helpers.report_store import Totals, filled_store
from tests.helpers.store_rows import migrated_engine


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    """The URL of a new SQLite store under ``tmp_path`` (not created yet)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture()
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on :func:`db_url`'s store, migrated to head."""
    with migrated_engine(db_url) as engine:
        yield engine


@pytest.fixture()
def filled(tmp_path: Path) -> tuple[Engine, Totals]:
    """The report tests' store: :func:`tests.helpers.report_store.filled_store`."""
    return filled_store(tmp_path)


@pytest.fixture()
def registry() -> JobRegistry:
    return JobRegistry()


@pytest.fixture()
def api(registry: JobRegistry) -> Iterator[ApiServer]:
    """The job API on a free loopback port, over :func:`registry`."""
    server = ApiServer(registry, "127.0.0.1", 0, node="node-a", request_timeout_s=1.0)
    server.start()
    yield server
    server.close()


# The fake Kubernetes pod list of tests/helpers/kube.py (test_kube_pods*.py).

@pytest.fixture
def kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    yield fake
    fake.close()


@pytest.fixture
def sa_dir(tmp_path: Path) -> Path:
    """A service account as Kubernetes mounts it."""
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text("fake-token-123\n")
    (folder / "ca.crt").write_text("not read over http\n")
    (folder / "namespace").write_text("joulestat")
    return folder


@pytest.fixture
def node(tmp_path: Path, kube: FakeKube, sa_dir: Path) -> PodNode:
    clock = Clock()
    return PodNode(tmp_path / "proc", directory(kube, sa_dir, clock), clock)


# The pod list itself.
