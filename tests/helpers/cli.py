"""The ``joulestat`` command run in this process, through its own entry point.

A test of what a command prints or how it treats its arguments needs no process: starting
one costs about 0.9 s of imports before the command does anything. :func:`invoke` calls
:func:`joulestat.cli.main.main` with the given argv and gives back what a process would
have shown (exit status, stdout, stderr), with the process-wide state a command touches
set up as a new process would have it and put back afterwards:

- ``os.environ`` is exactly ``env`` for the call (default :func:`cli_env`: the test's
  environment without the developer's ``JOULESTAT_*``), as ``subprocess.run(env=...)``;
- stdout and stderr are fresh buffers (``sys.stdout.buffer`` too, for binary reports);
  stdin is ``input`` (or empty) and is not a terminal;
- logging starts as in a new interpreter (no root handler, root at WARNING), so the
  command's own ``setup_logging`` writes its log lines to the captured stderr, and every
  logger's level is restored after the call;
- ``SystemExit`` (argparse's errors, ``--help``) becomes the exit status.

What only a process shows (signals, exit on a broken pipe, what a fresh interpreter
imports, the installed console script, the environment a child inherits) stays in
tests/system/ with :func:`tests.helpers.agent_process.run_cli`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class CliResult:
    """What a finished command showed: the fields of ``subprocess.CompletedProcess``
    that tests read, so a test reads the same either way."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes


def cli_env(**extra: str) -> dict[str, str]:
    """This process's environment minus any ``JOULESTAT_*`` of the developer's, and never
    a cloud metadata probe, plus ``extra``: what :func:`invoke` runs under by default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOULESTAT_")}
    env["JOULESTAT_CLOUD_METADATA"] = "false"
    env.update(extra)
    return env


class _Stdin(io.StringIO):
    def isatty(self) -> bool:
        return False


def _text_stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True)


def _read(stream: io.TextIOWrapper) -> bytes:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue()


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _fresh_logging() -> Iterator[None]:
    """Logging as a new interpreter has it for the call, as it was afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
              if isinstance(logger, logging.Logger)}
    root.handlers = []
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers = handlers
        root.setLevel(level)
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                logger.setLevel(levels.get(name, logging.NOTSET))


def invoke(*args: str, env: Mapping[str, str] | None = None, input: str = "") -> CliResult:
    """Run ``joulestat ARGS`` in this process; see the module's docstring."""
    from joulestat.cli.main import main

    stdout, stderr = _text_stream(), _text_stream()
    saved = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = stdout, stderr, _Stdin(input)
    try:
        with _environment(cli_env() if env is None else env), _fresh_logging():
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
    finally:
        sys.stdout, sys.stderr, sys.stdin = saved
    out, err = _read(stdout), _read(stderr)
    return CliResult(tuple(args), int(code), out.decode("utf-8", "replace"),
                     err.decode("utf-8", "replace"), out)
