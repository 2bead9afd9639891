"""How a trial reads its seed's metrics.csv (no training): the score is its best.pt's, the checkpoint
of the best hold-out return, whatever --metric is, and the pruner never judges the first backtest."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.tune.objective import SeedRun, TrialRunner

# hold-out return, Sharpe, buy-and-hold per backtest: the best return (12.0) is not the best Sharpe (2.5)
ROWS = [("4.0", "2.5", "7.0"), ("12.0", "1.1", "7.0"), ("", "", ""), ("9.0", "1.9", "7.0")]


class FakeTrial:
    """What the runner asks of an Optuna trial: it records reports and pruning questions."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, float]] = []
        self.asked: list[int] = []

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        self.asked.append(self.reports[-1][0])
        return False


def read(tmp_path: Path, metric: str) -> tuple[SeedRun, FakeTrial]:
    path = tmp_path / "metrics.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["episodes", "holdout_return_pct", "holdout_sharpe", "holdout_buy_and_hold_pct"])
        writer.writerows([(4 * (k + 1), *row) for k, row in enumerate(ROWS)])
    runner = TrialRunner(None, None, None, str(tmp_path), 1, metric, 10.0, 252.0, 1)  # type: ignore[arg-type]
    seed, trial = SeedRun(), FakeTrial()
    assert not runner._read(trial, path, seed, 0, [], TrainConfig(episodes=16))  # type: ignore[arg-type]
    return seed, trial


@pytest.mark.parametrize("metric, score", [("return", 12.0), ("sharpe", 1.1)])
def test_the_score_is_best_pts_and_the_first_backtest_is_never_judged(tmp_path: Path, metric: str,
                                                                      score: float) -> None:
    seed, trial = read(tmp_path, metric)
    assert (seed.best, seed.best_return, seed.sharpe, seed.buy_and_hold) == (score, 12.0, 1.1, 7.0)
    assert seed.backtests == 3 and seed.rows_read == 4
    assert [step for step, _ in trial.reports] == [4, 8, 16]
    assert trial.asked == [8, 16]  # the warm-up: the pruner is not asked after the first backtest
