"""The hold-out: which bars of ``--data`` train and which are held out, and the backtest
rank 0 runs on what is held out at every checkpoint.

With ``--data``, bars ``lo..hi-1`` are those ``--data-start`` / ``--data-end`` select
(default: the whole file). The last ``round(holdout * (hi - lo))`` of them are held out:
training episodes lie within bars ``lo..split-1`` and never read a later bar. The
hold-out backtest is :func:`ppo_lstm.backtest.backtest_history` on bars
``split-W-1..hi-1``: its first observation is the window of (training) bars before
``split``, its first decision is taken at the close of bar ``split-1`` and its first
trade fills at bar ``split``'s open, so every held-out bar is scored and none is
trained on. ``evaluate-ppo-lstm --data FILE --start <bar split-W-1> --end <bar hi-1>``
runs exactly that backtest (:meth:`Holdout.evaluate_command`).

Without ``--data``, the hold-out is :func:`ppo_lstm.backtest.backtest_simulated` on
``--holdout-episodes`` paths of the training market seeded by
``evaluation_seeds(seed, episodes)``, seeds that no training env ever draws.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd
import torch

from envs.data import DataError, MarketData, date_span, load_ohlcv

from .agent import RecurrentActorCritic
from .backtest import BacktestResult, backtest_history, backtest_simulated
from .config import TrainConfig
from .errors import UsageError
from .logger import HOLDOUT_COLUMNS

MIN_HOLDOUT_BARS = 2  # the fewest held-out bars a backtest can score with a Sharpe ratio


@dataclass(frozen=True)
class DataSplit:
    """Bars of ``--data``: training episodes lie within ``lo..split-1``, the hold-out is
    ``split..hi-1`` (``split == hi``: no hold-out)."""

    lo: int
    split: int
    hi: int

    @property
    def train_span(self) -> tuple[int, int]:
        return self.lo, self.split

    @property
    def holdout_bars(self) -> int:
        return self.hi - self.split

    def backtest_span(self, window: int) -> tuple[int, int]:
        """The bars ``backtest_history`` is given so that it scores exactly ``split..hi-1``."""
        return self.split - window - 1, self.hi


def split_data(data: MarketData, config: TrainConfig) -> DataSplit:
    """The training and hold-out bars of ``data`` under ``config``; UsageError (one line)
    when the dates select nothing or either part is too short."""
    try:
        lo, hi = date_span(data, config.data_start, config.data_end, flags=("--data-start", "--data-end"))
    except DataError as err:
        raise UsageError(str(err)) from None
    held = int(round(config.holdout * (hi - lo))) if config.holdout > 0 else 0
    split = hi - held
    env = config.env
    needed = env.window + env.episode_length + 1
    stamps = data.timestamps
    if split - lo < needed:
        raise UsageError(
            f"{config.data}: {split - lo} bars ({_day(stamps[lo])} to {_day(stamps[max(lo, split - 1)])}) are left "
            f"for training after --holdout {config.holdout:g}; one episode needs window + episode-length + 1 = "
            f"{needed}; lower --holdout, --window or --episode-length, or use more data")
    first = max(lo, data.first_defined - env.window) if env.feature_names else lo
    if first > lo and split - first < needed:
        raise UsageError(
            f"{config.data}: every feature ({env.features}) is defined from {_day(stamps[data.first_defined])} on, "
            f"which leaves {max(0, split - first)} bars for training episodes (counting the window before the first "
            f"decision); one episode needs window + episode-length + 1 = {needed}; use a longer file, lower "
            f"--holdout or --episode-length, or shorten the features' warm-up")
    if config.holdout > 0 and held < MIN_HOLDOUT_BARS:
        raise UsageError(f"--holdout {config.holdout:g} keeps {held} of {hi - lo} bars out of training; a hold-out "
                         f"needs at least {MIN_HOLDOUT_BARS}; raise --holdout, or pass --holdout 0 to train on all")
    return DataSplit(lo, split, hi)


def load_training_data(config: TrainConfig) -> tuple[MarketData, DataSplit]:
    """``--data`` loaded and split; UsageError (one line) for a bad file or split."""
    assert config.data is not None
    try:
        data = load_ohlcv(config.data, config.date_format,
                          min_rows=config.env.window + config.env.episode_length + 1,
                          features=config.env.feature_names)
    except DataError as err:
        raise UsageError(str(err)) from None
    return data, split_data(data, config)


def _day(stamp: Any) -> str:
    return str(pd.Timestamp(stamp))


class Holdout:
    """The backtest rank 0 runs at every checkpoint: held-out bars of ``data``, or held-out
    simulated episodes when ``data`` is None. Greedy actions, the training env's costs."""

    def __init__(self, config: TrainConfig, data: Optional[MarketData], split: Optional[DataSplit]) -> None:
        self.config, self.data, self.split = config, data, split
        self.env = config.env

    @classmethod
    def of(cls, config: TrainConfig, data: Optional[MarketData], split: Optional[DataSplit]) -> Optional["Holdout"]:
        """The run's hold-out, or None when it has none (``--holdout 0``, or ``--holdout-episodes 0``)."""
        if config.holdout <= 0:
            return None
        if data is not None:  # split_data keeps at least MIN_HOLDOUT_BARS out whenever holdout > 0
            assert split is not None and split.holdout_bars >= MIN_HOLDOUT_BARS
            return cls(config, data, split)
        return cls(config, None, None) if config.holdout_episodes > 0 else None

    def run(self, agent: RecurrentActorCritic, device: torch.device) -> BacktestResult:
        """The hold-out backtest of ``agent``'s current weights (touches no global RNG)."""
        if self.data is not None:
            assert self.split is not None
            lo, hi = self.split.backtest_span(self.env.window)
            return backtest_history(agent, self.env, self.data, lo, hi, greedy=True, device=device)
        return backtest_simulated(agent, self.env, self.config.holdout_episodes, self.config.seed, greedy=True,
                                  device=device)

    def describe(self) -> str:
        """The start-up line: what is held out and how best.pt is chosen."""
        if self.data is not None:
            assert self.split is not None
            s, stamps = self.split, self.data.timestamps
            return (f"Hold-out: the last {s.holdout_bars} bars of {self.config.data} ({_day(stamps[s.split])} to "
                    f"{_day(stamps[s.hi - 1])}) are kept out of training; training uses bars "
                    f"{_day(stamps[s.lo])} to {_day(stamps[s.split - 1])}. Each checkpoint is backtested on the "
                    f"hold-out; best.pt is the best hold-out return")
        return (f"Hold-out: {self.config.holdout_episodes} simulated '{self.env.market}' episodes on evaluation seeds no training "
                f"env draws, backtested at each checkpoint; best.pt is the best hold-out return")

    def evaluate_command(self, checkpoint: str) -> str:
        """The ``evaluate-ppo-lstm`` command that runs this backtest on ``checkpoint``."""
        words = ["evaluate-ppo-lstm", "--checkpoint", checkpoint]
        if self.data is not None:
            assert self.split is not None
            lo, hi = self.split.backtest_span(self.env.window)
            words += ["--data", str(self.config.data), "--start", _iso(self.data.timestamps[lo]),
                      "--end", _iso(self.data.timestamps[hi - 1])]
            if self.config.date_format:
                words += ["--date-format", self.config.date_format]
        else:
            words += ["--episodes", str(self.config.holdout_episodes), "--seed", str(self.config.seed)]
        return " ".join(shlex.quote(w) for w in words)


def _iso(stamp: Any) -> str:
    """A bar's stamp with its time of day (``2024-01-05T00:00:00``), so that ``--end``
    selects exactly up to that bar rather than its whole day."""
    return pd.Timestamp(stamp).isoformat()


def _pct(value: Optional[float], signed: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+.2f}%" if signed else f"{value:.2f}%"


def holdout_line(episode: int, result: BacktestResult) -> str:
    """``Holdout @ episode N - Return: x%, Sharpe: y, Max DD: z%, Buy&Hold: w%``."""
    agent = result.agent
    sharpe = "-" if agent.sharpe is None else f"{agent.sharpe:.2f}"
    return (f"Holdout @ episode {episode} - Return: {_pct(agent.total_return_pct)}, Sharpe: {sharpe}, "
            f"Max DD: {_pct(agent.max_drawdown_pct, signed=False)}, "
            f"Buy&Hold: {_pct(result.buy_and_hold.total_return_pct)}")


def holdout_columns(result: BacktestResult) -> dict[str, Any]:
    """The :data:`HOLDOUT_COLUMNS` of a metrics.csv row (None where a figure is undefined)."""
    agent = result.agent
    columns = {"holdout_return_pct": round(agent.total_return_pct, 6), "holdout_sharpe": agent.sharpe,
            "holdout_max_drawdown_pct": round(agent.max_drawdown_pct, 6), "holdout_trades": agent.trades,
            "holdout_exposure_pct": agent.exposure_pct,
            "holdout_buy_and_hold_pct": round(result.buy_and_hold.total_return_pct, 6)}
    assert tuple(columns) == HOLDOUT_COLUMNS
    return columns
