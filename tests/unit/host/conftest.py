"""Fixtures of the host unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kube import service_account


@pytest.fixture
def sa_dir(tmp_path: Path) -> Path:
    """A service account as Kubernetes mounts it (tests/helpers/kube.py)."""
    return service_account(tmp_path / "serviceaccount")
