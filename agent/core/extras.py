"""Optional libraries and the pip extra that installs each, asked for in one place.

The base install is what the agent and the client need; the dashboard (Streamlit), a
PostgreSQL store (psycopg), PDF reports (reportlab) and the accelerator vendor libraries
are extras (pyproject ``[project.optional-dependencies]``). A command that needs one
asks here, so a user without it reads one line naming the extra to install, written
the same way everywhere, instead of a ``ModuleNotFoundError`` traceback from deep inside
the command.

:class:`MissingExtraError` is a :class:`~joulestat.core.errors.ConfigError`: the CLI
prints it as ``joulestat COMMAND: MESSAGE`` and exits 2, like any setting it cannot use.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from enum import StrEnum
from types import ModuleType

from joulestat.core.errors import ConfigError


class Extra(StrEnum):
    """The extras of pyproject's ``[project.optional-dependencies]`` that code asks for."""

    DASHBOARD = "dashboard"
    POSTGRES = "postgres"
    PDF = "pdf"
    DEMO = "demo"
    NVIDIA = "nvidia"
    AMD = "amd"
    GAUDI = "gaudi"
    EXAMPLES = "examples"
    OTEL = "otel"
    HF = "hf"


def install_hint(extra: Extra) -> str:
    """``pip install 'joulestat[EXTRA]'`` (quoted: shells glob square brackets)."""
    return f"pip install 'joulestat[{extra.value}]'"


class MissingExtraError(ConfigError):
    """An optional library is not installed; the message names the extra to install."""

    def __init__(self, what: str, extra: Extra, module: str) -> None:
        super().__init__(f"{what} needs the {extra.value} extra: {install_hint(extra)}")
        self.what = what
        self.extra = extra
        self.module = module


def _is_missing(exc: ImportError, module: str) -> bool:
    """Whether ``exc`` says ``module`` (or a package above it) is absent, as opposed to an
    installed module failing on an import of its own, which must stay visible."""
    name = exc.name or ""
    return bool(name) and (module == name or module.startswith(name + "."))


def require(module: str, extra: Extra, what: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtraError` when it is not installed.

    ``what`` is the thing that needs it, as the message's subject: "a PDF report".
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if _is_missing(exc, module):
            raise MissingExtraError(what, extra, module) from None
        raise


def require_installed(modules: Iterable[str], extra: Extra, what: str) -> None:
    """Like :func:`require` for top-level ``modules``, found without importing them: for a
    command that hands them to another process (``joulestat dashboard`` execs Streamlit,
    whose import alone takes a second)."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(what, extra, module)


__all__ = ["Extra", "MissingExtraError", "install_hint", "require", "require_installed"]
