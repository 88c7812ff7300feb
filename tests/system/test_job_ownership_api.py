"""Job ownership pieces a real agent test cannot easily reach: a discovered job (no
registrant, so the API refuses to end, count into or relabel it) and the caller's uid
read from the real /proc/net/tcp of this machine."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.host.peers import PeerLookup
from tests.helpers.job_api import JOB_TOKEN_HEADER, call


def test_a_discovered_job_is_not_the_apis_to_end_count_or_relabel(
        api: ApiServer, registry: JobRegistry) -> None:
    job = registry.register("slurm-1234", "training", job_id="slurm-1234",
                            labels={"team": "hpc"}, origin="discovered:slurm")
    token = {JOB_TOKEN_HEADER: api.job_token(job.id)}  # even with the derived token
    for method, path, body in (
            ("POST", f"/v1/jobs/{job.id}/end", {}),
            ("POST", f"/v1/jobs/{job.id}/units", {"unit": "step", "count": 1}),
            ("POST", "/v1/jobs", {"name": "slurm-1234", "kind": "training",
                                  "job_id": job.id, "labels": {"team": "attacker"}})):
        status, _, answer = call(api.port, method, path, body, token, as_owner=False)
        assert status == 403 and "discovered" in answer["error"], (path, answer)
    kept = registry.get(job.id)
    assert kept.ended_s is None and kept.units == {} and kept.labels["team"] == "hpc"


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_callers_uid_is_read_from_the_real_proc_net_tcp(host: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        server = socket.socket(family)
        server.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} on this machine")
    with server:
        server.listen(1)
        client = socket.create_connection(server.getsockname()[:2], timeout=5)
        accepted, peer = server.accept()
        with client, accepted:
            peers = PeerLookup(Path("/proc"))
            assert peers.caller_uid(peer, accepted.getsockname()) == os.geteuid()
            assert peers.process_uid(os.getpid()) == os.getuid()
            assert peers.caller_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None  # no such row
    assert PeerLookup(Path("/proc")).process_uid(2**22 + 12345) is None  # no such process
