"""A script that runs CodeCarbon's own offline tracker over a busy loop, for the tests that
import the ``emissions.csv`` it writes into its working folder."""

from __future__ import annotations

CODECARBON_RUN = """
import time
from codecarbon import OfflineEmissionsTracker

tracker = OfflineEmissionsTracker(country_iso_code="FRA", measure_power_secs=1,
                                  output_dir=".", project_name={project!r},
                                  log_level="error", save_to_api=False)
tracker.start()
end = time.time() + {seconds}
n = 0
while time.time() < end:
    n += 1
tracker.stop()
"""


def codecarbon_script(project: str, seconds: float) -> str:
    """``python -c`` code: project ``project`` busy for ``seconds``, tracked from France."""
    return CODECARBON_RUN.format(project=project, seconds=seconds)
