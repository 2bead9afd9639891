"""The study's report and best.yaml, from a study written by hand (no training): the score is said
to be a selection, each trial's hold-out buy-and-hold and alpha Sharpe ratio stand beside its score,
and best.yaml carries the settings without the study's dates but with the span of bars it read."""
from __future__ import annotations

import math
from pathlib import Path

import optuna
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ppo_lstm.config.command_line import parse_command_line as parse_training_command_line
from ppo_lstm.tune.config import parse_command_line
from ppo_lstm.tune.report import report_lines, run_settings
from ppo_lstm.tune.storage import SETTINGS_ATTR, SPAN_ATTR
from tune_fixtures import TINY

SPAN = "2018-01-01T00:00:00..2018-12-31T00:00:00"


def test_the_report_shows_buy_and_hold_beside_each_score_and_says_it_is_a_selection(tmp_path: Path) -> None:
    base = parse_command_line([*TINY, "--out", str(tmp_path), "--data-start", "2018-01-01",
                               "--data-end", "2018-12-31"]).base
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=url, study_name="tune", direction="maximize")
    study.set_user_attr(SETTINGS_ATTR, {"metric": "return", "seeds": 1, "base": run_settings(base)})
    study.set_user_attr(SPAN_ATTR, SPAN)
    attrs = {"periods_per_year": 252.0, "score_std": 0.0, "holdout_backtests": [8], "holdout_bars": 250}
    held = {"holdout_buy_and_hold_pct": 12.5, "holdout_sharpe": 0.9, "holdout_buy_and_hold_sharpe": 0.9,
            "holdout_alpha_sharpe": 0.0}  # always long: buy-and-hold's score, no alpha
    timed = {"holdout_buy_and_hold_pct": 12.5, "holdout_sharpe": 1.6, "holdout_buy_and_hold_sharpe": 0.9,
             "holdout_alpha_sharpe": 0.05}
    for value, figures in ((12.5, held), (20.0, timed)):
        study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=value, params={"clip": 0.2},
                                            distributions={"clip": FloatDistribution(0.1, 0.3)},
                                            user_attrs={**attrs, **figures}))
    lines = report_lines(study, url, tmp_path)
    text = "\n".join(lines)
    assert "Objective: the hold-out return (%) of each seed's best.pt, mean over 1 seed(s) per trial" in text
    assert "A selection: each seed's best.pt is the best of its run's 8 hold-out backtests" in text
    assert f"Bars read by the study: {SPAN}" in text
    header = next(i for i, line in enumerate(lines) if line.startswith("  trial"))
    assert lines[header].split() == ["trial", "state", "score", "seed", "std", "b&h", "ret", "sharpe", "b&h",
                                     "sharpe", "alpha", "sharpe", "clip"]
    alpha = f"{0.05 * math.sqrt(252.0):.4g}"  # annualised, as the sharpe column
    assert lines[header + 1].split() == ["1", "complete", "20", "0", "12.5", "1.6", "0.9", alpha, "0.2"]
    assert lines[header + 2].split() == ["0", "complete", "12.5", "0", "12.5", "0.9", "0.9", "0", "0.2"]

    best = tmp_path / "best.yaml"
    values = yaml.safe_load(best.read_text())
    assert values["tuned-span"] == SPAN and values["data-start"] is None and values["data-end"] is None
    assert values["clip"] == 0.2
    config = parse_training_command_line(["--config", str(best)]).config  # the training command skips tuned-span
    assert config.clip == 0.2 and config.data_end is None
