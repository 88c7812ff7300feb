"""Serving-metrics fetching that one endpoint cannot starve and that goes only where it
may (issue 47), against the real agent on a fake RAPL node with real servers on loopback
ports:

* a dripping endpoint (a byte every 1.5 s) and a hanging one (accepts, never answers)
  beside a good vLLM: the good job keeps its samples and its tokens;
* registration through the job API refuses a link-local address and one that is not
  this node's, with an error naming the URL and the rule, and ``joulestat run`` says
  so; the allow setting, given as documented, lets another host through;
* a redirect counts nothing (the loopback service it points at is never asked), and
  neither it nor a page that is not metrics puts what the server sent into the log.
"""

from __future__ import annotations

import pytest

from tests.helpers import job_api
from tests.helpers.agent_process import agent_env, agent_on_fake_rapl, read_cli, wait_for
from tests.helpers.fake_serving import (
    FakeServingEngine,
    ModelRates,
    RawServer,
    dripping,
    hanging,
    sending,
)

pytestmark = pytest.mark.slow
RATES = ModelRates(output_tokens_per_s=200.0, prompt_tokens_per_s=50.0, requests_per_s=2.0)
# The agent ticks, and polls every endpoint, every 0.25 s: 100 answers are 25 s of
# polling. Fetched one after the other, a round took the hanging endpoint's 2 s and the
# dripping one's as long as it dripped: a handful of answers a minute, or none.
GOOD_ANSWERS = 100
OTHER_NODE = "203.0.113.7"  # TEST-NET-3: never an address of the test's node


def _register(port: int, name: str, url: str) -> dict:
    status, _, job = job_api.call(port, "POST", "/v1/jobs", {
        "name": name, "kind": "inference", "serving_metrics": url})
    assert status == 201, job
    return job


def test_a_dripping_and_a_hanging_endpoint_starve_no_other_job(tmp_path) -> None:
    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            FakeServingEngine("vllm", {"m": RATES}) as good, \
            RawServer(dripping(every_s=1.5)) as drip, RawServer(hanging) as hang:
        _register(agent.api_port, "dripping", drip.url)
        _register(agent.api_port, "hanging", hang.url)
        job = _register(agent.api_port, "good", good.url)
        wait_for(lambda: good.hits >= GOOD_ANSWERS, timeout_s=180, every_s=0.2)
        # Meanwhile the other two were asked again and again, each fetch ended by its
        # deadline (a fetch of a URL starts only once its last one ended).
        assert drip.connections >= 3 and hang.connections >= 3, (drip.connections,
                                                                 hang.connections)
        status, _, ended = job_api.call(agent.api_port, "POST", f"/v1/jobs/{job['id']}/end",
                                        {})
        assert status == 200, ended
        status, _, ended = job_api.call(agent.api_port, "GET", f"/v1/jobs/{job['id']}")
        log = agent.log()
    truth = RATES.output_tokens_per_s * (ended["ended_at"] - ended["started_at"])
    assert ended["units"]["output_token"] == pytest.approx(truth, rel=0.05), (ended["units"],
                                                                              truth)
    assert f"{drip.url}: no complete answer within 2 s" in log
    assert f"{hang.url}: no complete answer within 2 s" in log
    assert log.count("its tokens so far are kept") == 2, "each outage said once"


def test_registration_refuses_link_local_and_other_nodes_addresses(tmp_path) -> None:
    metadata = "http://169.254.169.254/latest/meta-data/"
    elsewhere = f"http://{OTHER_NODE}:8000/metrics"
    with agent_on_fake_rapl(tmp_path / "default", at_head=True) as agent:
        port = agent.api_port
        status, _, refused = job_api.call(port, "POST", "/v1/jobs", {
            "name": "meta", "kind": "inference", "serving_metrics": metadata})
        assert status == 400
        assert refused["error"] == (
            "serving_metrics: 169.254.169.254 is a link-local address (169.254.0.0/16, "
            "fe80::/10, where cloud metadata services answer): serving metrics are never "
            "fetched from one")
        status, _, refused = job_api.call(port, "POST", "/v1/jobs", {
            "name": "far", "kind": "inference", "serving_metrics": elsewhere})
        assert status == 400
        assert refused["error"] == (
            f"serving_metrics: {elsewhere}: {OTHER_NODE} is not an address of this node: "
            "serving metrics are fetched from the job's own node only (loopback and this "
            "node's addresses) unless --serving-metrics-allow "
            "(JOULESTAT_SERVING_METRICS_ALLOW) names the host, its address or a network "
            "holding it")
        # The agent label itself, as `joulestat run` sends it, is held to the same rule.
        status, _, refused = job_api.call(port, "POST", "/v1/jobs", {
            "name": "far", "kind": "inference", "agent_labels": {"serving_metrics": elsewhere}})
        assert status == 400 and refused["error"].startswith(
            f"agent_labels.serving_metrics: {elsewhere}: {OTHER_NODE} is not an address")
        far_run = read_cli("run", "--name", "far", "--serving-metrics", elsewhere, "--",
                           "true", env=agent.client_env())
        meta_run = read_cli("run", "--name", "meta", "--serving-metrics", metadata, "--",
                            "true", env=agent.client_env())
        status, _, listed = job_api.call(port, "GET", "/v1/jobs")
    assert far_run.returncode == 2, far_run.stderr
    assert f"{OTHER_NODE} is not an address of this node" in far_run.stderr
    assert meta_run.returncode == 2 and "link-local address" in meta_run.stderr
    assert listed["jobs"] == []

    # The setting as docs/llm-serving.md gives it: the other host's network allowed;
    # link-local still refused though 0.0.0.0/0 holds it.
    allow = {"JOULESTAT_SERVING_METRICS_ALLOW": "203.0.113.0/24,0.0.0.0/0"}
    with agent_on_fake_rapl(tmp_path / "allowing", at_head=True,
                            env=agent_env(**allow)) as agent:
        job = _register(agent.api_port, "far", elsewhere)
        assert job["agent_labels"]["serving_metrics"] == elsewhere
        status, _, refused = job_api.call(agent.api_port, "POST", "/v1/jobs", {
            "name": "meta", "kind": "inference", "serving_metrics": metadata})
    assert status == 400 and "link-local address" in refused["error"]


def test_a_redirect_counts_nothing_and_no_page_reaches_the_log(tmp_path) -> None:
    """A redirect to a loopback service's counters (a vLLM here, the agent's own API
    page in the issue) would count them as the job's units, readable by anyone; a page
    that is not metrics was quoted into the log. Neither now."""
    marker = "MARKER-c0ffee-not-for-logs"
    html = (f"<html><body>{marker} api-key=hunter2</body></html>\n").encode()
    names = "".join(f"# TYPE {marker.replace('-', '_')}_{i} gauge\n"
                    f"{marker.replace('-', '_')}_{i} 1\n" for i in range(3)).encode()

    def page(body: bytes) -> bytes:
        return (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                % len(body)) + body

    with agent_on_fake_rapl(tmp_path, at_head=True) as agent, \
            FakeServingEngine("vllm", {"m": RATES}) as service, \
            RawServer(sending(b"HTTP/1.1 302 Found\r\nLocation: " + service.url.encode()
                              + b"\r\nContent-Length: 0\r\n\r\n")) as redirect, \
            RawServer(sending(page(html))) as not_metrics, \
            RawServer(sending(page(names))) as unknown, \
            RawServer(sending(marker.encode() + b"\r\n\r\n")) as not_http:
        jobs = {name: _register(agent.api_port, name, server.url)["id"]
                for name, server in (("redirected", redirect), ("html", not_metrics),
                                     ("unknown", unknown), ("not-http", not_http))}
        wait_for(lambda: all(f"serving metrics of job {job_id}:" in agent.log()
                             for job_id in jobs.values()), timeout_s=60)
        wait_for(lambda: redirect.connections >= 3, timeout_s=60)
        status, _, listed = job_api.call(agent.api_port, "GET", "/v1/jobs")
        log = agent.log()
        assert service.hits == 0
    assert status == 200
    assert all(not job["units"] for job in listed["jobs"]), listed
    assert f"{redirect.url}: HTTP 302, a redirect: redirects are not followed" in log
    assert f"{not_metrics.url}: not Prometheus text exposition: line 1 is not a sample" in log
    assert "no vLLM, TGI or SGLang metrics: found 3 families, none known" in log
    assert f"{not_http.url}: not a valid HTTP answer" in log
    assert "MARKER" not in log and "hunter2" not in log
