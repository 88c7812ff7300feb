"""Checked access to a sensor checkpoint read back from storage.

A checkpoint comes back from a database row written by another process, possibly by an
older or newer agent, possibly damaged. ``restore`` must never crash on it, and must not
accept a value of the wrong kind either (a string where µJ belong would poison every later
delta), so each field is fetched through these helpers, which raise :class:`BadState` with
a message naming the field; sensors catch it per item, log it and skip that item.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

D = TypeVar("D")


class BadState(ValueError):
    """One checkpoint item is missing a field or holds a value of the wrong kind."""


def get_map(state: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``state[key]`` as a dict with string keys (``state`` itself must be a dict)."""
    if not isinstance(state, Mapping):
        raise BadState(f"not an object: {_show(state)}")
    value = state.get(key)
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadState(f"{key!r} is not an object: {_show(value)}")
    return value


def get_int(state: Mapping[str, Any], key: str) -> int:
    """``state[key]`` as a non-negative int (a bool, float or string is refused)."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadState(f"{key!r} is not a non-negative integer: {_show(value)}")
    return value


def get_float(state: Mapping[str, Any], key: str, *, non_negative: bool = True) -> float:
    """``state[key]`` as a finite float; JSON may hand back ``1`` for ``1.0``, so ints pass."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadState(f"{key!r} is not a finite number: {_show(value)}")
    if non_negative and value < 0:
        raise BadState(f"{key!r} is negative: {value!r}")
    return float(value)


def restore_each(state: Mapping[str, Any], key: str, present: Mapping[str, D],
                 restore_one: Callable[[D, dict[str, Any]], None], log: logging.Logger,
                 what: str, noun: str) -> None:
    """Hand each saved item of ``state[key]`` to ``restore_one(device, item)`` with the
    device of the same name in ``present``; the rest is logged as ``what`` checkpoint
    warnings and skipped: a damaged map, a device not present now, an item that is not
    an object or that ``restore_one`` refuses with :class:`BadState` (raised before it
    changes anything, so a refused item leaves the device as it was)."""
    try:
        saved = get_map(state, key)
    except BadState as exc:
        log.warning("%s checkpoint ignored: %s", what, exc)
        return
    for name, item in saved.items():
        device = present.get(name)
        if device is None:
            log.warning("%s checkpoint: %s %s is not present now; its state ignored",
                        what, noun, name)
            continue
        try:
            if not isinstance(item, dict):
                raise BadState(f"not an object: {type(item).__name__}")
            restore_one(device, item)
        except BadState as exc:
            log.warning("%s checkpoint: %s %s ignored: %s", what, noun, name, exc)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
