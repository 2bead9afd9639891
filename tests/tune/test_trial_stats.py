"""trial_stats: the number of trials and the variance of their hold-out Sharpe ratios, for the
walk-forward verdict's Deflated Sharpe Ratio."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ppo_lstm.errors import UsageError
from ppo_lstm.tune.study_stats import parse_spec, trial_stats

SHARPES = {TrialState.COMPLETE: [1.2, 0.4, -0.3], TrialState.PRUNED: [0.1, -0.8], TrialState.FAIL: [9.0]}


def make_study(url: str, name: str, ppy: float = 252.0) -> None:
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    dist = {"clip": FloatDistribution(0.1, 0.3)}
    for state, sharpes in SHARPES.items():
        for k, sharpe in enumerate(sharpes):
            study.add_trial(optuna.create_trial(
                state=state, value=None if state == TrialState.FAIL else float(k), params={"clip": 0.2},
                distributions=dist, intermediate_values={4: float(k)},
                user_attrs={"holdout_sharpe": sharpe, "periods_per_year": ppy}))
    study.add_trial(optuna.create_trial(state=TrialState.WAITING))


def test_counts_complete_and_pruned_and_their_sharpe_variance(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    make_study(url, "tune")
    stats = trial_stats(f"{url}:tune")
    counted = SHARPES[TrialState.COMPLETE] + SHARPES[TrialState.PRUNED]
    assert stats.trials == 5
    assert sorted(stats.sharpes) == sorted(counted)
    assert stats.sharpe_variance == pytest.approx(np.var(counted, ddof=1), rel=1e-12)
    assert stats.periods_per_year == 252.0
    assert stats.per_period_variance == pytest.approx(np.var(counted, ddof=1) / 252.0)


def test_the_out_directory_stands_for_its_default_storage(tmp_path: Path) -> None:
    make_study(f"sqlite:///{tmp_path / 'study.db'}", "mine")
    assert trial_stats(f"{tmp_path}:mine").trials == 5


def test_the_spec_splits_at_the_last_colon(tmp_path: Path) -> None:
    assert parse_spec("postgresql://user:pw@host:5432/optuna:tune") == ("postgresql://user:pw@host:5432/optuna", "tune")
    assert parse_spec("journal:/shared/t.log:tune") == ("journal:/shared/t.log", "tune")
    for bad in ("no-colon", "sqlite:///x.db:", ":name", "postgresql://host"):
        with pytest.raises(UsageError, match="STORAGE:NAME"):
            parse_spec(bad)
    with pytest.raises(UsageError, match="holds no study 'other'"):
        make_study(f"sqlite:///{tmp_path / 'study.db'}", "tune")
        trial_stats(f"{tmp_path}:other")

