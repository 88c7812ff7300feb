"""What to say when a file joulestat ships is not where the package is.

A missing data file has two causes: an install that left it out, or a ``joulestat``
imported from somewhere else than the install, e.g. a folder named ``joulestat`` (a
checkout) in the current directory, which Python takes for a namespace package ahead of
an editable install's import hook (issue 46). The advice names where the package was
imported from, so a user can tell which.
"""

from __future__ import annotations

import sys


def missing_data_advice() -> str:
    """``joulestat's package data is incomplete ...``: where ``joulestat`` was imported
    from and what to do."""
    package = sys.modules.get("joulestat")  # imported already: this module is in it
    where = ", ".join(str(p) for p in getattr(package, "__path__", [])) or "?"
    return (f"joulestat's package data is missing where joulestat was imported from "
            f"({where}): if that is a folder named joulestat in the current directory, "
            "run from another directory; else reinstall joulestat")
