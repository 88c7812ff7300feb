"""How a measured job tells the programs it starts where they belong, and how a job
that cannot reach its agent says what that means.

`joulestat run` (and an active ``track()``) puts these variables in its children's
environment: ``JOULESTAT_JOB_ID`` (the job they are part of), ``JOULESTAT_AGENT_URL``
(the job API that measures it: the node's agent, or the wrapper's own in-process API
in embedded mode), ``JOULESTAT_JOB_TOKEN`` (the job's registrant credential, without
which the API takes no counts for it) and, when that API wants one,
``JOULESTAT_API_TOKEN``. A ``track()``
or ``count()`` in a child then adds its units to that job instead of registering a
second one, so the node is measured once and its processes belong to one job.

Falling back to in-process measurement changes what is measured when an agent runs
anyway (the node's ticks are then written twice), so :func:`fallback_warning` looks
for that case and names it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from joulestat.api.agent_client import AgentClient, AgentError, AgentUnavailable
from joulestat.runtime.settings import OPTIONS

ENV_JOB_ID = "JOULESTAT_JOB_ID"
ENV_AGENT_URL = OPTIONS["agent_url"].env  # JOULESTAT_AGENT_URL
ENV_TOKEN = OPTIONS["api_token"].env  # JOULESTAT_API_TOKEN
ENV_JOB_TOKEN = "JOULESTAT_JOB_TOKEN"
DEFAULT_AGENT_URL: str = OPTIONS["agent_url"].default
PROBE_TIMEOUT_S = 0.3


@dataclass(frozen=True, slots=True)
class EnclosingJob:
    """The job this process was started in, as its environment names it."""

    job_id: str
    agent_url: str
    token: str | None
    job_token: str | None = None


def agent_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """``JOULESTAT_AGENT_URL``, else the default; the one way every command names it."""
    env = os.environ if env is None else env
    return env.get(ENV_AGENT_URL) or DEFAULT_AGENT_URL


def enclosing_job(env: Mapping[str, str] | None = None) -> EnclosingJob | None:
    env = os.environ if env is None else env
    job_id = env.get(ENV_JOB_ID, "").strip()
    if not job_id:
        return None
    return EnclosingJob(job_id, agent_url_from_env(env), env.get(ENV_TOKEN) or None,
                        env.get(ENV_JOB_TOKEN) or None)


def child_env(job_id: str, agent_url: str, token: str | None,
              job_token: str | None = None) -> dict[str, str]:
    """The variables a job's children get (merge them into their environment)."""
    env = {ENV_JOB_ID: job_id, ENV_AGENT_URL: agent_url}
    if token:
        env[ENV_TOKEN] = token
    if job_token:
        env[ENV_JOB_TOKEN] = job_token
    return env


def port_taken(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether something accepts TCP connections at ``url``'s host and port."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout_s):
            return True
    except OSError:
        return False


def agent_answers(url: str, token: str | None) -> bool:
    try:
        AgentClient(url, token, timeout_s=PROBE_TIMEOUT_S).health()
    except AgentError:
        return True  # it answered, if only to refuse us
    except (AgentUnavailable, ValueError):
        return False
    return True


def fallback_warning(agent_url: str, token: str | None, *, forced: bool) -> str | None:
    """Why measuring in-process would measure this node a second time, if it would.

    ``forced`` is ``--embedded``: the user asked for it, so only an agent answering at
    ``agent_url`` is worth a word. Otherwise the agent at ``agent_url`` did not answer;
    an agent at the default address, or anything holding that port, likely means the
    address was missed.
    """
    twice = ("measuring in-process beside it writes this node's energy to the store a "
             "second time")
    if forced:
        if agent_answers(agent_url, token):
            return f"--embedded, but an agent answers at {agent_url}: {twice}"
        return None
    if port_taken(agent_url):
        return (f"something listens at {agent_url} but does not answer as a joulestat "
                f"agent; if an agent runs there, {twice} (check {ENV_AGENT_URL} and "
                f"--api-token)")
    if agent_url.rstrip("/") != DEFAULT_AGENT_URL and agent_answers(DEFAULT_AGENT_URL, token):
        return (f"no agent at {agent_url} ({ENV_AGENT_URL}), but one answers at "
                f"{DEFAULT_AGENT_URL}: {twice}; point {ENV_AGENT_URL} at it")
    return None
