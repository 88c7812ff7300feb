"""``python -m agent`` runs the ``joulestat`` command."""

from __future__ import annotations

import sys

from agent.cli import main

sys.exit(main())
