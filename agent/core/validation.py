"""What every way a job comes in must pass: names, kinds, ids, labels, pids and units.

The HTTP API, ``joulestat run``, the in-process client, discovery and report imports
all validate here (the registry calls these), so a
name with a path separator or a label with a control character is refused the same way
everywhere, with a message saying which field is wrong.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from joulestat.core.model_units import BUSY, SEPARATOR, model_key, split_key, validate_model

KINDS = ("training", "inference", "other")
MAX_NAME_CHARS = 200
MAX_LABELS = 32
MAX_LABEL_KEY_CHARS = 64  # as LABEL_KEY_RE says; Prometheus-safe keys
MAX_LABEL_VALUE_CHARS = 256
MAX_PIDS = 1024
MAX_UNIT_COUNT = 1e15  # per call, and per job and unit in total
MAX_UNITS_PER_JOB = 32
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")  # MAX_LABEL_KEY_CHARS
UNIT_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
PID_MAX = 4_194_304  # Linux's pid_max ceiling (2^22)
# A model's busy seconds: at most this many requests in parallel for the job's wall time
# (plus BUSY_SLACK_S: a request timed from before the registration was answered).
MAX_BUSY_PARALLEL = 1024
BUSY_SLACK_S = 60.0
END_FUTURE_SLACK_S = 5.0  # an explicit end time may be this far ahead of the agent's clock


class JobError(ValueError):
    """Input a caller can fix; ``status`` is the HTTP status the API answers with."""

    status = 400


class JobNotFound(JobError):
    status = 404


class JobConflict(JobError):
    status = 409


class JobNotYours(JobError):
    """The caller may not do this to this job or these processes: it is not the job's
    registrant (no or a wrong ``job_token``), or the processes are not its to claim."""

    status = 403


class JobLimit(JobError):
    """The agent already tracks its maximum of live jobs (``--max-jobs``)."""

    status = 429


# Bidirectional controls: U+202E (right-to-left override) reverses what follows it in
# a terminal or a page, so `joulestat jobs` could show another name than the stored one.
BIDI_CONTROLS = frozenset({*map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)),
                           "\u200e", "\u200f", "\u061c"})
# Format characters kept: zero-width (non-)joiners are part of Persian, Indic scripts and
# emoji sequences, so refusing them would refuse ordinary names.
_ALLOWED_FORMAT = frozenset({"\u200c", "\u200d"})


def control_character(text: str) -> str | None:
    """The first character of ``text`` that is not text, as ``U+202E``, else None.

    Why: names and labels are printed in terminals, CSV files and pages; a control or
    bidirectional formatting character there changes what a reader sees. Refused: Unicode
    category Cc (C0/C1 controls, DEL), Cf (format: bidi controls, zero-width space, BOM,
    soft hyphen) except the zero-width joiners, and the line/paragraph separators (Zl, Zp).
    Letters of any script (é, 中文) are text."""
    for ch in text:
        if ch in BIDI_CONTROLS or (
                unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")
                and ch not in _ALLOWED_FORMAT):
            return f"U+{ord(ch):04X}"
    return None


def _control_message(field: str, text: str) -> str | None:
    found = control_character(text)
    if found is None:
        return None
    kind = "a bidirectional control" if chr(int(found[2:], 16)) in BIDI_CONTROLS else (
        "a control or format")
    return f"{field}: must not contain control characters ({kind} character {found})"


def validate_name(name: Any) -> str:
    if not isinstance(name, str):
        raise JobError(f"name: expected a string, got {type(name).__name__}")
    name = name.strip()
    if not name:
        raise JobError("name: must not be empty")
    if len(name) > MAX_NAME_CHARS:
        raise JobError(f"name: at most {MAX_NAME_CHARS} characters, got {len(name)}")
    message = _control_message("name", name)
    if message is not None:
        raise JobError(message)
    # "/" is allowed: Kubernetes names pods namespace/pod, and so do discovered jobs.
    if "\\" in name:
        raise JobError("name: must not contain a backslash")
    return name


MAX_INSTANCE_TYPE_CHARS = 64  # the longest cloud type names are about 30


def validate_instance_type(instance_type: Any) -> str:
    """The instance type a job says it runs as: a plain name (``g5.xlarge``,
    ``demo-1vcpu``), priced and compared like a node's own."""
    if not isinstance(instance_type, str):
        raise JobError(f"instance_type: expected a string, got {type(instance_type).__name__}")
    instance_type = instance_type.strip()
    if not instance_type:
        raise JobError("instance_type: must not be empty")
    if len(instance_type) > MAX_INSTANCE_TYPE_CHARS:
        raise JobError(f"instance_type: at most {MAX_INSTANCE_TYPE_CHARS} characters, got "
                       f"{len(instance_type)}")
    message = _control_message("instance_type", instance_type)
    if message is not None:
        raise JobError(message)
    if any(c in instance_type for c in "\\/,"):
        raise JobError("instance_type: must not contain '\\', '/' or ','")
    return instance_type


def validate_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise JobError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def validate_job_id(job_id: Any) -> str:
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        raise JobError(
            "job_id: 1-128 characters of letters, digits and . _ : @ -, starting with a "
            f"letter or digit; got {job_id!r}"
        )
    return job_id


def validate_labels(labels: Any, field: str = "labels", limit: int = MAX_LABELS
                    ) -> dict[str, str]:
    """Labels (or, with ``field`` and ``limit``, another map checked as labels are:
    :mod:`joulestat.attribution.agent_labels`); errors name ``field``."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise JobError(f"{field}: expected an object of strings, got {type(labels).__name__}")
    if len(labels) > limit:
        raise JobError(f"{field}: at most {limit}, got {len(labels)}")
    clean: dict[str, str] = {}
    for key, value in labels.items():
        # A refused key or value is shown cut short: an error must not echo a megabyte.
        if isinstance(key, str) and len(key) > MAX_LABEL_KEY_CHARS:
            raise JobError(f"{field}: key {key[:40]!r}... is {len(key)} characters, at most "
                           f"{MAX_LABEL_KEY_CHARS}")
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            shown = key[:40] if isinstance(key, str) else key
            raise JobError(f"{field}: key {shown!r} must match {LABEL_KEY_RE.pattern}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise JobError(f"{field}.{key}: expected a string, got {type(value).__name__}")
        text = str(value)
        if len(text) > MAX_LABEL_VALUE_CHARS:
            raise JobError(f"{field}.{key}: {len(text)} characters, at most "
                           f"{MAX_LABEL_VALUE_CHARS}")
        message = _control_message(f"{field}.{key}", text)
        if message is not None:
            raise JobError(message)
        clean[key] = text
    return clean


def validate_end_time(ended_at: Any, started_s: float, now_s: float) -> float:
    """When a job ended, as its caller says (``POST /v1/jobs/{id}/end``'s ``ended_at``):
    ``joulestat run`` sends its child's exit time, so an end that reaches the agent late
    (the agent restarting) is still recorded when it happened. Epoch seconds; an end
    more than :data:`END_FUTURE_SLACK_S` ahead of the agent's clock is refused (a caller
    on another clock, or a bug), and one before the job's start (a command that exited
    before its registration was answered) is taken as its start."""
    if isinstance(ended_at, bool) or not isinstance(ended_at, int | float) or not (
            math.isfinite(ended_at) and ended_at >= 0):
        raise JobError(f"ended_at: expected epoch seconds, got {ended_at!r}")
    if ended_at > now_s + END_FUTURE_SLACK_S:
        raise JobError(f"ended_at: {ended_at:.3f} is {ended_at - now_s:.1f} s ahead of the "
                       f"agent's clock (at most {END_FUTURE_SLACK_S:g} s)")
    return min(max(float(ended_at), started_s), now_s)


def validate_pids(pids: Any) -> set[int]:
    if pids is None:
        return set()
    if not isinstance(pids, list | tuple | set | frozenset):
        raise JobError(f"pids: expected a list of process ids, got {type(pids).__name__}")
    if len(pids) > MAX_PIDS:
        raise JobError(f"pids: at most {MAX_PIDS}, got {len(pids)}")
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
            raise JobError(f"pids: {pid!r} is not a process id (1..{PID_MAX})")
    return set(pids)


def check_claimable_pids(pids: Any, agent_pid: int | None, taken: Mapping[int, str]
                         ) -> set[int]:
    """The pids a registration through the API claims, refused (naming the pid) when one
    is init (pid 1: it would make the job every orphan's parent), the agent itself, or
    a process already in another running job (``taken``: pid -> job id), since each of
    those would take energy that is someone else's."""
    pid_set = validate_pids(pids)
    for pid in sorted(pid_set):
        if pid == 1:
            raise JobNotYours("pids: 1 is init; a job cannot claim it")
        if agent_pid is not None and pid == agent_pid:
            raise JobNotYours(f"pids: {pid} is the joulestat agent itself; a job cannot "
                              "claim it")
        if pid in taken:
            raise JobConflict(f"pids: process {pid} is already in job {taken[pid]!r}")
    return pid_set


def validate_units(unit: Any, count: Any) -> tuple[str, float]:
    """A unit (or a per-model unit, ``inference@model-a``: :mod:`joulestat.core.model_units`)
    and its count."""
    if isinstance(unit, str) and (SEPARATOR in unit or unit == BUSY):
        try:
            split_key(unit)
        except ValueError as exc:
            raise JobError(str(exc)) from None
    elif not isinstance(unit, str) or not UNIT_RE.match(unit):
        raise JobError(f"unit: a lowercase word ({UNIT_RE.pattern}), got {unit!r}")
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise JobError(f"count: expected a number, got {type(count).__name__}")
    if not math.isfinite(count) or count < 0 or count > MAX_UNIT_COUNT:
        raise JobError(f"count: a finite number between 0 and {MAX_UNIT_COUNT:g}, got {count}")
    return unit, float(count)


def validate_busy_total(busy_s: float, elapsed_s: float) -> None:
    """Refuse a model's busy seconds that no process could have spent: more than
    :data:`MAX_BUSY_PARALLEL` requests in parallel over the job's wall time so far.
    Why: busy time splits the job's energy among its models, so an absurd figure
    (1e15 s on a job a minute old) would give one model all of it."""
    limit_s = (max(elapsed_s, 0.0) + BUSY_SLACK_S) * MAX_BUSY_PARALLEL
    if busy_s > limit_s:
        raise JobError(f"busy_s: {busy_s:g} s in total is more than the job's "
                       f"{max(elapsed_s, 0.0):.0f} s (+{BUSY_SLACK_S:g} s) with "
                       f"{MAX_BUSY_PARALLEL} requests in parallel ({limit_s:g} s)")


def count_keys(unit: Any, count: Any, model: Any = None, busy_s: Any = None
               ) -> list[tuple[str, float]]:
    """The unit keys and amounts that ``count(unit, count, model=, busy_s=)`` adds.

    Without ``model``, ``[(unit, count)]``. With it, the per-model keys
    (:mod:`joulestat.core.model_units`): ``inference@model`` for ``count`` (left out when 0;
    the registry adds it to the plain unit too) and ``busy_s@model`` for ``busy_s``. A
    unit holding ``@`` is refused here, so the model is always named apart.
    """
    if isinstance(unit, str) and SEPARATOR in unit:
        raise JobError(f"unit {unit!r}: name the model apart, e.g. count("
                       f"{unit.partition(SEPARATOR)[0]!r}, n, model=...)")
    unit, amount = validate_units(unit, count)
    if model is None:
        if busy_s is not None:
            raise JobError("busy_s: needs model=..., the model the process was busy with")
        return [(unit, amount)]
    try:
        model = validate_model(model)
    except ValueError as exc:
        raise JobError(str(exc)) from None
    keys = [(model_key(unit, model), amount)] if amount > 0 else []
    if busy_s is not None:
        try:
            keys.append(validate_units(model_key(BUSY, model), busy_s))
        except JobError as exc:
            raise JobError(str(exc).replace("count:", "busy_s:", 1)) from None
    return keys
