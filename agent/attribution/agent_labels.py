"""What joulestat records about how it measured a job: the job's *agent labels*.

Why apart from the job's labels (issue 24): a job's ``labels`` are what its user said
about it (``--label``, ``track(labels=...)``, a scheduler's names for it); reports show
them in their Labels row, the dashboard filters by them and ``compare --by label:KEY``
groups by them and tells runs of one name apart by the labels that differ. What
joulestat noted for itself used to be written among them (``cpu_source``), so it read as
if the user had said it, took one of the user's :data:`MAX_LABELS`, and split runs that
differed only in how they were measured. Agent labels are stored in a column of their
own (``jobs.agent_labels``), never count against the user's
limit, and are shown apart ("Recorded by joulestat"). Their keys are a closed set, so a
reader can trust that each one means what this module says:

* ``cpu_source`` (:data:`CPU_SOURCE`): where ``joulestat run`` had the job's CPU time
  read: ``cgroup v2 /…/joulestat-job-<id>``, ``cgroup v1 cpuacct /…`` or
  ``process tree`` (:mod:`joulestat.host.cgroup_jobs`). Given by the wrapper when it
  registers the job; of a job run on several nodes, the value the last node reported.
* ``idle_policy`` (:data:`IDLE_POLICY`): the idle policy (``--idle-policy``,
  ``share`` or ``exclude``) under which the agent, or the embedded run, that attributed
  the job's energy divided idle power. Recorded by the attributing process itself on
  every job it holds (registered through the API by ``track()`` or ``joulestat run``,
  discovered, or restored after a restart); no registration may give it. A job
  attributed under both policies (nodes with different settings, or an agent restarted
  with another policy while the job ran) is :data:`MIXED`, and stays so: its idle
  energy is neither policy's, and saying either would be wrong for part of it.

* ``serving_metrics`` (:data:`SERVING_METRICS`): the Prometheus endpoint of the serving
  engine (vLLM, TGI, SGLang) whose token and request counters the agent reads into the
  job every tick (``joulestat run --serving-metrics``, ``track(serving_metrics=...)``,
  the API's ``serving_metrics``; :mod:`joulestat.runtime.serving`): how the job's
  ``output_token``, ``prompt_token`` and ``request`` units were counted, and why its
  energy is split among its models by their tokens. An ``http(s)://`` URL, on the job's
  node unless the agent allows more (:mod:`joulestat.host.serving_address`).

Read the policy with :func:`idle_policy_of`; ``None`` means unknown (jobs stored before
joulestat recorded it, CodeCarbon imports, reports made before it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joulestat.attribution.shares import IDLE_POLICIES, IdlePolicy
from joulestat.core.validation import JobError, validate_labels

__all__ = ["AGENT_LABEL_KEYS", "CPU_SOURCE", "IDLE_POLICY", "MIXED", "REGISTERED_KEYS",
           "SERVING_METRICS", "idle_policy_of", "merge_agent_labels", "policy_labels",
           "validate_agent_labels", "validate_serving_url"]

CPU_SOURCE = "cpu_source"
IDLE_POLICY = "idle_policy"
SERVING_METRICS = "serving_metrics"
AGENT_LABEL_KEYS = (CPU_SOURCE, IDLE_POLICY, SERVING_METRICS)
# The keys a registration may give (the API's ``agent_labels``, the registry's); the
# idle policy is the attributing process's own, so nobody else can say it.
REGISTERED_KEYS = (CPU_SOURCE, SERVING_METRICS)
# A job's idle_policy once it was attributed under more than one policy.
MIXED = "mixed"
IDLE_POLICY_VALUES = (*IDLE_POLICIES, MIXED)
FIELD = "agent_labels"


def validate_agent_labels(agent_labels: Any, keys: tuple[str, ...] = REGISTERED_KEYS
                          ) -> dict[str, str]:
    """Agent labels as labels are checked (text, no control characters, the same
    lengths), keys among ``keys`` only, and an ``idle_policy`` one of
    :data:`IDLE_POLICY_VALUES`; :class:`JobError` naming the field otherwise."""
    clean = validate_labels(agent_labels, FIELD, limit=len(AGENT_LABEL_KEYS))
    for key in clean:
        if key in keys:
            continue
        if key in AGENT_LABEL_KEYS:
            raise JobError(f"{FIELD}.{key}: recorded by the agent that attributes the job, "
                           f"not given; a registration may give {', '.join(keys)}")
        raise JobError(f"{FIELD}: {key!r} is not an agent label (those are "
                       f"{', '.join(AGENT_LABEL_KEYS)}); a job's own labels go in labels")
    url = clean.get(SERVING_METRICS)
    if url is not None:
        validate_serving_url(url)
    policy = clean.get(IDLE_POLICY)
    if policy is not None and policy not in IDLE_POLICY_VALUES:
        raise JobError(f"{FIELD}.{IDLE_POLICY}: expected one of "
                       f"{', '.join(IDLE_POLICY_VALUES)}, got {policy!r}")
    return clean


def validate_serving_url(url: Any, field: str = f"{FIELD}.{SERVING_METRICS}") -> str:
    """``url`` when it is an ``http(s)://host[:port]/path`` URL, else :class:`JobError`
    naming ``field`` (the agent fetches it, so nothing else may pass). A link-local
    address is refused here already; the rest of the address rule needs the agent's
    settings, so the agent checks it (:mod:`joulestat.host.serving_address`)."""
    from urllib.parse import urlsplit

    from joulestat.host.serving_address import link_local_literal

    if not isinstance(url, str):
        raise JobError(f"{field}: expected a URL string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise JobError(f"{field}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise JobError(f"{field}: expected http(s)://HOST[:PORT]/PATH (the server's "
                       f"Prometheus endpoint, e.g. http://127.0.0.1:8000/metrics), got "
                       f"{url[:100]!r}")
    if link_local_literal(parts.hostname):
        raise JobError(f"{field}: {parts.hostname} is a link-local address (169.254.0.0/16, "
                       "fe80::/10, where cloud metadata services answer): serving metrics "
                       "are never fetched from one")
    return url


def policy_labels(idle_policy: IdlePolicy | str) -> dict[str, str]:
    """The agent labels an attributing process records on every job it holds."""
    return {IDLE_POLICY: IdlePolicy(idle_policy).value}


def merge_agent_labels(stored: Mapping[str, str], new: Mapping[str, str]) -> dict[str, str]:
    """``stored`` updated by ``new`` key by key (as labels merge), except that two
    different idle policies make :data:`MIXED`, for good. The store's upsert does the
    same in SQL (:mod:`joulestat.store.rows`), so nodes flushing at once agree."""
    merged = {**stored, **new}
    old, given = stored.get(IDLE_POLICY), new.get(IDLE_POLICY)
    if old is not None and given is not None and old != given:
        merged[IDLE_POLICY] = MIXED
    return merged


def idle_policy_of(agent_labels: Mapping[str, str]) -> str | None:
    """The idle policy a job's energy was attributed under: ``"share"``, ``"exclude"``,
    ``"mixed"`` (both, on different nodes or across a restart), or ``None`` when not
    known (stored before joulestat recorded it, imported from CodeCarbon or from an
    older report). Takes a read model's ``agent_labels`` (``JobTotals``, ``JobSummary``,
    ``JobDetail`` of :mod:`joulestat.store.jobs`) or a report's ``job.agent_labels``."""
    policy = agent_labels.get(IDLE_POLICY)
    return policy if policy in IDLE_POLICY_VALUES else None

