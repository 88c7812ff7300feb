"""``python -m joulestat`` runs the ``joulestat`` command."""

from __future__ import annotations

import sys

from joulestat.cli.main import main

sys.exit(main())
