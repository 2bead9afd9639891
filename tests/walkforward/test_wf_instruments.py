"""Several instruments in a walk-forward (in-process, fast): folds cut on the union of their
stamps, each job trains on all of them over the same span, and the verdict's series is the
equal-weight basket."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ppo_lstm.walkforward.cli import parse_command_line, plan
from ppo_lstm.walkforward.results import basket

SMALL = ["--window", "8", "--episode-length", "16", "--num-envs", "2", "--update-interval", "32", "--minibatches", "2"]


def write(path: Path, days: pd.DatetimeIndex, seed: int) -> Path:
    close = 100 * np.exp(np.cumsum(0.01 * np.random.default_rng(seed).standard_normal(len(days))))
    pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), "Open": close, "High": close * 1.01, "Low": close * 0.99,
                  "Close": close}).to_csv(path, index=False)
    return path


def test_folds_of_several_instruments_are_one_span_of_time(tmp_path: Path) -> None:
    weekdays = pd.bdate_range("2020-01-01", periods=300)
    everyday = pd.date_range(weekdays[0], weekdays[-1], freq="D")  # a 7-day market over the same span
    a, b = write(tmp_path / "A.csv", weekdays, 1), write(tmp_path / "B.csv", everyday, 2)
    command = parse_command_line(["--data", str(a), str(b), "--out", str(tmp_path / "out"), "--folds", "2",
                                  "--test-size", "30d", "--seeds", "2", *SMALL])
    p = plan(command.wf, command.train)
    assert len(p.calendar) == len(everyday) and len(p.jobs) == 4
    last = p.folds[-1]
    assert pd.Timestamp(p.calendar[last.test_hi - 1]) == everyday[-1]
    job = p.jobs[-1]
    assert job.config.data == [str(a), str(b)] and job.seed == command.train.seed + 1
    assert pd.Timestamp(job.config.data_end) == pd.Timestamp(p.calendar[last.test_lo - 1])


def test_the_basket_is_the_equal_weight_mean_with_a_missing_bar_counting_zero() -> None:
    oos = pd.DataFrame({"time": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-01", "2020-01-02",
                                                "2020-01-03"]),
                        "instrument": ["A", "A", "B", "B", "B"], "fold": [1, 1, 1, 1, 1],
                        "seed_1": [0.02, -0.01, 0.04, 0.01, 0.03], "ensemble": [0.0] * 5,
                        "buy_and_hold": [0.01, 0.01, 0.03, 0.03, 0.02], "flat": [0.0] * 5, "ma_10_40": [0.0] * 5})
    out = basket(oos, [1])
    assert np.allclose(out["seed_1"], [0.03, 0.0, 0.015]) and np.allclose(out["buy_and_hold"], [0.02, 0.02, 0.01])
