"""The folds (ppo_lstm.walkforward.folds): test windows at the end, anchored or rolling
training, the purge, durations, and the one-line refusal when the bars are too few. Fast."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ppo_lstm.errors import UsageError
from ppo_lstm.walkforward.folds import make_folds, parse_size

DAYS = np.asarray(pd.bdate_range("2020-01-01", periods=600), dtype="datetime64[ns]")


def test_anchored_folds_are_consecutive_windows_at_the_end() -> None:
    folds = make_folds(DAYS, 3, 50, purge=0, train_size=None)
    assert [(f.test_lo, f.test_hi) for f in folds] == [(450, 500), (500, 550), (550, 600)]
    assert all(f.train_lo == 0 and f.train_hi == f.test_lo for f in folds)


def test_rolling_folds_with_a_purge_train_on_a_fixed_window_before_the_gap() -> None:
    folds = make_folds(DAYS, 2, 50, purge=5, train_size=200)
    assert [(f.train_lo, f.train_hi, f.test_lo) for f in folds] == [(295, 495, 500), (345, 545, 550)]


def test_a_duration_counts_the_bars_of_the_calendar() -> None:
    folds = make_folds(DAYS, 2, parse_size("6mo", "--test-size"), purge=0, train_size=None)
    last = pd.Timestamp(DAYS[-1])
    first_test = pd.Timestamp(DAYS[folds[1].test_lo])
    assert last - pd.DateOffset(months=6) < first_test <= last - pd.DateOffset(months=6) + pd.Timedelta(days=4)
    assert folds[0].test_hi == folds[1].test_lo and 120 <= folds[1].test_hi - folds[1].test_lo <= 135
    assert parse_size("250", "--test-size") == 250 and parse_size("2w", "--x").offset == pd.Timedelta(days=14)
    assert parse_size(" 1y ", "--x").offset == pd.DateOffset(months=12) and str(parse_size("18mo", "--x")) == "18mo"


def test_too_few_bars_for_the_folds_is_one_line_with_the_numbers() -> None:
    with pytest.raises(UsageError, match=r"5 folds of --test-size 150 bars after --purge 0 need more bars than the "
                                         r"600 selected"):
        make_folds(DAYS, 5, 150, purge=0, train_size=None)
    with pytest.raises(UsageError, match="neither a count of bars"):
        parse_size("1 year", "--test-size")
