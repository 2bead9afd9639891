"""Which bars of ``--data`` train and which are held out (``--holdout``, ``--data-start``,
``--data-end``), for the trainer, tune and the walk-forward.

With ``--data``, bars ``lo..hi-1`` are those ``--data-start`` / ``--data-end`` select
(default: the whole file). The last ``round(holdout * (hi - lo))`` of them are held out:
training episodes lie within bars ``lo..split-1`` and never read a later bar.

With several instruments (``--data A.csv B.csv``, or a directory), the hold-out is ONE cut
in time for all of them (:func:`split_instruments`): the selected bars of every instrument
are pooled, and the cut is the stamp of the first of the last ``round(holdout * pooled)``
of them; every bar that starts at or after it is held out (so bars of other instruments at
the same stamp are too), every bar that ends by it may train (:func:`bar_ends`: a stamp is
a bar's start, a bar lasts the file's median spacing). A bar that starts before the cut and
ends after it (a daily bar of the cut's day beside hourly bars) is neither trained on nor
scored (``DataSplit.gap``). So no training bar of any instrument ends later than the first
held-out bar of any other starts (markets move together).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from envs.data.errors import DataError
from envs.data.instruments import load_instruments

from .config.schema import TrainConfig
from .errors import UsageError

if TYPE_CHECKING:
    from envs.data import MarketData

MIN_HOLDOUT_BARS = 3  # the fewest held-out bars a backtest can score with a Sharpe ratio (the first decides)


def bars_sha256(data: MarketData, lo: int, hi: int) -> str:
    """SHA-256 of bars ``lo..hi-1`` of ``data``: their times, OHLCV and feature values (the names too)."""
    digest = hashlib.sha256()
    stamps = np.asarray(data.timestamps[lo:hi]).astype("datetime64[ns]").view(np.int64)
    digest.update(np.ascontiguousarray(stamps).tobytes())
    for column in (data.open, data.high, data.low, data.close, data.volume):
        digest.update(np.ascontiguousarray(np.asarray(column[lo:hi], dtype=np.float64)).tobytes())
    if data.features is not None and len(data.feature_names):
        digest.update(",".join(map(str, data.feature_names)).encode())
        digest.update(np.ascontiguousarray(np.asarray(data.features[lo:hi], dtype=np.float64)).tobytes())
    return digest.hexdigest()


def day(stamp: Any) -> str:
    """A bar's time as the lines print it."""
    import pandas as pd  # imported here, with the data: a run on a simulated market never loads pandas

    return str(pd.Timestamp(stamp))


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
            f"{config.data}: {split - lo} bars ({day(stamps[lo])} to {day(stamps[max(lo, split - 1)])}) are left "
            f"for training after --holdout {config.holdout:g}; one episode needs window + episode-length + 1 = "
            f"{needed}; lower --holdout, --window or --episode-length, or use more data")
    first = max(lo, data.first_defined - env.window) if env.feature_names else lo
    if first > lo and split - first < needed:
        raise UsageError(
            f"{config.data}: every feature ({env.features}) is defined from {day(stamps[data.first_defined])} on, "
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
            where = f"before the hold-out's cut at {day(cut)}" if cut is not None else "selected"
            raise UsageError(
                f"{data.source}: {max(0, trained - first)} bars of this instrument end {where}; one training episode "
                f"needs window + episode-length + 1 = {needed}; lower --holdout, --window or --episode-length, "
                f"narrow --data-start, or leave the instrument out")
        if cut is not None and hi - split < MIN_HOLDOUT_BARS:
            raise UsageError(
                f"{data.source}: {hi - split} bars of this instrument are at or after the hold-out's cut at "
                f"{day(cut)} (one cut in time for all instruments); a hold-out needs at least {MIN_HOLDOUT_BARS}; "
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
