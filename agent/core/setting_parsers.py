"""Parsers for setting values: each takes what a flag, env variable or TOML key gave and
returns the value, or raises ``ValueError`` with a message a user can act on.

:mod:`joulestat.runtime.settings` says which parser each setting uses and adds where the value came
from to the message. Nothing here imports the rest of joulestat, so any module can read a
duration or a size the way the settings do.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any


def number_in(kind: type, low: float | None = None, high: float | None = None, unit: str = ""):
    """A parser of ``kind`` (``int``, ``float``) numbers in ``low..high``; NaN and bools fail."""

    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
        if number != number:  # NaN
            raise ValueError("expected a number, got NaN")
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"must be between {low} and {high}{unit}, got {value}")
        return number

    return parse


def parse_text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r}")
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    if any(ord(ch) < 32 for ch in text):
        raise ValueError("must not contain control characters")
    return text


def parse_optional_text(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return parse_text(value)


def parse_directory(value: Any) -> Path:
    path = Path(parse_text(value))
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    return path


def parse_existing_file(value: Any) -> Path | None:
    if value is None:
        return None
    path = Path(parse_text(value))
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file")
    return path


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


_DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_s(value: Any) -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``7d`` -> seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = parse_text(value).lower()
        unit = text[-1] if text[-1] in _DURATION_UNITS_S else "s"
        number = text[:-1] if text[-1] in _DURATION_UNITS_S else text
        try:
            seconds = float(number) * _DURATION_UNITS_S[unit]
        except ValueError:
            raise ValueError(
                f"expected a duration like 90s, 15m, 6h or 7d, got {value!r}"
            ) from None
    if seconds <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


def parse_retention_s(value: Any) -> float:
    seconds = parse_duration_s(value)
    if seconds < 600:
        raise ValueError(f"must be at least 10m so minutes can be rolled up, got {value!r}")
    return seconds


_SIZE_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3,
               "gib": 1024**3}


def parse_size_bytes(value: Any) -> int:
    """``268435456``, ``256MiB``, ``1G`` -> bytes (binary prefixes)."""
    text = str(value).strip().lower().replace(" ", "")
    number = text.rstrip("kmgib")
    unit = text[len(number):]
    if unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size like 256MiB or 1GiB, got {value!r}")
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise ValueError(f"expected a size like 256MiB or 1GiB, got {value!r}") from None
    if size < 1024 * 1024:
        raise ValueError(f"must be at least 1MiB, got {value!r}")
    return size


def parse_optional_path(value: Any) -> Path | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return Path(parse_text(value)).expanduser()


def parse_db_url(value: Any) -> str:
    url = parse_text(value)
    if "://" not in url:
        raise ValueError(
            f"expected a SQLAlchemy URL such as sqlite:///path.db or "
            f"postgresql+psycopg://user@host/db, got {value!r}"
        )
    return url


def parse_log_level(value: Any) -> str:
    level = parse_text(value).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got {value!r}")
    return level


def optional_number_in(low: float, high: float):
    """Like :func:`number_in` (floats), with nothing or blank text meaning ``None``."""

    parse_in_range = number_in(float, low, high)

    def parse(value: Any) -> float | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        return parse_in_range(value)

    return parse


def one_of(*choices: str):
    """A parser of one of ``choices``, in any case."""

    def parse(value: Any) -> str:
        text = parse_text(value).lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return parse


def member_of(choices: type[StrEnum]):
    """A parser of one member of the string enum ``choices`` (a closed set, such as the
    idle policy), by its value in any case; the error lists the values."""
    text = one_of(*(member.value for member in choices))

    def parse(value: Any) -> StrEnum:
        return choices(text(value))

    return parse


def parse_http_url(value: Any) -> str:
    url = parse_text(value).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    return url
