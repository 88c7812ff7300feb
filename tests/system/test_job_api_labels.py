"""The job API's labels and explicit end times over real sockets, as a client meets them:
credential-looking label values never come back out of the API (the one redaction of
agent/core/redact.py), the label limits are refused with 400 naming the limit, and
``POST /v1/jobs/{id}/end`` takes the time the job's command exited (``ended_at``)."""

from __future__ import annotations

import time

import pytest

from joulestat.api.server import ApiServer
from joulestat.attribution.registry import JobRegistry
from joulestat.core.redact import REDACTED
from joulestat.core.validation import (
    END_FUTURE_SLACK_S,
    MAX_LABEL_KEY_CHARS,
    MAX_LABEL_VALUE_CHARS,
    MAX_LABELS,
)
from tests.helpers.job_api import JOB, call, register

SECRETS = {
    "api_token": "tok-123456",  # a secret-named key: its whole value goes
    "note": "postgresql://bob:hunter2@db/x",  # a URL with a password, under any key
    "auth_header": "Bearer abcdef123456",
    "team": "nlp",  # nothing secret: as it was
}


def _no_secret(answer: object) -> None:
    text = repr(answer)
    for secret in ("tok-123456", "hunter2", "abcdef123456"):
        assert secret not in text, text


def test_every_answer_redacts_credential_looking_labels(api: ApiServer,
                                                       registry: JobRegistry) -> None:
    port = api.port
    job = register(port, labels=SECRETS)
    _no_secret(job)
    assert job["labels"] == {"api_token": REDACTED, "auth_header": REDACTED,
                             "note": "postgresql://bob:***@db/x", "team": "nlp"}
    path = f"/v1/jobs/{job['id']}"
    again = call(port, "POST", "/v1/jobs", {**JOB, "job_id": job["id"], "labels": {"x": "1"}})
    answers = [again[2], call(port, "GET", path)[2], call(port, "GET", "/v1/jobs")[2],
               call(port, "GET", "/v1/jobs?running=1")[2],
               call(port, "POST", path + "/units", {"unit": "sample", "count": 1})[2],
               call(port, "POST", path + "/end", {})[2]]
    for answer in answers:
        _no_secret(answer)
    assert answers[1]["labels"]["team"] == "nlp" and answers[0]["labels"]["x"] == "1"
    # Redacted on the way out only: the registry (and so the store) keeps what was given.
    assert registry.get(job["id"]).labels["note"] == SECRETS["note"]


@pytest.mark.parametrize(("labels", "message"), [
    ({f"k{i}": "v" for i in range(MAX_LABELS + 1)}, f"labels: at most {MAX_LABELS}, got 33"),
    ({"k" * (MAX_LABEL_KEY_CHARS + 1): "v"},
     f"is {MAX_LABEL_KEY_CHARS + 1} characters, at most {MAX_LABEL_KEY_CHARS}"),
    ({"k" * 100_000: "v"}, "is 100000 characters, at most 64"),
    ({"k": "v" * (MAX_LABEL_VALUE_CHARS + 1)},
     f"labels.k: {MAX_LABEL_VALUE_CHARS + 1} characters, at most {MAX_LABEL_VALUE_CHARS}"),
    ({"k": "a\nb"}, "labels.k: must not contain control characters"),
])
def test_label_limits_are_refused_naming_the_limit(api: ApiServer, registry: JobRegistry,
                                                   labels: dict, message: str) -> None:
    status, _, answer = call(api.port, "POST", "/v1/jobs", {**JOB, "labels": labels})
    assert status == 400 and message in answer["error"], answer
    assert len(answer["error"]) < 300  # a refused key is not echoed whole
    assert registry.jobs() == []


def test_labels_at_the_limits_are_taken(api: ApiServer) -> None:
    labels = {f"k{i}": "v" for i in range(MAX_LABELS - 1)}
    labels["k" * MAX_LABEL_KEY_CHARS] = "v" * MAX_LABEL_VALUE_CHARS
    assert register(api.port, labels=labels)["labels"] == dict(sorted(labels.items()))


def test_a_merge_past_the_label_limit_is_refused_and_changes_nothing(
        api: ApiServer, registry: JobRegistry) -> None:
    first = {f"a{i}": "v" for i in range(MAX_LABELS)}
    job = register(api.port, job_id="run-1", labels=first)
    status, _, answer = call(api.port, "POST", "/v1/jobs",
                             {**JOB, "job_id": "run-1", "labels": {"extra": "v"}})
    assert status == 400 and f"over the limit of {MAX_LABELS}" in answer["error"]
    assert registry.get(job["id"]).labels == first


def test_end_takes_the_time_the_command_exited(api: ApiServer, registry: JobRegistry) -> None:
    job = register(api.port)
    exited = time.time() - 0.5  # the end reached the agent half a second late
    status, _, ended = call(api.port, "POST", f"/v1/jobs/{job['id']}/end",
                            {"cpu_s": 1.5, "ended_at": exited})
    assert status == 200 and ended["ended_at"] == pytest.approx(max(exited, job["started_at"]))
    assert registry.get(job["id"]).final_cpu_s == 1.5
    # Before the job's start (a command that exited before its registration was
    # answered) it is the start; ending again changes nothing.
    other = register(api.port, name="quick")
    ended = call(api.port, "POST", f"/v1/jobs/{other['id']}/end",
                 {"ended_at": other["started_at"] - 10})[2]
    assert ended["ended_at"] == other["started_at"]
    again = call(api.port, "POST", f"/v1/jobs/{other['id']}/end", {"ended_at": time.time()})
    assert again[2]["ended_at"] == other["started_at"]


@pytest.mark.parametrize(("ended_at", "message"), [
    ("soon", "ended_at: expected epoch seconds"),
    (True, "ended_at: expected epoch seconds"),
    (-1, "ended_at: expected epoch seconds"),
    (1e300, "ahead of the agent's clock"),
])
def test_a_bad_end_time_is_refused_and_the_job_keeps_running(
        api: ApiServer, registry: JobRegistry, ended_at: object, message: str) -> None:
    job = register(api.port)
    status, _, answer = call(api.port, "POST", f"/v1/jobs/{job['id']}/end",
                             {"ended_at": ended_at})
    assert status == 400 and message in answer["error"], answer
    assert registry.get(job["id"]).status == "running"


def test_an_end_a_little_ahead_of_the_agents_clock_is_now(api: ApiServer) -> None:
    job = register(api.port)
    before = time.time()
    ended = call(api.port, "POST", f"/v1/jobs/{job['id']}/end",
                 {"ended_at": before + END_FUTURE_SLACK_S / 2})[2]
    assert before <= ended["ended_at"] <= time.time()
