"""The dashboard's served latency in a real browser: Compare's latency table beside the
energy per output token, and Load curve's energy-and-latency chart, on stores of serving
jobs with known figures (tests/helpers/serving_store.py). Screenshots go to
docs/screenshots with JOULESTAT_SAVE_SCREENSHOTS=1."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.browser import chromium, serve
from tests.helpers.serving_store import load_store, serving_store

pytestmark = pytest.mark.slow
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _shoot(browser, url: str, tmp_path: Path, name: str, path: str,
           expected: list[str]) -> str:
    with serve(url) as base:
        text = browser.open(base + path, expected)
        errors = browser.evaluate("document.querySelectorAll('[data-testid=stException], "
                                  "[data-testid=stAlertContentError]').length")
        assert errors == 0 and "Traceback" not in text, text[:2000]
        shot = tmp_path / f"{name}.png"
        browser.screenshot(shot)
    assert shot.stat().st_size > 20_000
    if os.environ.get("JOULESTAT_SAVE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOTS / shot.name)
    return text


def test_compare_and_load_curve_show_energy_per_token_with_latency(tmp_path):
    setups = f"sqlite:///{tmp_path / 'setups.db'}"
    serving_store(setups)
    levels = f"sqlite:///{tmp_path / 'levels.db'}"
    load_store(levels)
    with chromium() as browser:
        text = _shoot(browser, setups, tmp_path, "serving-compare", "/compare?unit=output_token",
                      ["Served latency from the serving engine", "g5.xlarge",
                       "p4d.24xlarge"])
        # (The tables are drawn on a canvas: their figures are in the AppTest tests,
        # tests/unit/dashboard/test_apptest.py; here, that the page draws them.)
        assert "ttft_p99=0.5" in text
        _shoot(browser, levels, tmp_path, "serving-load-curve", "/load_curve?unit=output_token",
               ["and ttft p99 against load", "Energy per output_token",
                "dotted line with squares, on the right axis"])
        # (The caption is waited for, not read once: it comes after the chart, and the page
        # may still be drawing when the subheader shows, as in CI at c178fd9.)
