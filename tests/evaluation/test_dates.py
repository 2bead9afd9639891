"""Dates: one that reads two ways (``01/09/2017``) is refused with both readings and the ISO
form; ``backtest_history`` takes dates as well as bar indices."""
from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pytest
import torch

from envs.config import EnvConfig
from envs.data import DataError, MarketData, date_span
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.deploy.bars import parse_start
from ppo_lstm.errors import UsageError
from ppo_lstm.evaluation.backtest import backtest_history

CFG = EnvConfig(window=8, episode_length=16)


def daily(bars: int = 60) -> MarketData:
    """Daily bars from 2017-08-20, a random walk."""
    close = 50.0 * np.exp(np.cumsum(0.01 * np.random.default_rng(3).standard_normal(bars)))
    days = np.datetime64("2017-08-20") + np.arange(bars).astype("timedelta64[D]")
    return MarketData(source="walk.csv", timestamps=days,
                      open=close, high=close, low=close, close=close, volume=np.ones(bars), bar_seconds=86400.0)


@pytest.mark.parametrize("text", ["01/09/2017", "01-09-2017", "01.09.2017", "1/9/2017 14:30"])
def test_a_date_that_reads_two_ways_is_refused(text):
    with pytest.raises(DataError) as error:
        date_span(daily(), text)
    assert str(error.value) == (f"--start {text!r} can be read two ways: 2017-01-09 (month first) or 2017-09-01 "
                                f"(day first); write the one you mean in ISO form, YYYY-MM-DD (e.g. 2017-09-01)")
    with pytest.raises(UsageError, match="can be read two ways"):
        parse_start(text)  # predict-ppo-lstm's --start


@pytest.mark.parametrize("text, day", [("2017-09-01", "2017-09-01"), ("13/09/2017", "2017-09-13"),
                                       ("09/13/2017", "2017-09-13"), ("05/05/2017", "2017-05-05"),
                                       ("2017/09/01", "2017-09-01")])
def test_a_date_that_reads_one_way_is_taken(text, day):
    assert parse_start(text) == pd.Timestamp(day)


def test_end_is_checked_too():
    with pytest.raises(DataError, match=r"^--end '02/03/2018' can be read two ways: 2018-02-03 \(month first\)"):
        date_span(daily(), None, "02/03/2018")


def agent() -> RecurrentActorCritic:
    torch.manual_seed(0)
    return RecurrentActorCritic(CFG.obs_dim, CFG.num_actions, 16, 16)


def test_backtest_history_takes_dates_as_evaluate_does():
    data, policy = daily(), agent()
    lo, hi = date_span(data, "2017-09-01", "2017-10-05")
    assert (lo, hi) == (12, 47)
    by_index = backtest_history(policy, CFG, data, lo, hi)
    for start, end in (("2017-09-01", "2017-10-05"), (datetime.date(2017, 9, 1), datetime.date(2017, 10, 5)),
                       (pd.Timestamp("2017-09-01"), hi)):
        result = backtest_history(policy, CFG, data, start=start, end=end)
        assert np.array_equal(result.equity, by_index.equity) and result.bars == by_index.bars
    # the first decision at 2017-09-01's close (12 bars before it fill the 8-bar window), then every bar to the end
    assert backtest_history(policy, CFG, data, start="2017-09-01").bars == len(data) - lo - 1


def test_backtest_history_refuses_a_bad_date_in_one_line():
    with pytest.raises(ValueError, match=r"^start '01/09/2017' can be read two ways"):
        backtest_history(agent(), CFG, daily(), start="01/09/2017")
    with pytest.raises(ValueError, match=r"^start 'soon' is not a date"):
        backtest_history(agent(), CFG, daily(), start="soon")
    with pytest.raises(ValueError, match=r"^backtest_history: start is a bar index or a date, got 1.5"):
        backtest_history(agent(), CFG, daily(), start=1.5)
