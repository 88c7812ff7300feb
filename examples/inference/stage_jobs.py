"""One joulestat job per load stage of an inference server, through the agent's HTTP API.

A load test at 1, 4 and 16 users is three measurements of one server process. Each
stage becomes a job registered on the server's pid with the label ``concurrency=N``:
the agent attributes the process's energy to the stage running at the time, and the
stage's inferences and busy time per model (read from the server's ``/v1/stats``
about once a second, as deltas) are counted into it with the API's per-model units,
``inference@<model>`` and ``busy_s@<model>``: the job counts ``inference`` as a whole
and its energy is split among the models by busy time. Sent as they happen rather
than once at the stage's end, so the split sees each model's busy time in the minute
it was spent. Its latency percentiles, known only at its end, are added as labels
(``p50_ms``, ``p99_ms``) before it ends: a running job takes new labels, merged key by
key, when registered again with its id. The Load curve page (by setup or by model) and
``joulestat compare --by label:concurrency`` or ``--by model`` read them.

Only the standard library is used, so the file doubles as an example of the API
(docs/jobs.md#http-api): ``POST /v1/jobs``, ``/v1/jobs/{id}/units``, ``/v1/jobs/{id}/end``.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

DEFAULT_AGENT_URL = "http://127.0.0.1:9465"


class StageError(RuntimeError):
    """Something the person running the load test has to fix; the message says what."""


def call_json(url: str, method: str = "GET", body: Any = None, token: str | None = None,
              timeout_s: float = 5.0, job_token: str | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if job_token:  # the registrant's credential: counting into, relabelling, ending a job
        request.add_header("X-Joulestat-Job-Token", job_token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    with opener.open(request, timeout=timeout_s) as response:
        return json.loads(response.read() or b"{}")


@dataclass
class AgentApi:
    """The node agent's job API (``joulestat agent``, or ``make run``)."""

    url: str = field(default_factory=lambda: os.environ.get("JOULESTAT_AGENT_URL")
                     or DEFAULT_AGENT_URL)
    token: str | None = field(default_factory=lambda: os.environ.get("JOULESTAT_API_TOKEN"))
    # job id -> the job_token its registration answered (docs/jobs.md, "Who may do what")
    job_tokens: dict[str, str] = field(default_factory=dict)

    def _do(self, path: str, method: str = "GET", body: Any = None,
            job_id: str | None = None) -> dict[str, Any]:
        return call_json(self.url.rstrip("/") + path, method, body, self.token,
                         job_token=None if job_id is None else self.job_tokens.get(job_id))

    def health(self) -> dict[str, Any]:
        try:
            return self._do("/v1/health")
        except (OSError, ValueError) as exc:
            raise StageError(f"no joulestat agent answers at {self.url} ({exc}): start one "
                             "on this node (`make run`, or `joulestat agent`), or set "
                             "JOULESTAT_AGENT_URL") from None

    def register(self, name: str, pid: int, labels: dict[str, str], job_id: str
                 ) -> dict[str, Any]:
        job = self._do("/v1/jobs", "POST", {"name": name, "kind": "inference", "pids": [pid],
                                            "labels": labels, "job_id": job_id}, job_id)
        if isinstance(job.get("job_token"), str):
            self.job_tokens[job_id] = job["job_token"]
        return job

    def count(self, job_id: str, unit: str, n: float) -> None:
        self._do(f"/v1/jobs/{job_id}/units", "POST", {"unit": unit, "count": n}, job_id)

    def end(self, job_id: str) -> dict[str, Any]:
        return self._do(f"/v1/jobs/{job_id}/end", "POST", {}, job_id)

    def wait_final(self, job_id: str, timeout_s: float = 15.0) -> dict[str, Any]:
        """The ended job once its last tick is attributed and stored (``final``), or as
        it stands after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        job = self._do(f"/v1/jobs/{job_id}")
        while not job.get("final") and time.monotonic() < deadline:
            time.sleep(0.1)
            job = self._do(f"/v1/jobs/{job_id}")
        return job


def server_stats(server_url: str) -> dict[str, Any]:
    try:
        return call_json(server_url.rstrip("/") + "/v1/stats")
    except (OSError, ValueError) as exc:
        raise StageError(f"the inference server at {server_url} does not answer /v1/stats "
                         f"({exc}): start examples/inference/server.py first") from None


def _unit_counts(stats: dict[str, Any]) -> dict[str, float]:
    """The server's totals as the job API's per-model units: ``inference@<model>``
    (the agent adds it to ``inference``) and ``busy_s@<model>``."""
    counts: dict[str, float] = {}
    for name, model in (stats.get("models") or {}).items():
        counts[f"inference@{name}"] = float(model["inferences"])
        counts[f"busy_s@{name}"] = float(model["busy_s"])
    return counts


@dataclass
class StageJobs:
    """Begin a job when a stage begins, finish it (units, latency labels, end) after."""

    server_url: str
    name: str = "mlp-serve"
    labels: dict[str, str] = field(default_factory=dict)
    api: AgentApi = field(default_factory=AgentApi)
    pid: int = 0
    job_id: str | None = None
    level: int | None = None
    _before: dict[str, float] = field(default_factory=dict)
    finished: list[dict[str, Any]] = field(default_factory=list)

    def check(self) -> None:
        """The agent answers and the server is a process of its own on this node.

        A server started under ``joulestat run`` already counts into the run's job, so
        a stage job on it would see its energy but not its inferences: refused."""
        self.api.health()
        stats = server_stats(self.server_url)
        if stats.get("job_id"):
            raise StageError(f"the server runs inside joulestat job {stats['job_id']} "
                             "(started under `joulestat run`): start it on its own so "
                             "each stage's job gets both its energy and its inferences")
        self.pid = int(stats["pid"])

    def begin(self, level: int) -> str:
        if self.job_id is not None:
            raise RuntimeError("finish() the running stage first")
        if not self.pid:
            self.check()
        self._before = _unit_counts(server_stats(self.server_url))
        self.job_id, self.level = uuid.uuid4().hex, level
        self.api.register(self.name, self.pid, self._stage_labels(), self.job_id)
        return self.job_id

    def _stage_labels(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self.labels, "concurrency": str(self.level), **(extra or {})}

    def progress(self) -> None:
        """Count what the server did since the last call into the running stage."""
        if self.job_id is None:
            return
        for unit, total in sorted(_unit_counts(server_stats(self.server_url)).items()):
            delta = total - self._before.get(unit, 0.0)
            if delta > 0:
                self.api.count(self.job_id, unit, delta)
            self._before[unit] = total  # once sent: a failure part-way resends the rest

    def finish(self, p50_ms: float | None, p99_ms: float | None, failures: int = 0
               ) -> dict[str, Any]:
        """Count the stage's last inferences, label its latency, end it; returns the job.

        It does not wait for the job's last tick to be stored, so the next stage starts
        at once; :meth:`wait_final` does that at the end of the test."""
        if self.job_id is None:
            raise RuntimeError("no stage is running")
        self.progress()
        job_id, self.job_id = self.job_id, None
        latency: dict[str, str] = {}
        if p50_ms is not None and p99_ms is not None:
            latency.update(p50_ms=f"{p50_ms:.4g}", p99_ms=f"{p99_ms:.4g}")
        if failures:  # only then: a label every stage carries as 0 would be noise
            latency["failures"] = str(failures)
        self.api.register(self.name, self.pid, self._stage_labels(latency), job_id)
        job = self.api.end(job_id)
        self.finished.append(job)
        return job

    def wait_final(self) -> list[dict[str, Any]]:
        """Every finished stage's job as stored, in stage order."""
        self.finished = [self.api.wait_final(job["id"]) for job in self.finished]
        return self.finished
