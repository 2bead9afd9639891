"""The hold-out: which bars of ``--data`` train and which are held out, and the backtest
rank 0 runs on what is held out at every checkpoint.

With ``--data``, bars ``lo..hi-1`` are those ``--data-start`` / ``--data-end`` select
(default: the whole file). The last ``round(holdout * (hi - lo))`` of them are held out:
training episodes lie within bars ``lo..split-1`` and never read a later bar. The
hold-out backtest is :func:`ppo_lstm.evaluation.backtest.backtest_history` on bars
``split..hi-1``: its first decision is taken at the close of the first held-out bar
``split`` (its window: the bars before it, past and so no look-ahead) and its first
trade fills at bar ``split+1``'s open, so the bars after ``split`` are scored and none
is trained on. ``evaluate-ppo-lstm --data FILE --start <bar split> --end <bar hi-1>``
runs exactly that backtest (:meth:`Holdout.evaluate_command`).

With several instruments (``--data A.csv B.csv``, or a directory), the hold-out is ONE cut
in time for all of them (:func:`split_instruments`): the selected bars of every instrument
are pooled, and the cut is the stamp of the first of the last ``round(holdout * pooled)``
of them; every bar that starts at or after it is held out (so bars of other instruments at
the same stamp are too), every bar that ends by it may train (:func:`bar_ends`: a stamp is
a bar's start, a bar lasts the file's median spacing). A bar that starts before the cut and
ends after it (a daily bar of the cut's day beside hourly bars) is neither trained on nor
scored (``DataSplit.gap``). So no training bar of any instrument ends later than the first
held-out bar of any other starts (markets move together). Each instrument's hold-out is
backtested on its own; the hold-out line gives the mean over instruments of each figure,
metrics.csv adds every instrument's figures (columns ``<file name>:holdout_...``) and
best.pt is the best mean return. An instrument the cut leaves fewer than ``window + 2``
held-out bars is warned about at start-up and left out of the means (unless all are).

Without ``--data``, the hold-out is :func:`ppo_lstm.evaluation.backtest.backtest_simulated` on
``--holdout-episodes`` paths of the training market seeded by
``evaluation_seeds(seed, episodes)``, seeds that no training env ever draws.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
import torch

from envs.data.errors import DataError
from envs.data.instruments import instrument_name, load_instruments

from ..algo.agent import RecurrentActorCritic
from ..evaluation.backtest import BacktestResult, backtest_history, backtest_simulated, iso_stamp
from ..config.schema import TrainConfig
from ..errors import UsageError
from ..rundir.logger import HOLDOUT_COLUMNS

if TYPE_CHECKING:
    from envs.data import MarketData

MIN_HOLDOUT_BARS = 3  # the fewest held-out bars a backtest can score with a Sharpe ratio (the first decides)


@dataclass(frozen=True)
class DataSplit:
    """Bars of ``--data``: training episodes lie within ``lo..split-1``, the hold-out is
    ``split..hi-1`` (``split == hi``: no hold-out)."""

    lo: int
    split: int
    hi: int
    gap: int = 0  # bars before ``split`` that span the cut of several instruments: neither trained on nor scored

    @property
    def train_span(self) -> tuple[int, int]:
        return self.lo, self.split - self.gap

    @property
    def holdout_bars(self) -> int:
        return self.hi - self.split

    def backtest_span(self) -> tuple[int, int]:
        """The bars ``backtest_history`` is given: the held-out ``split..hi-1`` (it decides
        first at the close of ``split``)."""
        return self.split, self.hi


def split_data(data: MarketData, config: TrainConfig) -> DataSplit:
    """The training and hold-out bars of ``data`` under ``config``; UsageError (one line)
    when the dates select nothing or either part is too short."""
    from envs.data import date_span  # the loader's, imported with the data

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


def split_instruments(datas: Sequence[MarketData], config: TrainConfig) -> list[DataSplit]:
    """The splits of several instruments at one cut in time (the module docstring); one
    instrument: :func:`split_data`. UsageError (one line, naming the instrument) when the
    dates select nothing of one, or the cut leaves one too few training or held-out bars."""
    if len(datas) == 1:
        return [split_data(datas[0], config)]
    from envs.data import date_span

    spans = []
    for data in datas:
        try:
            spans.append(date_span(data, config.data_start, config.data_end, flags=("--data-start", "--data-end")))
        except DataError as err:
            raise UsageError(str(err)) from None
    pooled = np.sort(np.concatenate([d.timestamps[lo:hi] for d, (lo, hi) in zip(datas, spans)]))
    held = int(round(config.holdout * len(pooled))) if config.holdout > 0 else 0
    cut = pooled[len(pooled) - held] if held else None
    env = config.env
    needed = env.window + env.episode_length + 1
    splits = []
    for data, (lo, hi) in zip(datas, spans):
        split = hi if cut is None else int(np.clip(np.searchsorted(data.timestamps, cut, side="left"), lo, hi))
        # a bar that starts before the cut but ends after it (a daily bar of the cut's day beside hourly bars)
        trained = split if cut is None else int(np.clip(np.searchsorted(bar_ends(data.timestamps), cut, "right"),
                                                        lo, split))
        first = max(lo, data.first_defined - env.window) if env.feature_names else lo
        if trained - first < needed:
            where = f"before the hold-out's cut at {_day(cut)}" if cut is not None else "selected"
            raise UsageError(
                f"{data.source}: {max(0, trained - first)} bars of this instrument end {where}; one training episode "
                f"needs window + episode-length + 1 = {needed}; lower --holdout, --window or --episode-length, "
                f"narrow --data-start, or leave the instrument out")
        if cut is not None and hi - split < MIN_HOLDOUT_BARS:
            raise UsageError(
                f"{data.source}: {hi - split} bars of this instrument are at or after the hold-out's cut at "
                f"{_day(cut)} (one cut in time for all instruments); a hold-out needs at least {MIN_HOLDOUT_BARS}; "
                f"set --data-end to a date all instruments reach, or leave the instrument out")
        splits.append(DataSplit(lo, split, hi, split - trained))
    return splits


def bar_ends(stamps: np.ndarray) -> np.ndarray:
    """[n] datetime64: when each bar of ``stamps`` [n] (its start times, increasing) ends: its
    start plus the file's usual bar length (the median spacing), but no later than the next
    bar's start (a gap, such as a weekend, is not part of a bar)."""
    stamps = np.asarray(stamps)
    if len(stamps) < 2:
        return stamps.copy()
    spacing = np.diff(stamps)
    return np.minimum(stamps + np.median(spacing.astype(np.int64)).astype(spacing.dtype),
                      np.r_[stamps[1:], stamps[-1:] + spacing.max()])


def load_training_data(config: TrainConfig) -> tuple[list[MarketData], list[DataSplit]]:
    """``--data``'s instruments loaded and split; UsageError (one line) for a bad file or split."""
    assert config.data is not None
    try:
        datas = load_instruments(config.data, config.date_format,
                                 min_rows=config.env.window + config.env.episode_length + 1,
                                 features=config.env.feature_names)
    except DataError as err:
        raise UsageError(str(err)) from None
    return datas, split_instruments(datas, config)


@dataclass
class InstrumentsResult:
    """The hold-out backtests of several instruments, by instrument name; ``counted``: the names
    the means are taken over (None: all)."""

    results: dict[str, BacktestResult]
    counted: Optional[tuple[str, ...]] = None

    def mean(self, figure: str, of: str = "agent") -> Optional[float]:
        """Equal-weight mean of one figure over the counted instruments where it is defined (None if nowhere)."""
        names = self.results if self.counted is None else self.counted
        values = [getattr(getattr(self.results[n], of), figure) for n in names]
        values = [float(v) for v in values if v is not None and math.isfinite(v)]
        return sum(values) / len(values) if values else None


HoldoutResult = Union[BacktestResult, InstrumentsResult]


def _day(stamp: Any) -> str:
    import pandas as pd  # imported here, with the data: a run on a simulated market never loads pandas

    return str(pd.Timestamp(stamp))


class Holdout:
    """The backtest rank 0 runs at every checkpoint: held-out bars of ``data`` (one instrument
    or a list of them, with one split each), or held-out simulated episodes when ``data`` is
    None. Greedy actions, the training env's costs."""

    def __init__(self, config: TrainConfig, data: Union[MarketData, Sequence[MarketData], None],
                 split: Union[DataSplit, Sequence[DataSplit], None]) -> None:
        if data is not None:
            from envs.data import MarketData  # the loader's, imported with the data
        datas = None if data is None else ([data] if isinstance(data, MarketData) else list(data))
        splits = None if split is None else ([split] if isinstance(split, DataSplit) else list(split))
        self.config, self.datas, self.splits = config, datas, splits
        self.data = datas[0] if datas and len(datas) == 1 else None  # one instrument: as it always was
        self.split = splits[0] if splits and len(splits) == 1 else None
        self.env = config.env

    @property
    def instruments(self) -> int:
        """How many instruments are held out (0: simulated)."""
        return len(self.datas) if self.datas else 0

    def short_holdouts(self) -> dict[str, int]:
        """Instruments the cut leaves fewer than ``window + 2`` held-out bars, by name: their held-out bars."""
        if self.instruments < 2:
            return {}
        assert self.datas is not None and self.splits is not None
        return {instrument_name(d.source): s.holdout_bars for d, s in zip(self.datas, self.splits)
                if s.holdout_bars < self.env.window + 2}

    def counted(self) -> Optional[tuple[str, ...]]:
        """The instruments the hold-out means (and so best.pt) are taken over: those with at
        least ``window + 2`` held-out bars, or all when none has (None: all)."""
        short = self.short_holdouts()
        assert self.datas is not None or not short
        kept = tuple(n for n in map(instrument_name, (d.source for d in self.datas or ())) if n not in short)
        return kept if short and kept else None

    def warnings(self) -> list[str]:
        """One start-up line per instrument with a short hold-out: its numbers and what is done with it."""
        short, kept = self.short_holdouts(), self.counted()
        need = self.env.window + 2
        fate = ("its figures are in metrics.csv, but it is left out of the mean that picks best.pt" if kept else
                "every instrument has as few, so the mean counts them all")
        return [f"Warning: {name} keeps {bars} held-out bars after the one cut in time, fewer than window + 2 = "
                f"{need}; {fate} (lower --data-end to a date every instrument reaches, or raise --holdout)"
                for name, bars in short.items()]

    @classmethod
    def of(cls, config: TrainConfig, data: Union[MarketData, Sequence[MarketData], None],
           split: Union[DataSplit, Sequence[DataSplit], None]) -> Optional["Holdout"]:
        """The run's hold-out, or None when it has none (``--holdout 0``, or ``--holdout-episodes 0``)."""
        if config.holdout <= 0:
            return None
        if data is not None:  # the splits keep at least MIN_HOLDOUT_BARS out whenever holdout > 0
            assert split is not None
            return cls(config, data, split)
        return cls(config, None, None) if config.holdout_episodes > 0 else None

    def run(self, agent: RecurrentActorCritic, device: torch.device) -> HoldoutResult:
        """The hold-out backtest of ``agent``'s current weights (touches no global RNG)."""
        if self.instruments > 1:
            assert self.datas is not None and self.splits is not None
            results = {}
            for data, split in zip(self.datas, self.splits):
                lo, hi = split.backtest_span()
                results[instrument_name(data.source)] = backtest_history(agent, self.env, data, lo, hi, greedy=True,
                                                                         device=device)
            return InstrumentsResult(results, self.counted())
        if self.data is not None:
            assert self.split is not None
            lo, hi = self.split.backtest_span()
            return backtest_history(agent, self.env, self.data, lo, hi, greedy=True, device=device)
        return backtest_simulated(agent, self.env, self.config.holdout_episodes, self.config.seed, greedy=True,
                                  device=device)

    def extra_columns(self) -> tuple[str, ...]:
        """metrics.csv's per-instrument columns (none for one instrument or a simulated hold-out)."""
        if self.instruments < 2:
            return ()
        assert self.datas is not None
        return tuple(f"{instrument_name(d.source)}:{c}" for d in self.datas for c in HOLDOUT_COLUMNS)

    def describe(self) -> str:
        """The start-up line: what is held out and how best.pt is chosen."""
        if self.instruments > 1:
            assert self.datas is not None and self.splits is not None
            first = min(d.timestamps[s.split] for d, s in zip(self.datas, self.splits))
            parts = ", ".join(f"{instrument_name(d.source)} {s.holdout_bars} bars (training {s.train_span[1] - s.lo}"
                              + (f"; its bar of {_day(d.timestamps[s.split - 1])} spans the cut: neither trained "
                                 f"on nor scored" if s.gap else "") + ")"
                              for d, s in zip(self.datas, self.splits))
            return (f"Hold-out: one cut in time for all {self.instruments} instruments: bars from {_day(first)} on are "
                    f"kept out of training ({parts}). Each checkpoint is backtested on every instrument's hold-out; "
                    f"the line shows the mean over instruments, metrics.csv each one's figures; best.pt is the best "
                    f"mean hold-out return")
        if self.data is not None:
            assert self.split is not None
            s, stamps = self.split, self.data.timestamps
            return (f"Hold-out: the last {s.holdout_bars} bars of {self.config.data} ({_day(stamps[s.split])} to "
                    f"{_day(stamps[s.hi - 1])}) are kept out of training; training uses bars "
                    f"{_day(stamps[s.lo])} to {_day(stamps[s.split - 1])}. Each checkpoint is backtested on the "
                    f"hold-out; best.pt is the best hold-out return")
        return (f"Hold-out: {self.config.holdout_episodes} simulated '{self.env.market}' episodes "
                f"on evaluation seeds no training "
                f"env draws, backtested at each checkpoint; best.pt is the best hold-out return")

    def evaluate_commands(self, checkpoint: str) -> list[str]:
        """The ``evaluate-ppo-lstm`` commands that run this backtest on ``checkpoint``: one,
        or one per instrument (each instrument's hold-out starts at its own bar)."""
        if self.instruments < 2:
            return [self.evaluate_command(checkpoint)]
        assert self.datas is not None and self.splits is not None
        out = []
        for data, split in zip(self.datas, self.splits):
            lo, hi = split.backtest_span()
            words = ["evaluate-ppo-lstm", "--checkpoint", checkpoint, "--data", data.source, "--start",
                     iso_stamp(data.timestamps[lo]), "--end", iso_stamp(data.timestamps[hi - 1])]
            if self.config.date_format:
                words += ["--date-format", self.config.date_format]
            out.append(" ".join(shlex.quote(w) for w in words))
        return out

    def evaluate_command(self, checkpoint: str) -> str:
        """The ``evaluate-ppo-lstm`` command that runs this backtest on ``checkpoint``."""
        words = ["evaluate-ppo-lstm", "--checkpoint", checkpoint]
        if self.data is not None:
            assert self.split is not None
            lo, hi = self.split.backtest_span()
            words += ["--data", str(self.config.data), "--start", iso_stamp(self.data.timestamps[lo]),
                      "--end", iso_stamp(self.data.timestamps[hi - 1])]
            if self.config.date_format:
                words += ["--date-format", self.config.date_format]
        else:
            words += ["--episodes", str(self.config.holdout_episodes), "--seed", str(self.config.seed)]
        return " ".join(shlex.quote(w) for w in words)


def _pct(value: Optional[float], signed: bool = True) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:+.2f}%" if signed else f"{value:.2f}%"


def holdout_score(result: HoldoutResult) -> float:
    """What best.pt is chosen by: the hold-out return (the mean over instruments)."""
    if isinstance(result, InstrumentsResult):
        mean = result.mean("total_return_pct")
        return -math.inf if mean is None else mean
    return result.agent.total_return_pct


def holdout_line(episode: int, result: HoldoutResult) -> str:
    """``Holdout @ episode N - Return: x%, Sharpe: y, Max DD: z%, Buy&Hold: w%`` (with several
    instruments, each the mean over them, and `` (mean of K instruments)``)."""
    if isinstance(result, InstrumentsResult):
        sharpe = result.mean("sharpe")
        return (f"Holdout @ episode {episode} - Return: {_pct(result.mean('total_return_pct'))}, Sharpe: "
                f"{'-' if sharpe is None else f'{sharpe:.2f}'}, "
                f"Max DD: {_pct(result.mean('max_drawdown_pct'), signed=False)}, "
                f"Buy&Hold: {_pct(result.mean('total_return_pct', 'buy_and_hold'))} "
                f"(mean of {_counted(result)}{len(result.results)} instruments)")
    agent = result.agent
    sharpe = "-" if agent.sharpe is None else f"{agent.sharpe:.2f}"
    return (f"Holdout @ episode {episode} - Return: {_pct(agent.total_return_pct)}, Sharpe: {sharpe}, "
            f"Max DD: {_pct(agent.max_drawdown_pct, signed=False)}, "
            f"Buy&Hold: {_pct(result.buy_and_hold.total_return_pct)}")


def _counted(result: InstrumentsResult) -> str:
    return "" if result.counted is None else f"{len(result.counted)} of "


def holdout_columns(result: HoldoutResult) -> dict[str, Any]:
    """The :data:`HOLDOUT_COLUMNS` of a metrics.csv row (None where a figure is undefined); with
    several instruments, their means, then each instrument's as ``<name>:<column>``."""
    if isinstance(result, InstrumentsResult):
        means = {"holdout_return_pct": result.mean("total_return_pct"), "holdout_sharpe": result.mean("sharpe"),
                 "holdout_max_drawdown_pct": result.mean("max_drawdown_pct"), "holdout_trades": result.mean("trades"),
                 "holdout_exposure_pct": result.mean("exposure_pct"),
                 "holdout_buy_and_hold_pct": result.mean("total_return_pct", "buy_and_hold")}
        columns = {k: (None if v is None else round(v, 6)) for k, v in means.items()}
        for name, one in result.results.items():
            columns.update({f"{name}:{k}": v for k, v in holdout_columns(one).items()})
        return columns
    agent = result.agent
    columns = {"holdout_return_pct": round(agent.total_return_pct, 6), "holdout_sharpe": agent.sharpe,
            "holdout_max_drawdown_pct": round(agent.max_drawdown_pct, 6), "holdout_trades": agent.trades,
            "holdout_exposure_pct": agent.exposure_pct,
            "holdout_buy_and_hold_pct": round(result.buy_and_hold.total_return_pct, 6)}
    assert tuple(columns) == HOLDOUT_COLUMNS
    return columns
