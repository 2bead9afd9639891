"""``--start`` is the first decision bar: its window comes from the bars before it, buy-and-hold
holds from its close, and the report, the JSON and the equity CSV name it. Trading starts later
only where the file has too little history (or a feature is not yet defined), and the report
says so. In-process, fast."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from envs.data import MarketData
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.evaluation.cli import mark_training_bars
from ppo_lstm.evaluation.report import equity_frame, format_table, report_dict

from test_backtest import CFG, sharp_agent, walk

W = CFG.window


def test_the_first_decision_is_at_start_with_the_window_before_it() -> None:
    data, start = walk(200, seed=5, drift=0.001), 60
    result = backtest_history(sharp_agent(CFG), CFG, data, start)
    assert result.bars == len(data) - start - 1 and result.late_start is None
    stamp = f"{np.datetime_as_string(data.timestamps[start], unit='D')}T00:00:00"
    assert result.start == stamp == report_dict(result)["start"] == equity_frame(result)["time"][0]
    assert f"traded from the close of {stamp} to" in format_table(result, "t").splitlines()[1]
    # buy-and-hold: the file's own closes from --start's bar to the last, up to the entry fill and costs
    fee, slip = CFG.fee_bps / 1e4, CFG.slippage_bps / 1e4
    fill = data.open[start + 1] * (1 + slip)
    expected = 100.0 * (data.close[-1] - fill * (1 + fee)) / data.close[start]
    assert result.buy_and_hold.total_return_pct == pytest.approx(expected, rel=1e-10)
    closes_only = 100.0 * (data.close[-1] / data.close[start] - 1.0)
    assert abs(result.buy_and_hold.total_return_pct - closes_only) < 100.0 * abs(fill / data.close[start] - 1) + 0.1
    # the decisions read only bars up to their own: the same start on a file cut before it decides alike
    later = backtest_history(sharp_agent(CFG), CFG, data, start, start + 40)
    assert np.array_equal(later.position, result.position[:39])


def test_too_little_history_starts_later_and_says_why() -> None:
    data = walk(100, seed=6)
    result = backtest_history(sharp_agent(CFG), CFG, data, 3)
    assert result.time[0] == data.timestamps[W] and result.bars == len(data) - W - 1
    assert result.late_start == ("trading starts at 2024-01-09T00:00:00, not at 2024-01-04T00:00:00: the file has 3 "
                                 "bars before it and the 8-bar window needs 8")
    assert result.late_start in format_table(result, "t")
    assert report_dict(result)["late_start"] == result.late_start
    same = backtest_history(sharp_agent(CFG), CFG, data, W)  # from the first bar that has the history
    assert np.array_equal(same.equity, result.equity) and same.late_start is None


def test_a_feature_not_yet_defined_starts_later() -> None:
    data = walk(100, seed=7)
    values = np.random.default_rng(0).standard_normal((100, 1))
    values[:30] = np.nan
    data = dataclasses.replace(data, features=values, feature_names=("f",))
    config = dataclasses.replace(CFG, features="f")
    result = backtest_history(sharp_agent(config), config, data, 12)
    assert result.time[0] == data.timestamps[30]
    assert result.late_start == ("trading starts at 2024-01-31T00:00:00, not at 2024-01-13T00:00:00: every feature "
                                 "column is defined from 2024-01-31T00:00:00 on")


def test_the_report_counts_the_bars_within_the_training_bars() -> None:
    data = walk(100, seed=8)
    result = backtest_history(sharp_agent(CFG), CFG, data, 40)  # scores bars 41..99
    trained_on = [{"name": "other.csv", "train_first": "2024-01-01T00:00:00", "train_last": "2024-03-01T00:00:00"}]
    mark_training_bars(result, trained_on, "test")  # 2024-03-01 is bar 60: bars 41..60 were trained on
    assert result.training_bars == 20 and report_dict(result)["training_bars"] == 20
    assert ("in-sample: 20 of the 59 bars are within the checkpoint's training bars (2024-01-01 to 2024-03-01)"
            in format_table(result, "t"))
    own = trained_on + [{"name": "test", "train_first": "2024-01-01T00:00:00", "train_last": "2024-01-20T00:00:00"}]
    assert mark_training_bars(result, own, "test").training_bars == 0  # the instrument's own training bars
    assert "out-of-sample: none of the 59 bars is within" in format_table(result, "t")
    unmarked = backtest_history(sharp_agent(CFG), CFG, data, 40)
    assert mark_training_bars(unmarked, None, "test").training_bars is None
    assert "sample" not in format_table(unmarked, "t")


def test_the_shortest_backtest_from_the_files_first_bar() -> None:
    """A MarketData of exactly window + 2 bars from bar 0 still backtests (the first decision at bar W)."""
    data = walk(W + 2, seed=9)
    assert isinstance(data, MarketData)
    result = backtest_history(sharp_agent(CFG), CFG, data)
    assert result.bars == 1 and result.time[0] == data.timestamps[W]
    with pytest.raises(ValueError, match="needs at least 2"):
        backtest_history(sharp_agent(CFG), CFG, walk(W + 1, seed=9))
