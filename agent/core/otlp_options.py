"""The OTLP export's options as the settings table parses them (``--otlp-endpoint``,
``--otlp-protocol``, ``--otlp-headers``).

Apart from the exporter (:mod:`joulestat.outputs.otlp`) because every command, the
in-process client included, loads the settings table: parsing an option must not load
an output. Standard library only.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from joulestat.core.redact import redact_text

__all__ = ["OtlpProtocol", "parse_endpoint", "parse_headers"]


class OtlpProtocol(StrEnum):
    """``--otlp-protocol``: the values of OTEL_EXPORTER_OTLP_PROTOCOL that joulestat
    speaks (``http/json`` is not one: protobuf is smaller and every collector takes it)."""

    HTTP_PROTOBUF = "http/protobuf"
    GRPC = "grpc"



def parse_endpoint(value: Any) -> str:
    """``--otlp-endpoint``: an http:// or https:// URL with a host (a port, and for
    OTLP/HTTP a path, optional)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
    url = value.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc}): {redact_text(url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL with a host, got "
                         f"{redact_text(url)!r}")
    return url


def parse_headers(value: Any) -> tuple[tuple[str, str], ...]:
    """``--otlp-headers``: ``key=value,key2=value2``, the format of
    OTEL_EXPORTER_OTLP_HEADERS (values percent-encoded). A value is never echoed in an
    error: headers carry API keys."""
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, str):
        pairs = []
        for index, item in enumerate(value.split(","), 1):
            if not item.strip():
                continue
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"entry {index} has no '=': expected key=value,key2=value2")
            pairs.append((key.strip(), urllib.parse.unquote(raw.strip())))
    else:
        raise ValueError("expected key=value,key2=value2")
    for key, header_value in pairs:
        if not key or any(c.isspace() or c in ':"(),/;<=>?@[\\]{}' or ord(c) < 33
                          for c in key):
            raise ValueError(f"{key!r} is not a header name")
        if any(c in "\r\n" for c in header_value):
            raise ValueError(f"the value of {key!r} holds a line break")
    return tuple(pairs)
