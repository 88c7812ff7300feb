"""Overload as a node meets it: a client registering jobs in a loop, idle connections
held open on both ports. The agent answers, keeps ticking and keeps the node's energy."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.agent_process import agent_at_head, wait_for

TICKS = "joulestat_agent_ticks_total"
# docs/jobs.md: the agent's RSS grows by at most this with --max-jobs (1,000) live jobs.
MAX_JOBS_RSS_MIB = 10


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def post(port: int, path: str, body: dict) -> tuple[int, dict]:
    """One HTTP/1.0 POST as a client in a loop sends it (the job API answers one request
    a connection): its status and JSON body. Written on a bare socket: urllib's
    machinery cost the test process more CPU than the agent spent answering."""
    payload = json.dumps(body).encode()
    request = (f"POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
               ).encode() + payload
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(content or b"{}")


@pytest.mark.slow
def test_twenty_thousand_jobs_are_capped_and_cost_the_node_nothing(tmp_path: Path) -> None:
    interval_s = 0.2
    with agent_at_head(tmp_path, "--sysfs-root", str(tmp_path), "--interval",
                       str(interval_s), "--node", "n1", "--max-jobs", "1000") as agent:
        wait_for(lambda: agent.value(TICKS) >= 5)  # settled: its first ticks are done
        rss_before = rss_mib(agent.proc.pid)
        ticks_before, began = agent.value(TICKS), time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda n: post(agent.api_port, "/v1/jobs", {"name": f"j{n}", "kind": "other"}),
                range(20_000)))
        elapsed_s = time.monotonic() - began
        ticks = agent.value(TICKS) - ticks_before
        rss_after = rss_mib(agent.proc.pid)
        statuses = [status for status, _ in answers]
        assert statuses.count(201) == 1000  # --max-jobs
        assert statuses.count(429) == 19_000
        refusal = next(body for status, body in answers if status == 429)
        assert "limit (--max-jobs 1000)" in refusal["error"]
        print(f"20,000 registrations in {elapsed_s:.1f} s; ticks {ticks:.0f} of "
              f"{elapsed_s / interval_s:.0f}; RSS {rss_before:.1f} -> {rss_after:.1f} MiB")
        assert ticks >= 0.8 * elapsed_s / interval_s
        assert rss_after - rss_before <= MAX_JOBS_RSS_MIB
        ticks_after = agent.value(TICKS)
        wait_for(lambda: agent.value(TICKS) >= ticks_after + 5)  # ticking on after it
        assert agent.stop() == 0
    assert "buffer full" not in agent.log()
    from joulestat.store.engine import make_engine

    with make_engine(agent.db_url).connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT t_start_ms, t_end_ms FROM tick_energy WHERE node = 'n1' "
            "AND component = 'cpu' ORDER BY t_end_ms").fetchall()
        jobs = conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar()
    # Node energy complete: the stored ticks tile the agent's whole run.
    gaps = [b[0] - a[1] for a, b in zip(rows, rows[1:], strict=False)]
    assert max(abs(g) for g in gaps) <= 2
    assert jobs == 1000
