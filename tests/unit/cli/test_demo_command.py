"""`joulestat demo`'s checks and helpers that need no process: bad options stop it
before anything starts, percentiles are nearest-rank, the progress bar stays quiet off
a terminal."""

from __future__ import annotations

import pytest

from joulestat.cli import demo
from joulestat.cli.main import main
from joulestat.demo.training_serving import nearest_rank


@pytest.mark.parametrize(("argv", "message"), [
    (["--concurrency", "0,4"], "--concurrency '0,4': expected numbers 1..256"),
    (["--concurrency", "four"], "--concurrency 'four': expected numbers"),
    (["--seconds", "0.5"], "--seconds 0.5: expected 1..600"),
])
def test_bad_options_stop_the_demo_before_it_starts(argv, message, capsys, monkeypatch):
    monkeypatch.setenv("JOULESTAT_AGENT_URL", "http://127.0.0.1:1")
    assert main(["demo", *argv]) == 2
    assert message in capsys.readouterr().err


def test_percentiles_are_nearest_rank():
    ordered = [float(i) for i in range(1, 101)]  # 1..100
    assert nearest_rank(ordered, 50) == 50.0
    assert nearest_rank(ordered, 99) == 99.0
    assert nearest_rank([7.0], 99) == 7.0
    assert nearest_rank([1.0, 2.0, 3.0], 50) == 2.0


def test_torch_is_asked_for_by_name_only_when_installed(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: None if name == "torch" else real(name))
    assert demo._backend("auto") == "numpy"
    with pytest.raises(demo.ConfigError, match="PyTorch is not installed"):
        demo._backend("torch")


def test_progress_prints_a_line_per_step_off_a_terminal(capsys):
    progress = demo._Progress(2)
    progress.step("training on 1 vCPU (demo-1vcpu)")
    progress.update(0.5, "1.2 k samples")
    progress.step("inference at concurrency 4 (demo-1vcpu)")
    progress.done()
    assert capsys.readouterr().err.splitlines() == [
        "[1/2] training on 1 vCPU (demo-1vcpu)", "[2/2] inference at concurrency 4 (demo-1vcpu)"]
