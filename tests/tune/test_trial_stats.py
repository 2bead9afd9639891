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
from ppo_lstm.tune.storage import SPAN_ATTR
from ppo_lstm.tune.study_stats import parse_spec, trial_stats

SHARPES = {TrialState.COMPLETE: [1.2, 0.4, -0.3], TrialState.PRUNED: [0.1, -0.8], TrialState.FAIL: [9.0]}
BARS = {TrialState.COMPLETE: [250, 300, 260], TrialState.PRUNED: [40, 40], TrialState.FAIL: [250]}


def make_study(url: str, name: str, ppy: float = 252.0) -> None:
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    dist = {"clip": FloatDistribution(0.1, 0.3)}
    for state, sharpes in SHARPES.items():
        for k, sharpe in enumerate(sharpes):  # a per-bar alpha Sharpe ratio of sharpe / 20 (pruned: partial)
            study.add_trial(optuna.create_trial(
                state=state, value=None if state == TrialState.FAIL else float(k), params={"clip": 0.2},
                distributions=dist, intermediate_values={4: float(k)},
                user_attrs={"holdout_sharpe": sharpe, "periods_per_year": ppy, "holdout_alpha_sharpe": sharpe / 20,
                            "holdout_bars": BARS[state][k]}))
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
    # the DSR's units: the complete trials' per-bar alpha Sharpe ratios, never a pruned trial's partial one
    assert stats.alpha_sharpes == pytest.approx([s / 20 for s in SHARPES[TrialState.COMPLETE]])
    assert stats.holdout_bars == 260 and stats.tuned_span is None


def test_an_old_study_has_no_alpha_sharpes_and_the_span_is_the_studys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=url, study_name="old", direction="maximize")
    study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=1.0,
                                        user_attrs={"holdout_sharpe": 0.5, "periods_per_year": 252.0}))
    study.set_user_attr(SPAN_ATTR, "2010-01-04T00:00:00..2018-12-31T00:00:00")
    stats = trial_stats(f"{url}:old")
    assert (stats.trials, stats.alpha_sharpes, stats.holdout_bars) == (1, (), 0)
    assert stats.tuned_span == "2010-01-04T00:00:00..2018-12-31T00:00:00"


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

