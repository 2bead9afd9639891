"""Several instruments' hold-out: the one cut in time by the end of each bar (a daily bar of the
cut's day is not trained on beside held-out hourly bars), an instrument with a short hold-out
warned about and left out of the mean that picks best.pt, and the in-sample summary's runnable
evaluate command."""
from __future__ import annotations

import math
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from envs.config import EnvConfig
from envs.data import load_ohlcv
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.config.plan import BatchPlan
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.evaluation.cli import build_parser
from ppo_lstm.rundir.checkpoint import BEST_NAME
from ppo_lstm.data_split import split_instruments
from ppo_lstm.train.holdout import Holdout, holdout_columns, holdout_line, holdout_score
from ppo_lstm.train.messages import startup_lines, summary_lines
from ppo_lstm.train.run_state import RunState

WINDOW, LENGTH = 8, 16


def write_bars(path: Path, first: str, bars: int, spacing: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[close[0], close[:-1]]
    pd.DataFrame({"date": pd.date_range(first, periods=bars, freq=spacing), "open": open_,
                  "high": np.maximum(open_, close) * 1.001, "low": np.minimum(open_, close) * 0.999,
                  "close": close, "volume": rng.integers(1000, 5000, bars)}).to_csv(path, index=False)


def config_of(paths: list[Path], **overrides) -> TrainConfig:
    return TrainConfig(data=[str(p) for p in paths], env=EnvConfig(window=WINDOW, episode_length=LENGTH),
                       **overrides)


def test_a_daily_bar_of_the_cut_day_is_not_trained_on_beside_hourly_bars(tmp_path: Path) -> None:
    # daily bars stamped at midnight beside hourly bars: the pooled cut falls inside a day
    write_bars(tmp_path / "DAILY.csv", "2024-01-01", 120, "D", 1)
    write_bars(tmp_path / "HOURLY.csv", "2024-01-01", 120 * 24, "h", 2)
    paths = [tmp_path / "DAILY.csv", tmp_path / "HOURLY.csv"]
    datas = [load_ohlcv(p) for p in paths]
    lengths = [np.timedelta64(1, "D"), np.timedelta64(1, "h")]
    for holdout in (0.21, 0.22, 0.33):  # cuts at 19:00, 14:00 and 09:00
        splits = split_instruments(datas, config_of(paths, holdout=holdout))
        ends = [d.timestamps[s.train_span[1] - 1] + length for d, s, length in zip(datas, splits, lengths)]
        starts = [d.timestamps[s.split] for d, s in zip(datas, splits)]
        cut = min(starts)
        assert pd.Timestamp(cut).hour != 0  # the cut is inside a day
        assert max(ends) <= cut  # every training bar, daily ones too, has ended when the hold-out starts
        daily, hourly = splits
        assert daily.gap == 1 and hourly.gap == 0  # the day that spans the cut: neither trained on nor scored
        assert daily.train_span == (0, daily.split - 1) and hourly.train_span == (0, hourly.split)
    # a cut at midnight: no bar spans it, every bar before it trains
    daily, hourly = split_instruments(datas, config_of(paths, holdout=0.2))
    assert daily.gap == hourly.gap == 0 and pd.Timestamp(datas[0].timestamps[daily.split]) == pd.Timestamp("2024-04-06")
    describe = Holdout(config_of(paths, holdout=0.33), datas, splits).describe()
    assert "DAILY.csv" in describe and "spans the cut: neither trained on nor scored" in describe


def test_bar_ends_skip_gaps(tmp_path: Path) -> None:
    from ppo_lstm.data_split import bar_ends

    days = pd.bdate_range("2024-01-01", periods=7).values  # Mon..Fri, Mon, Tue
    ends = pd.DatetimeIndex(bar_ends(days))
    assert list(ends.strftime("%a %d")) == ["Tue 02", "Wed 03", "Thu 04", "Fri 05", "Sat 06", "Tue 09", "Wed 10"]


def short_holdout(tmp_path: Path) -> tuple[TrainConfig, Holdout]:
    """Three daily instruments; SHORT.csv ends 5 bars after the pooled cut (window + 2 = 10)."""
    write_bars(tmp_path / "A.csv", "2024-01-01", 200, "D", 1)
    write_bars(tmp_path / "B.csv", "2024-01-01", 200, "D", 2)
    write_bars(tmp_path / "SHORT.csv", "2024-01-01", 180, "D", 3)
    paths = [tmp_path / n for n in ("A.csv", "B.csv", "SHORT.csv")]
    config = config_of(paths, holdout=0.095, checkpoint_dir=str(tmp_path / "ck"))
    datas = [load_ohlcv(p) for p in paths]
    splits = split_instruments(datas, config)
    assert [s.holdout_bars for s in splits] == [25, 25, 5]  # the last 55 of 580 pooled bars
    holdout = Holdout.of(config, datas, splits)
    assert holdout is not None
    return config, holdout


def test_a_short_holdout_is_warned_about_and_left_out_of_the_mean(tmp_path: Path) -> None:
    config, holdout = short_holdout(tmp_path)
    torch.manual_seed(0)
    agent = RecurrentActorCritic(config.env.obs_dim, config.env.num_actions, hidden_size=16, lstm_size=16)
    result = holdout.run(agent, torch.device("cpu"))
    returns = {name: r.agent.total_return_pct for name, r in result.results.items()}
    assert not math.isclose(returns["SHORT.csv"], (returns["A.csv"] + returns["B.csv"]) / 2)  # it would move the mean
    assert holdout_score(result) == pytest.approx((returns["A.csv"] + returns["B.csv"]) / 2)
    columns = holdout_columns(result)
    assert columns["holdout_return_pct"] == pytest.approx(holdout_score(result), abs=1e-6)
    assert columns["SHORT.csv:holdout_return_pct"] == pytest.approx(returns["SHORT.csv"], abs=1e-6)  # still logged
    assert holdout_line(8, result).endswith("(mean of 2 of 3 instruments)")
    lines = startup_lines(config, BatchPlan.of(config), 0, RunState(share=16, next_log_at=1, next_checkpoint_at=8), None, holdout, [])
    warnings = [line for line in lines if line.startswith("Warning:")]
    assert warnings == [holdout.warnings()[0]] and len(warnings) == 1
    assert ("SHORT.csv keeps 5 held-out bars after the one cut in time, fewer than window + 2 = 10; its figures are "
            "in metrics.csv, but it is left out of the mean that picks best.pt") in warnings[0]


def test_the_in_sample_summary_prints_a_runnable_command(tmp_path: Path) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / BEST_NAME).write_bytes(b"x")
    files = [str(tmp_path / "a.csv"), str(tmp_path / "my prices" / "b.csv")]
    for data, date_format in ((files, None), (files[1], "%d/%m/%Y")):
        config = TrainConfig(data=data, holdout=0.0, checkpoint_dir=str(tmp_path / "ck"), date_format=date_format)
        line = summary_lines(config, None, None, None)[-1]
        assert line.startswith("Evaluate it: evaluate-ppo-lstm ")
        words = shlex.split(line[len("Evaluate it: "):])
        args = build_parser().parse_args(words[1:])
        assert args.data == [Path(f) for f in ([data] if isinstance(data, str) else data)]
        assert args.checkpoint == tmp_path / "ck" / BEST_NAME and args.date_format == date_format
