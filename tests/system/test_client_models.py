"""Several models in one process: ``job.serving(model)`` and ``count(..., model=,
busy_s=)`` through a real job API, the per-model unit encoding the API takes and
refuses. (What registering a job again does to its labels:
tests/unit/attribution/test_registry.py.)"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.client.context import ENV_AGENT_URL, ENV_JOB_ID, ENV_TOKEN
from joulestat.client.notice import forget
from joulestat.client.tracking import track
from joulestat.core.model_units import MAX_MODELS_PER_JOB


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_AGENT_URL, ENV_TOKEN, ENV_JOB_ID, "JOULESTAT_AGENT"):
        monkeypatch.delenv(name, raising=False)
    forget()  # each test starts with nothing said yet


@pytest.fixture
def served() -> Iterator[tuple[str, JobRegistry]]:
    registry = JobRegistry()
    # track() here claims this very process, which also serves the API: no agent pid.
    with ApiServer(registry, "127.0.0.1", 0, node="node-a", agent_pid=None) as api:
        yield f"http://127.0.0.1:{api.port}", registry


def post(url: str, path: str, body: dict, job_token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if job_token is not None:  # as the job's registrant
        headers["X-Joulestat-Job-Token"] = job_token
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_serving_records_each_models_busy_time_and_units(served):
    url, registry = served
    with track("two-models", kind="inference", agent_url=url, flush_interval_s=0.05) as job:
        for _ in range(3):
            with job.serving("model-a") as model:
                time.sleep(0.03)
                model.count(2)
        with job.serving("org/model-b:v1"):
            time.sleep(0.01)
        job.count("inference", 1, model="org/model-b:v1", busy_s=0.5)
        with pytest.raises(ZeroDivisionError), job.serving("model-a"):
            time.sleep(0.01)
            raise ZeroDivisionError  # a failed inference kept the process busy all the same
        job.count("request", 4)
        job_id = job.id
    stored = registry.get(job_id)
    assert stored.units == {"inference": 7.0, "request": 4.0}  # plain units only
    a, b = stored.models["model-a"], stored.models["org/model-b:v1"]
    assert a["inference"] == 6.0 and 0.1 <= a["busy_s"] < 1.0
    assert b["inference"] == 1.0 and 0.51 <= b["busy_s"] < 1.0
    answer = stored.to_json()
    assert answer["units"] == {"inference": 7.0, "request": 4.0}
    assert set(answer["models"]) == {"model-a", "org/model-b:v1"}


def test_a_joined_track_serves_into_the_job_it_joined(served):
    url, registry = served
    with track("outer", kind="inference", agent_url=url, flush_interval_s=0.05) as outer:
        with track("inner") as inner, inner.serving("m"):
            inner.count("inference", 1, model="m")
        job_id = outer.id
    assert inner.joined and registry.get(job_id).models["m"]["inference"] == 1.0


@pytest.mark.parametrize(("call", "message"), [
    (lambda job: job.count("inference@a", 1), "name the model apart"),
    (lambda job: job.count("busy_s", 1), "reserved"),
    (lambda job: job.count("inference", 1, model="a b"), "model:"),
    (lambda job: job.count("inference", 1, model="a", busy_s=-1), "busy_s:"),
    (lambda job: job.serving("a@b").__enter__().count(1), "model:"),
])
def test_bad_model_input_is_said_once_and_not_counted(served, call, message, caplog):
    url, registry = served
    with track("bad", agent_url=url) as job:
        for _ in range(100):  # a request handler: said once, never raised
            call(job)
        job.count("request", 1)
        job_id = job.id
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and message in said[0], said
    stored = registry.get(job_id)
    assert stored.units == {"request": 1.0} and stored.models == {}


def test_busy_time_without_a_model_is_said_once_and_its_units_kept(served, caplog):
    """A request handler that forgot ``model=``: its inferences happened, so they count;
    its busy time cannot be any model's, so it is left out, said once."""
    url, registry = served
    with track("forgot", agent_url=url) as job:
        for _ in range(100):
            job.count("inference", 1, busy_s=0.1)
        job_id = job.id
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "needs model=" in said[0] and "count is kept" in said[0], said
    stored = registry.get(job_id)
    assert stored.units == {"inference": 100.0} and stored.models == {}


def test_the_api_takes_the_per_model_encoding_and_refuses_a_bad_one(served):
    url, registry = served
    _status, job = post(url, "/v1/jobs", {"name": "svc", "kind": "inference"})
    path, token = f"/v1/jobs/{job['id']}/units", job["job_token"]
    assert post(url, path, {"unit": "inference@bert", "count": 5}, token)[0] == 200
    status, answer = post(url, path, {"unit": "busy_s@bert", "count": 1.5}, token)
    assert status == 200
    assert answer["units"] == {"inference": 5.0}  # busy time is no plain unit
    assert answer["models"] == {"bert": {"busy_s": 1.5, "inference": 5.0}}
    _changed, deltas = registry.take_changes()
    assert deltas[job["id"]] == {"inference": 5.0, "inference@bert": 5.0, "busy_s@bert": 1.5}
    for unit, wanted in (("inference@", "only a per-model unit"), ("Inf@bert", "<unit>@<model>"),
                         ("busy_s", "reserved"), ("a@b@c", "<unit>@<model>")):
        status, answer = post(url, path, {"unit": unit, "count": 1}, token)
        assert status == 400 and wanted in answer["error"], (unit, answer)
    for n in range(MAX_MODELS_PER_JOB - 1):
        assert post(url, path, {"unit": f"busy_s@m{n}", "count": 1}, token)[0] == 200
    status, answer = post(url, path, {"unit": "busy_s@one-too-many", "count": 1}, token)
    assert status == 400 and f"{MAX_MODELS_PER_JOB} models" in answer["error"]
