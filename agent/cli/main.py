"""The ``joulestat`` command: one subcommand per module in ``joulestat.cli``.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` on it. Imports stay inside the modules so ``joulestat estimate``
does not pay for SQLAlchemy and the agent does not pay for Streamlit; a command line
that names its command imports that command's module alone (the others' cost every
command 60 to 70 ms here), one that does not (``joulestat --help``, a mistyped
command) all of them, so that argparse lists them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from joulestat.core.errors import ConfigError
from joulestat.core.redact import redact_text
from joulestat.core.version import __version__

COMMANDS = ("agent", "run", "jobs", "estimate", "db", "dashboard", "compare", "report",
            "import_", "instances", "demo")
# A command whose module's name is not its own (``import`` is a Python keyword).
_MODULES = {"import": "import_"}


class _Parser(argparse.ArgumentParser):
    """argparse echoes bad values in its errors: a mistyped line with a store URL
    would print its password."""

    def error(self, message: str) -> NoReturn:
        super().error(redact_text(message))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``joulestat`` parser, with the command ``argv`` names (every command when
    ``argv`` is None or names none)."""
    parser = _Parser(
        prog="joulestat",
        description="Measure the energy, carbon and cost of ML jobs on this node.",
        epilog="Every setting can also come from env JOULESTAT_<NAME> or a TOML file "
        "(--config); flags win over env, env over the file.",
    )
    parser.add_argument("--version", action="version", version=f"joulestat {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # A command's name, not its module's (``import_`` is no command: all, to list them).
    named = _MODULES.get(argv[0], None if argv[0] in _MODULES.values() else argv[0]
                         ) if argv else None
    for name in (named,) if named in COMMANDS else COMMANDS:
        importlib.import_module(f"joulestat.cli.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"joulestat {args.command}: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `joulestat jobs --json | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
