"""What the integrations share (joulestat.integrations.training): the metric names a
tracker gets from a job's figures, the samples and tokens read from a batch, and the
one line a user reads when an integration's extra is missing."""

from __future__ import annotations

import importlib
import sys
import traceback

import pytest

from joulestat.integrations.training import (
    RankInfo,
    TrainingRun,
    batch_size,
    batch_tokens,
    metrics_of,
    params_of,
)

FIGURES = {
    "energy_j": 120.0, "dynamic_energy_j": 30.0, "co2e_g": 0.5, "cost_usd": None,
    "measured_share": 0.75, "energy_is": "measured, estimated (model: dram-gib)",
    "work_units": {"step": 20.0, "sample": 160.0},
    "per_unit": {"step": {"energy_j": 6.0, "dynamic_energy_j": 1.5, "co2e_g": 0.025,
                          "cost_usd": None},
                 "sample": {"energy_j": 0.75, "dynamic_energy_j": 0.1875,
                            "co2e_g": 0.003125, "cost_usd": None}},
}


def test_metrics_carry_units_in_their_names_and_leave_unknowns_out():
    metrics = metrics_of(FIGURES)
    assert metrics == {
        "joulestat/energy_j": 120.0, "joulestat/dynamic_energy_j": 30.0,
        "joulestat/co2e_g": 0.5, "joulestat/measured_share": 0.75,
        "joulestat/energy_j_per_step": 6.0, "joulestat/dynamic_energy_j_per_step": 1.5,
        "joulestat/co2e_g_per_step": 0.025, "joulestat/energy_j_per_sample": 0.75,
        "joulestat/dynamic_energy_j_per_sample": 0.1875,
        "joulestat/co2e_g_per_sample": 0.003125,
        "joulestat/steps": 20.0, "joulestat/samples": 160.0,
    }, "a cost without a price is not logged as 0"
    assert metrics_of({**FIGURES, "cost_usd": 0.02})["joulestat/cost_usd"] == 0.02
    assert "joulestat/energy_j" not in metrics_of({**FIGURES, "energy_j": float("nan")})


def test_params_say_how_the_energy_was_obtained():
    assert params_of(FIGURES, None) == {"joulestat.energy_is": FIGURES["energy_is"]}


def test_batch_size_and_tokens_from_the_shapes_batches_come_in():
    torch = pytest.importorskip("torch")
    ids = torch.ones(8, 32, dtype=torch.long)
    mask = torch.ones(8, 32, dtype=torch.long)
    mask[:, 20:] = 0
    assert batch_size({"input_ids": ids, "attention_mask": mask}) == 8
    assert batch_size((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_size([{"pixel_values": torch.zeros(4, 3, 8, 8)}]) == 4
    assert batch_size({"labels": "text"}) is None and batch_size(torch.tensor(1.0)) is None
    assert int(batch_tokens({"input_ids": ids, "attention_mask": mask})) == 8 * 20
    assert int(batch_tokens({"input_ids": ids})) == 8 * 32
    assert batch_tokens((ids,)) == 0


def test_a_run_of_several_processes_takes_rank_zeros_id_and_counts_on_it_only(
        monkeypatch):
    """Ranks 0 and 1 on this host, rank 2 elsewhere: rank 0 counts and registers the
    host's two processes; rank 1 neither counts nor registers."""
    import joulestat.integrations.training as training

    made: list[tuple[str | None, list[int]]] = []

    class Job:
        def __init__(self, name, kind, labels, job_id, agent_url, pids):
            made.append((job_id, pids))

        def start(self):
            return self

    monkeypatch.setattr(training, "TrackedJob", Job)
    monkeypatch.setattr(training.socket, "gethostname", lambda: "a")
    others = [RankInfo(0, "a", 100, "id-of-rank-0"), RankInfo(1, "a", 101, "id-of-rank-1"),
              RankInfo(2, "b", 200, "id-of-rank-2")]

    def gather_as(rank: int):
        return lambda me: [r if r.rank != rank else RankInfo(rank, "a", me.pid, r.job_id)
                           for r in others]

    first = TrainingRun("bert")
    first.start("default", 0, gather_as(0))
    second = TrainingRun("bert")
    second.start("default", 1, gather_as(1))
    assert first.counts and not second.counts and second.job is None
    assert len(made) == 1 and made[0][0] == "id-of-rank-0"
    assert 101 in made[0][1] and 200 not in made[0][1]


@pytest.mark.parametrize(("module", "extra"), [("huggingface", "hf"),
                                               ("lightning", "lightning")])
def test_a_missing_extra_is_named(module: str, extra: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the integration without its framework fails with the extra to install,
    on the line a traceback ends with (what the user reads). The framework is made
    absent as tests/unit/core/test_extras.py does; the integration is imported anew."""
    framework = {"huggingface": "transformers", "lightning": "lightning"}[module]
    for name in [n for n in sys.modules if n == framework or n.startswith(framework + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, framework, None)
    integration = f"joulestat.integrations.{module}"
    if integration in sys.modules:
        monkeypatch.delitem(sys.modules, integration)
    with pytest.raises(ImportError) as caught:  # uncaught, as in a fresh process: exit 1
        importlib.import_module(integration)
    last_line = traceback.format_exception_only(caught.value)[-1]
    assert f"pip install 'joulestat[{extra}]'" in last_line
    assert integration not in sys.modules  # a later import tries again
