"""Without a token the job API listens on loopback only: a host that is not loopback
is refused before anything binds, naming the --api-token it needs (the API over a
port: tests/system/test_job_api*.py)."""

from __future__ import annotations

import pytest

from joulestat.api.server import ApiServer, check_exposure, is_loopback
from joulestat.attribution.registry import JobRegistry


def test_non_loopback_host_needs_a_token(registry: JobRegistry) -> None:
    for host in ("0.0.0.0", "10.1.2.3", "::", "example.com", "127.0.0.1.example.com"):
        assert not is_loopback(host)
        message = f"--api-host {host} is not loopback: set --api-token"
        with pytest.raises(ValueError, match=message):
            check_exposure(host, None)
        api = ApiServer(registry, host, 0)
        with pytest.raises(ValueError, match=message):
            api.start()  # refused before anything binds
        assert api.port == 0
        check_exposure(host, "t")
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host)
        check_exposure(host, None)
