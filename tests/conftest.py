"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import resource
from collections.abc import Iterator

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
