"""Exceptions that more than one layer raises or catches.

An exception lives here when a lower layer raises it and a higher one catches it: the
sensor factory and the store bootstrap stop a command with :class:`ConfigError`, which
the CLI turns into a message and exit status 2. Declaring it in :mod:`joulestat.runtime.settings`
made them import the settings module that sits above them (``tests/unit/project/test_layers.py``
keeps the layers apart). Exceptions used within one package stay in that package.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting has a value the command cannot use."""


__all__ = ["ConfigError"]
