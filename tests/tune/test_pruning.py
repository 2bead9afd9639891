"""Pruning is real: on a space where half the settings cannot learn (an actor learning rate of
1e-9 leaves the policy as initialised), the median pruner stops those trials at their second
hold-out backtest (the first is the warm-up: one noisy backtest prunes nothing), and their
training runs end early with a clean checkpoint. A complete trial records its best.pt's hold-out
alpha Sharpe ratio, here on the simulated market's hold-out episodes."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tune_fixtures import assert_exactly, start_tune, trials_of, write_space

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_median_pruner_stops_the_trials_that_cannot_learn(tmp_path: Path) -> None:
    space = write_space(tmp_path / "space.yaml", "learning-rate-actor: {choice: [0.003, 1.0e-9]}\n")
    # sampler seed 2: trials 0 and 2 draw 0.003, trial 1 draws 1e-9; trial 0 is the pruner's one start-up trial
    result = start_tune(tmp_path, "--out", "study", "--space", space, "--trials", "3", "--sampler", "random",
                        "--sampler-seed", "2", "--startup-trials", "1", "--pruner", "median",
                        "--episodes", "32", "--ema-spans", "none").wait(240)  # the scores this seed was picked on
    assert result.returncode == 0, result.output
    trials = trials_of(f"sqlite:///{tmp_path / 'study' / 'study.db'}", "study")
    assert_exactly(trials, 3)
    assert [t.params["learning-rate-actor"] for t in trials] == [0.003, 1e-9, 0.003]
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert [t.number for t in pruned] == [1]
    assert sorted(pruned[0].intermediate_values) == [4, 8]  # stopped at its second backtest, of eight
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert all(max(t.intermediate_values) == 32 for t in complete)
    for t in complete:  # 4 hold-out episodes of 16 bars, chained
        assert t.user_attrs["holdout_bars"] == 64 and t.user_attrs["holdout_backtests"] == [8]
        assert isinstance(t.user_attrs["holdout_alpha_sharpe"], float)
    assert "holdout_alpha_sharpe" not in pruned[0].user_attrs  # its run did not end: its partial figures stay out
    run = tmp_path / "study" / "trial-0001"
    with open(run / "metrics.csv", newline="") as handle:
        last = list(csv.DictReader(handle))[-1]
    assert int(last["episodes"]) < 32
    assert "interrupted at episode" in (run / "training.log").read_text()  # SIGTERM: checkpointed and ended
    assert (run / "latest").exists()
    assert "1 pruned" in result.stdout
