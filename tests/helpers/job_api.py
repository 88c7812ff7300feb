"""Calls to the job API over real sockets, as a client (or a hostile one) makes them."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

Answer = tuple[int, dict[str, str], Any]
JOB = {"name": "bert", "kind": "training"}
JOB_TOKEN_HEADER = "X-Joulestat-Job-Token"
# (port, job id) -> the job_token its registration answered: a test calls as the
# registrant, as `joulestat run` and track() do, unless it says otherwise (as_owner).
_tokens: dict[tuple[int, str], str] = {}


def _job_of(method: str, path: str, body: Any) -> str | None:
    parts = path.partition("?")[0].split("/")
    if len(parts) == 5 and parts[:3] == ["", "v1", "jobs"]:
        return parts[3]
    if method == "POST" and parts == ["", "v1", "jobs"] and isinstance(body, dict):
        job_id = body.get("job_id")
        return job_id if isinstance(job_id, str) else None
    return None


def check_answer(status: int, headers: dict[str, str], body: bytes) -> Answer:
    """Every answer is JSON with a matching Content-Length; every error says why."""
    assert headers.get("content-type") == "application/json", (status, headers)
    assert int(headers["content-length"]) == len(body)
    payload = json.loads(body) if body else None
    if status >= 400:
        assert isinstance(payload, dict) and payload["error"], payload
    return status, headers, payload


def call(port: int, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None, as_owner: bool = True) -> Answer:
    """One request; ``as_owner``: with the job token this helper was answered for the
    job the path names (if any), as its registrant would send it."""
    data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
    headers = dict(headers or {})
    job_id = _job_of(method, path, body)
    if as_owner and job_id is not None and (port, job_id) in _tokens:
        headers.setdefault(JOB_TOKEN_HEADER, _tokens[(port, job_id)])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        found = {k.lower(): v for k, v in response.getheaders()}
        answer = check_answer(response.status, found, raw)
    finally:
        conn.close()
    payload = answer[2]
    if isinstance(payload, dict) and isinstance(payload.get("job_token"), str):
        _tokens[(port, payload["id"])] = payload["job_token"]
    return answer


def token_of(port: int, job_id: str) -> str:
    """The job token the agent at ``port`` answered for ``job_id``'s registration."""
    return _tokens[(port, job_id)]


def raw(port: int, request: bytes, timeout: float = 10.0) -> Answer:
    """Send bytes as they are and parse whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return check_answer(status, headers, body)


def register(port: int, **fields: Any) -> dict[str, Any]:
    status, _, job = call(port, "POST", "/v1/jobs", {"name": "bert", "kind": "training", **fields})
    assert status == 201, job
    return job


def post_head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *headers, "", ""]
    return "\r\n".join(lines).encode()
