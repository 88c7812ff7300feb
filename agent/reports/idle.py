"""Which idle policy a job's energy was attributed under, in words every view shares.

Why: on a VM most of a small job's energy can be the node's idle power (a constant DRAM
figure) carried by the lone job. The same 6 s job read 90.0 J under ``--idle-policy
share`` and 14.9 J under ``exclude``, and nothing said which applied, so a per-unit
figure could not be read. Every comparison and report therefore shows energy twice
(total, and dynamic: the part above idle) and names the policy with these words:

* ``share``: the node's idle power was split among the jobs running
  (:mod:`joulestat.attribution.shares`), so a lone job carries the whole node;
* ``exclude``: CPU, DRAM and network idle power stayed unattributed, so the job carries
  what its work added (plus the idle power of accelerators it held);
* not recorded: a job measured before the agent recorded its policy, or imported.

The policy is the agent's record of the job (its ``agent_labels``, read by
:func:`recorded_idle_policy`), never guessed from the figures. A group of jobs measured
under different policies reads :data:`MIXED`.
"""

from __future__ import annotations

from collections.abc import Iterable

from joulestat.attribution.shares import IDLE_POLICIES, IdlePolicy

__all__ = ["IDLE_POLICY_KEY", "MIXED", "NOT_RECORDED", "common_policy", "idle_policy_of",
           "policy_words", "recorded_idle_policy"]

IDLE_POLICY_KEY = "idle_policy"  # the agent's label that records it
MIXED = "mixed"  # jobs under different policies (or some not recorded) in one figure
NOT_RECORDED = "idle policy not recorded"
_WORDS = {
    IdlePolicy.SHARE.value: "idle policy share: the node's idle power is split among the "
                            "jobs running, so a lone job carries all of it",
    IdlePolicy.EXCLUDE.value: "idle policy exclude: CPU, DRAM and network idle power "
                              "stays unattributed, so a job carries what its work added",
    MIXED: "idle policy mixed: these jobs were measured under different idle policies",
}


def recorded_idle_policy(agent_labels: dict[str, str] | None) -> str | None:
    """The policy the agent recorded in a job's ``agent_labels`` (``share`` or
    ``exclude``); None when it recorded none or something this version does not know."""
    policy = (agent_labels or {}).get(IDLE_POLICY_KEY)
    return policy if policy in IDLE_POLICIES else None


def idle_policy_of(job: object) -> str | None:
    """The idle policy of a job as the store reads it (any of its read models): from the
    ``agent_labels`` the agent recorded for it; None for a job that has none."""
    return recorded_idle_policy(getattr(job, "agent_labels", None))


def common_policy(policies: Iterable[str | None]) -> str | None:
    """The one policy of several jobs' figures: theirs when they all agree (None when
    none was recorded), :data:`MIXED` when they differ."""
    found = set(policies)
    if len(found) > 1:
        return MIXED
    return found.pop() if found else None


def policy_words(policy: str | None) -> str:
    """A sentence part naming ``policy`` and what it means for the figures beside it."""
    return _WORDS.get(policy or "", NOT_RECORDED)
