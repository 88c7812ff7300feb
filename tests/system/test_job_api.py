"""The job API over real sockets: the happy path, then every bad request a caller can
make in JSON (validation, unknown jobs and paths, wrong methods, query parameters); raw
HTTP and access are in test_job_api_http.py, load in test_job_api_load.py."""

from __future__ import annotations

import os
from typing import Any

import pytest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from tests.helpers.agent_process import idle_process
from tests.helpers.job_api import JOB, call, register


def test_register_count_end_list_get_and_health(api: ApiServer, registry: JobRegistry) -> None:
    port = api.port
    assert call(port, "GET", "/v1/health")[2] == {"status": "ok", "node": "node-a",
                                                  "mode": "agent", "interval_s": None}
    pid = os.getppid()  # a process that runs (a job claims no other: issue 47), not ours
    job = register(port, pids=[pid], labels={"team": "nlp"})
    assert (job["name"], job["kind"], job["pids"], job["labels"], job["status"], job["origin"]) \
        == ("bert", "training", [pid], {"team": "nlp"}, "running", "api")
    assert registry.get(job["id"]).pids == {pid}

    path = f"/v1/jobs/{job['id']}"
    for amount in (32, 8.5):
        status, _, answer = call(port, "POST", path + "/units", {"unit": "sample", "count": amount})
        assert status == 200
    assert answer["units"] == {"sample": 40.5}
    other = register(port, name="gpt", kind="inference")

    assert call(port, "GET", path)[2]["units"] == {"sample": 40.5}
    status, _, ended = call(port, "POST", path + "/end", b"")
    assert status == 200 and ended["status"] == "ended" and ended["ended_at"] is not None
    assert call(port, "POST", path + "/end", {})[0] == 200  # ending twice is harmless

    listed = call(port, "GET", "/v1/jobs")[2]["jobs"]
    assert [j["id"] for j in listed] == [job["id"], other["id"]]
    running = call(port, "GET", "/v1/jobs?running=1")[2]["jobs"]
    assert [j["id"] for j in running] == [other["id"]]
    assert len(call(port, "GET", "/v1/jobs?running=0")[2]["jobs"]) == 2


def test_same_job_id_joins_up_and_a_different_job_under_it_conflicts(api: ApiServer) -> None:
    port = api.port
    # Two processes that run (a job claims no other: issue 47); a fixed pid such as 11
    # is a kernel thread on one machine and nothing on the next.
    with idle_process() as one, idle_process() as two:
        first = register(port, job_id="run-7", pids=[one.pid], origin="run")
        assert first["id"] == "run-7" and first["origin"] == "run"
        status, _, again = call(port, "POST", "/v1/jobs", {
            "name": "bert", "kind": "training", "job_id": "run-7", "pids": [two.pid]})
        assert status == 200 and again["pids"] == sorted([one.pid, two.pid])
    status, _, answer = call(port, "POST", "/v1/jobs",
                             {"name": "other", "kind": "training", "job_id": "run-7"})
    assert status == 409 and "run-7" in answer["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'"bert"', "expected a JSON object, got str"),
        (b"", "empty body"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"name": "b\xe9rt", "kind": "training"}', "not UTF-8"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"name": "x", "kind": "training", "pids": [' + b"9" * 5000 + b"]}", "not valid JSON"),
        (b'{"name": "x", "kind": "training", "pids": [NaN]}', "NaN"),
        ({"name": 5, "kind": "training"}, "name: expected a string"),
        ({"name": "..\\x", "kind": "training"}, "name: must not contain a backslash"),
        ({"name": "a\u0007b", "kind": "training"}, "name: must not contain control characters"),
        ({"name": "x\n", "kind": "training", "labels": {"k": "v\r"}}, "labels.k"),
        ({"name": "x", "kind": "nope"}, "kind: expected one of"),
        ({"name": "x", "kind": ["training"]}, "kind:"),
        ({"name": "x"}, "kind: required"),
        ({"kind": "training"}, "name: required"),
        ({**JOB, "pids": "123"}, "pids: expected a list"),
        ({**JOB, "pids": [True]}, "pids: True is not a process id"),
        ({**JOB, "pids": [1.5]}, "pids: 1.5 is not a process id"),
        ({**JOB, "labels": ["a"]}, "labels: expected an object"),
        ({**JOB, "labels": {"k": ["v"]}}, "labels.k: expected a string"),
        ({**JOB, "job_id": ["x"]}, "job_id:"),
        ({**JOB, "job_id": "../etc/passwd"}, "job_id:"),
        ({**JOB, "origin": "discovered:k8s"}, "origin: expected one of"),
        ({**JOB, "gpu": 1, "evil": True}, "unknown field(s) evil, gpu"),
    ],
)
def test_bad_registrations_are_400_naming_the_problem(
    api: ApiServer, registry: JobRegistry, body: Any, message: str
) -> None:
    status, _, answer = call(api.port, "POST", "/v1/jobs", body)
    assert status == 400
    assert message in answer["error"]
    assert registry.jobs() == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"unit": "Sample!", "count": 1}, "unit:"),
        ({"unit": "sample", "count": "3"}, "count: expected a number"),
        ({"unit": "sample", "count": -1}, "count: a finite number"),
        (b'{"unit": "sample", "count": 1e400}', "count: a finite number"),
        ({"unit": "sample"}, "count: required"),
        ({"unit": "sample", "count": 1, "extra": 2}, "unknown field(s) extra"),
        (b"[]", "expected a JSON object"),
    ],
)
def test_bad_counts_are_400(api: ApiServer, body: Any, message: str) -> None:
    job = register(api.port)
    status, _, answer = call(api.port, "POST", f"/v1/jobs/{job['id']}/units", body)
    assert status == 400 and message in answer["error"]
    assert call(api.port, "GET", f"/v1/jobs/{job['id']}")[2]["units"] == {}


def test_end_takes_only_cpu_seconds(api: ApiServer, registry: JobRegistry) -> None:
    job = register(api.port)
    path = f"/v1/jobs/{job['id']}/end"
    status, _, answer = call(api.port, "POST", path, {"at": 1})
    assert status == 400 and "unknown field(s) at; expected cpu_s" in answer["error"]
    status, _, answer = call(api.port, "POST", path, {"cpu_s": "lots"})
    assert status == 400 and answer["error"].startswith("cpu_s:")
    assert registry.get(job["id"]).status == "running"
    status, _, answer = call(api.port, "POST", path, {"cpu_s": 12.5})
    assert status == 200 and answer["status"] == "ended"
    assert registry.get(job["id"]).final_cpu_s == 12.5


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/jobs/nope", None),
        ("POST", "/v1/jobs/nope/units", {"unit": "sample", "count": 1}),
        ("POST", "/v1/jobs/nope/end", {}),
        ("GET", "/v1/jobs/%ff%fe", None),
    ],
)
def test_unknown_job_ids_are_404(api: ApiServer, method: str, path: str, body: Any) -> None:
    status, _, answer = call(api.port, method, path, body)
    assert status == 404 and "no job with id" in answer["error"]


@pytest.mark.parametrize(
    "path", ["/", "/v1", "/v1/", "/v1/jobs/", "/v2/jobs", "/v1/jobs/x/y", "/v1/jobs/x/units/z",
             "/v1/health/", "/metrics"],
)
def test_unknown_paths_are_404(api: ApiServer, path: str) -> None:
    status, _, answer = call(api.port, "GET", path)
    assert status == 404 and "no such path" in answer["error"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/jobs", "GET, POST"),
        ("PUT", "/v1/health", "GET"),
        ("GET", "/v1/jobs/x/units", "POST"),
        ("DELETE", "/v1/jobs/x", "GET"),
        ("PATCH", "/v1/jobs/x/end", "POST"),
        ("BREW", "/v1/jobs", "GET, POST"),
    ],
)
def test_wrong_methods_are_405_with_allow(api: ApiServer, method: str, path: str,
                                           allow: str) -> None:
    status, headers, answer = call(api.port, method, path)
    assert status == 405 and headers["allow"] == allow and method in answer["error"]


def test_query_parameters_are_checked(api: ApiServer) -> None:
    status, _, answer = call(api.port, "GET", "/v1/jobs?running=maybe")
    assert status == 400 and "running" in answer["error"]
    status, _, answer = call(api.port, "GET", "/v1/jobs?limit=5")
    assert status == 400 and "limit" in answer["error"]
    assert call(api.port, "GET", "/v1/health?x=1")[0] == 400
