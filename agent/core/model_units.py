"""Per-model units: how one process serving several models says what each model did.

A server process has one energy figure, however many models it serves; what each model
cost can only come from what each kept the process busy with. So the client (and any
program speaking the job API) counts two things per model, as units with a reserved
encoding, ``<unit>@<model>``:

* ``inference@model-a``: work done by that model (any unit word: ``token@model-a``);
  the registry also adds it to the job's plain unit (``inference``), so the job's own
  per-unit figures stay whole and a caller never counts twice;
* ``busy_s@model-a``: seconds the process spent serving that model (``busy_s`` is
  reserved: it is never a plain unit).

The encoding travels through the API and the store unchanged (``job_units`` rows, no
schema of their own); :mod:`joulestat.store.model_split` reads it back and splits the job's
energy among the models by busy time. Everything that lists a job's ordinary units
leaves the encoded keys out (:func:`joulestat.store.model_split.ordinary_units`), so they
never show as units of their own.

Pure Python, no joulestat imports: the client, the registry and the store all use it.
"""

from __future__ import annotations

import re

SEPARATOR = "@"
BUSY = "busy_s"  # the reserved unit of a model's busy seconds
# The units a serving engine's metrics count per model (joulestat.runtime.serving), and
# which the reports read a serving job's steady-state figures per
# (joulestat.reports.serving_figures).
OUTPUT_TOKEN, PROMPT_TOKEN, REQUEST = "output_token", "prompt_token", "request"
MAX_MODEL_CHARS = 64
MAX_MODELS_PER_JOB = 32
# Letters, digits and . _ : / + - (Hugging Face "org/name", Ollama "llama3:8b"); no "@",
# so a key splits at its only separator.
MODEL_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._:/+-]{{0,{MAX_MODEL_CHARS - 1}}}$")
_UNIT_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # joulestat.core.validation.UNIT_RE


def validate_model(model: object) -> str:
    """``model`` if it is a model name, else ValueError saying what one looks like."""
    if not isinstance(model, str) or not MODEL_RE.match(model):
        raise ValueError(f"model: 1-{MAX_MODEL_CHARS} characters of letters, digits and "
                         f". _ : / + -, starting with a letter or digit; got {model!r}")
    return model


def model_key(unit: str, model: str) -> str:
    """The unit key that counts ``unit`` for ``model``: ``inference@model-a``."""
    return f"{unit}{SEPARATOR}{model}"


def is_model_key(key: str) -> bool:
    return SEPARATOR in key


def split_key(key: str) -> tuple[str, str] | None:
    """``(unit, model)`` of an encoded key, None for an ordinary unit; ValueError for a
    key with ``@`` that is not ``<unit>@<model>``, or for ``busy_s`` alone."""
    if SEPARATOR not in key:
        if key == BUSY:
            raise ValueError(f"unit: {BUSY!r} is reserved for a model's busy seconds "
                             f"({BUSY}@<model>, or count(..., model=..., busy_s=...))")
        return None
    unit, _sep, model = key.partition(SEPARATOR)
    if not _UNIT_RE.match(unit) or not MODEL_RE.match(model):
        raise ValueError(f"unit: {key!r} has '@', which only a per-model unit may have: "
                         "<unit>@<model>, a lowercase word then a model name of letters, "
                         f"digits and . _ : / + - (e.g. inference@bert-base, {BUSY}@bert-base)")
    return unit, model
