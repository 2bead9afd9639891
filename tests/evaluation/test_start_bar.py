"""``--start`` is the first decision bar: its window comes from the bars before it, buy-and-hold
holds from its close, and the report, the JSON and the equity CSV name it. Trading starts later
only where the file has too little history (or a feature is not yet defined), and the report
says so. In-process, fast."""
from __future__ import annotations

import dataclasses

import dataclasses

import numpy as np
import pytest

from envs.data import MarketData
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.data_split import bars_sha256
from ppo_lstm.evaluation.loading import mark_training_bars
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


def entry(data, name: str, first: int, train_last: int, last: int) -> dict:
    """A fingerprint entry of ``data``'s bars ``first..last`` (training reads ``first..train_last``, the
    hold-out the bars after it up to ``last``), as the trainer records it."""
    day = lambda k: f"{np.datetime_as_string(np.asarray(data.timestamps)[k].astype('datetime64[s]'))}"  # noqa: E731
    return {"name": name, "bars": last - first + 1, "first": day(first), "last": day(last),
            "sha256": bars_sha256(data, first, last + 1), "train_first": day(first), "train_last": day(train_last)}


def test_the_report_labels_training_selection_and_out_of_sample_bars() -> None:
    data = walk(100, seed=8)  # bar k is 2024-01-01 + k days
    result = backtest_history(sharp_agent(CFG), CFG, data, 40)  # scores bars 41..99
    own = [entry(data, "test", 0, 60, 79)]  # training bars 0..60, hold-out 61..79
    mark_training_bars(result, own, "test", data)
    assert result.training_bars == 20 and report_dict(result)["training_bars"] == 20
    assert report_dict(result)["sample"] == {"earlier": 0, "training": 20, "selection_holdout": 19,
                                             "out_of_sample": 20, "last_read": "2024-03-20T00:00:00"}
    table = format_table(result, "t")
    assert "20 of the 59 bars are training bars (2024-01-01 to 2024-03-01): in sample" in table
    assert ("19 of the 59 bars are the selection hold-out (after 2024-03-01 up to 2024-03-20): they chose best.pt, "
            "so they are not out of sample") in table
    assert "20 of the 59 bars are out of sample: after 2024-03-20, the last bar training and selection read" in table
    assert result.foreign_data is None and "foreign_data" not in report_dict(result)

    result = backtest_history(sharp_agent(CFG), CFG, data, 40)
    assert mark_training_bars(result, [entry(data, "test", 50, 55, 55)], "test", data).sample.as_dict() == {
        "earlier": 9, "training": 6, "selection_holdout": 0, "out_of_sample": 44, "last_read": "2024-02-25T00:00:00"}
    assert "9 of the 59 bars are earlier than the training bars (before 2024-02-20)" in format_table(result, "t")
    result = backtest_history(sharp_agent(CFG), CFG, data, 40)
    mark_training_bars(result, [entry(data, "test", 0, 19, 99)], "test", data)
    assert "all 59 bars are the selection hold-out" in format_table(result, "t")
    assert "out of sample:" not in format_table(result, "t")


def test_bars_training_never_read_are_labelled_nothing_and_said_so() -> None:
    """Another instrument's fingerprint, or a file of the same name whose bars differ: no bar is labelled
    training or hold-out, and the report says why, once."""
    data = walk(100, seed=8)
    other = walk(100, seed=9)  # the same dates, other prices
    for trained_on, why in (([entry(data, "other.csv", 0, 60, 79)], "trained on other.csv, not on test"),
                            ([entry(other, "test", 0, 60, 79)], "test does not hold the bars the checkpoint's run "
                                                                 "read (80 bars from 2024-01-01)")):
        result = backtest_history(sharp_agent(CFG), CFG, data, 40)
        mark_training_bars(result, trained_on, "test", data)
        assert result.sample is None and result.training_bars is None and why in result.foreign_data
        assert report_dict(result)["sample"] is None and report_dict(result)["foreign_data"] == result.foreign_data
        table = format_table(result, "t")
        assert table.count("these are not the bars the checkpoint's training read") == 1
        assert "training bars" not in table and "hold-out (after" not in table
    grown = walk(120, seed=8)  # the training file, grown by 20 bars since: still the bars training read
    trained = dataclasses.replace(grown, **{k: getattr(grown, k)[:100] for k in
                                            ("timestamps", "open", "high", "low", "close", "volume")})
    result = backtest_history(sharp_agent(CFG), CFG, grown, 40)
    assert mark_training_bars(result, [entry(trained, "test", 0, 60, 79)], "test", grown).sample is not None
    assert result.foreign_data is None


def test_a_checkpoint_without_a_fingerprint_labels_nothing() -> None:
    data = walk(100, seed=8)
    unmarked = backtest_history(sharp_agent(CFG), CFG, data, 40)
    assert mark_training_bars(unmarked, None, "test", data).training_bars is None
    assert "sample" not in format_table(unmarked, "t") and report_dict(unmarked)["sample"] is None
