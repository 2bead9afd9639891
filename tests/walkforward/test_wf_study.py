"""walkforward-ppo-lstm --study: a tuning study's trials make the verdict's Deflated Sharpe Ratio stricter."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from optuna.trial import TrialState

from ppo_lstm.errors import UsageError
from ppo_lstm.stats import deflated_sharpe_ratio, hedged_returns, sampling_variance
from ppo_lstm.walkforward.cli import load_study
from ppo_lstm.walkforward.config import WalkForwardConfig
from ppo_lstm.walkforward.results import study_variance, trial_count, verdict_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tune"))
from test_trial_stats import SHARPES, make_study  # noqa: E402  (a real Optuna study in SQLite)
from test_wf_bad_input import SMALL, data, run  # noqa: E402,F401  (data: the 300-bar file's fixture)


def _series(seeds: list[int]) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    bench = rng.normal(0.0003, 0.01, 1500)
    frame = pd.DataFrame({"fold": np.repeat([1, 2, 3], 500), "buy_and_hold": bench, "flat": 0.0,
                          "ma_10_40": rng.normal(0.0, 0.01, 1500)})
    skill = rng.normal(0.0002, 0.003, 1500)  # what the seeds learned alike, and a little of their own
    for seed in seeds:
        frame[f"seed_{seed}"] = 0.5 * bench + skill + rng.normal(0.0, 0.0003, 1500)
    frame["ensemble"] = frame[[f"seed_{s}" for s in seeds]].mean(axis=1)
    return frame


def test_a_study_adds_its_trials_and_their_spread_to_the_verdict(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    make_study(url, "tune")
    study = load_study(f"{url}:tune")
    assert study is not None and study.trials == len(SHARPES[TrialState.COMPLETE]) + len(SHARPES[TrialState.PRUNED])
    wf = WalkForwardConfig(seeds=3, configs_tried=1, study=f"{url}:tune")
    assert trial_count(wf) == 3 and trial_count(wf, study) == 3 * 5
    assert trial_count(WalkForwardConfig(seeds=2, configs_tried=4), study) == 2 * (5 + 3)

    seeds = [1, 2, 3]
    series = _series(seeds)
    hedged = hedged_returns(series["ensemble"].to_numpy(), series["buy_and_hold"].to_numpy())
    alone = verdict_of(series, seeds, 252.0, wf).result
    tuned = verdict_of(series, seeds, 252.0, wf, study).result
    assert (alone.n_trials, tuned.n_trials) == (3, 15)
    # the study's alpha Sharpe ratios spread less than their sampling noise over 260 hold-out bars: over the
    # 1,500 test bars that leaves the no-skill sampling variance, the floor the seeds (who agree) get too
    assert study_variance(study, 1500) == pytest.approx(sampling_variance(1500))
    assert tuned.trial_sharpe_variance == alone.trial_sharpe_variance == pytest.approx(sampling_variance(1500))
    assert tuned.dsr == pytest.approx(deflated_sharpe_ratio(hedged, 15, sampling_variance(1500)))
    assert tuned.dsr < alone.dsr  # more trials
    assert tuned.p_value == alone.p_value  # the alpha tests themselves do not depend on the trials
    # a study whose trials spread widely: its skill spread, rescaled to the test's bars, is used
    wide = SimpleNamespace(trials=4, alpha_sharpes=(0.3, -0.2, 0.1, 0.5), holdout_bars=250)
    spread = np.var(wide.alpha_sharpes, ddof=1) - 1 / 249 + 1 / 1499
    wider = verdict_of(series, seeds, 252.0, wf, wide).result
    assert wider.trial_sharpe_variance == pytest.approx(spread) and wider.n_trials == 12
    assert wider.dsr == pytest.approx(deflated_sharpe_ratio(hedged, 12, spread)) and wider.dsr < tuned.dsr


def test_a_bad_or_empty_study_is_one_line(tmp_path: Path) -> None:
    assert load_study(None) is None
    url = f"sqlite:///{tmp_path / 'study.db'}"
    with pytest.raises(UsageError, match="STORAGE:NAME"):
        load_study("no-colon")
    import optuna
    optuna.create_study(storage=url, study_name="empty")
    with pytest.raises(UsageError, match="no finished trial"):
        load_study(f"{url}:empty")


def test_a_study_refuses_test_windows_among_the_bars_it_tuned_on(data: Path, tmp_path: Path) -> None:
    import optuna
    from ppo_lstm.tune.storage import SPAN_ATTR
    url = f"sqlite:///{tmp_path / 'study.db'}"
    make_study(url, "tune")
    span = "2018-01-01T00:00:00..2018-12-31T00:00:00"
    optuna.load_study(study_name="tune", storage=url).set_user_attr(SPAN_ATTR, span)
    out = tmp_path / "out"
    code, line = run("--data", data, "--out", out, "--folds", "2", "--test-size", "20", "--study", f"{url}:tune",
                     *SMALL)
    assert code == 2 and line.startswith(f"error: fold 1's test window 2018-12-31..2019-01-25 overlaps the bars the "
                                         f"study tuned on (2018-01-01..2018-12-31, from --study {url}:tune)"), line
    assert "--data-start 2019-01-01" in line and not out.exists()  # refused before the walk-forward's state or jobs
