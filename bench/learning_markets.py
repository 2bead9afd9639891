"""The markets of ``bench/learning.py``: their env settings, and the CSV files of its file-based markets.

Markets: regime-1bp, regime-10bps, ou-10bps, regime-10bps-csv, signal-5bps (fee as named,
slippage 0, every other EnvConfig field at its default). ``write_regime_csv`` and
``write_signal_csv`` write a training file and a later, disjoint test file; ``write_process_csv``
does for a regime or ou path with other parameters (``bench/family_draw.py``'s variants).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from envs.config import EnvConfig  # noqa: E402
from envs.markets.processes import DEFAULTS, PROCESSES, _log_returns, paths_from_noise, regime_drift  # noqa: E402

MARKETS: dict[str, dict[str, Any]] = {
    "regime-1bp": {"market": "regime", "fee_bps": 1.0},
    "regime-10bps": {"market": "regime", "fee_bps": 10.0},
    "ou-10bps": {"market": "ou", "fee_bps": 10.0},
    "regime-10bps-csv": {"market": "regime", "fee_bps": 10.0, "csv": "regime"},
    # the edge is only in a feature column: see write_signal_csv
    "signal-5bps": {"market": "gbm", "fee_bps": 5.0, "csv": "signal", "model": "signal",
                    "features": "signal,noise", "additive": True},
}
SIGNAL_PHI, SIGNAL_EDGE, SIGNAL_NOISE = 0.9, 0.0015, 0.01  # AR(1) coefficient; next log return = EDGE s + NOISE e
DEFAULT_MARKETS = "regime-1bp,regime-10bps,ou-10bps"
EVAL_SEED = 0  # test paths: evaluation_seeds(EVAL_SEED, episodes), >= 2**64
TUNE_EPISODES = 64  # per training env: the first 8 x 64 training paths of seed 1 tune the thresholds
CSV_TRAIN_BARS, CSV_TEST_BARS = 60_000, 20_000


def env_config(name: str) -> EnvConfig:
    spec = {k: v for k, v in MARKETS[name].items() if k not in ("csv", "model", "additive")}
    return EnvConfig(slippage_bps=0.0, **spec)



def write_regime_csv(directory: Path, seed: int) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """One continuous regime path (default parameters) split into a training file (the first
    CSV_TRAIN_BARS bars) and a later test file; returns both paths and their hidden drifts."""
    bars = CSV_TRAIN_BARS + CSV_TEST_BARS
    rng = np.random.default_rng([0x43535600, seed])
    u = rng.random((1, 8))
    u[0, 0] = 0.5  # start price ~32: keeps 80k bars of trends within printable prices
    z = rng.standard_normal((1, bars))
    ext = rng.random((1, bars))
    aux = rng.standard_normal((1, 3, bars))
    p = paths_from_noise("regime", u, z, ext, aux=aux)
    drift = regime_drift("regime", u, ext)[0]
    time_index = pd.date_range("2001-01-01", periods=bars, freq="h")
    frame = pd.DataFrame({"Date": time_index.strftime("%Y-%m-%d %H:%M:%S"),
                          **{k.capitalize(): p[k][0] for k in ("open", "high", "low", "close", "volume")}})
    train, test = directory / "regime_train.csv", directory / "regime_test.csv"
    frame.iloc[:CSV_TRAIN_BARS].to_csv(train, index=False, float_format="%.12g")
    frame.iloc[CSV_TRAIN_BARS:].to_csv(test, index=False, float_format="%.12g")
    return train, test, drift[:CSV_TRAIN_BARS], drift[CSV_TRAIN_BARS:]


def _write_split(frame: pd.DataFrame, directory: Path, prefix: str, train_bars: int) -> tuple[Path, Path]:
    """The first ``train_bars`` rows of ``frame`` to ``<prefix>_train.csv``, the rest to ``<prefix>_test.csv``."""
    train, test = directory / f"{prefix}_train.csv", directory / f"{prefix}_test.csv"
    frame.iloc[:train_bars].to_csv(train, index=False, float_format="%.12g")
    frame.iloc[train_bars:].to_csv(test, index=False, float_format="%.12g")
    return train, test


def _hourly(bars: int) -> pd.Series:
    return pd.Series(pd.date_range("2001-01-01", periods=bars, freq="h").strftime("%Y-%m-%d %H:%M:%S"))


def write_signal_csv(directory: Path, seed: int, phi: float = SIGNAL_PHI, edge: float = SIGNAL_EDGE,
                     noise_sd: float = SIGNAL_NOISE, train_bars: int = CSV_TRAIN_BARS,
                     test_bars: int = CSV_TEST_BARS, prefix: str = "signal",
                     start_price: float = 30.0) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A market whose whole edge is in a column: ``signal`` is an AR(1) with lag-1
    autocorrelation ``phi`` (default SIGNAL_PHI) and unit variance, and bar t+1's log return
    (open at bar t's close) is ``edge * signal[t] + noise_sd * e``; ``noise`` is an independent
    AR(1) of the same law, related to nothing. Hourly bars; the first ``train_bars`` train,
    the ``test_bars`` after them test (``<prefix>_train.csv``, ``<prefix>_test.csv``). Returns
    both paths and the expected next-bar log return ``edge * signal`` of every bar of each."""
    bars = train_bars + test_bars
    rng = np.random.default_rng([0x5349474E, seed])
    shocks = rng.standard_normal((2, bars)) * math.sqrt(1.0 - phi ** 2)
    ar = np.empty((2, bars))
    ar[:, 0] = rng.standard_normal(2)  # the stationary law from the first bar
    for t in range(1, bars):
        ar[:, t] = phi * ar[:, t - 1] + shocks[:, t]
    signal, noise = ar
    logret = np.empty(bars)
    logret[0] = 0.0
    logret[1:] = edge * signal[:-1] + noise_sd * rng.standard_normal(bars - 1)
    close = start_price * np.exp(np.cumsum(logret))
    open_ = np.concatenate(([close[0]], close[:-1]))
    wick = np.abs(rng.standard_normal((2, bars))) * 0.002
    frame = pd.DataFrame({"Date": _hourly(bars), "Open": open_,
                          "High": np.maximum(open_, close) * (1 + wick[0]),
                          "Low": np.minimum(open_, close) * (1 - wick[1]),
                          "Close": close, "Volume": 1000.0, "signal": signal, "noise": noise})
    train, test = _write_split(frame, directory, prefix, train_bars)
    expected = edge * signal
    return train, test, expected[:train_bars], expected[train_bars:]


def write_process_csv(directory: Path, seed: int, process: str, params: dict[str, float], train_bars: int,
                      test_bars: int, prefix: str, start_price: float = 30.0) -> tuple[Path, Path]:
    """One continuous path of ``process`` ("regime" or "ou") with the given ``params``
    (those of ``envs.markets.processes.DEFAULTS[process]``, e.g. another ``persistence``)
    instead of its defaults, from ``start_price`` (the OU's mean), cut into a training file
    (the first ``train_bars`` bars) and the ``test_bars`` after it. The log returns are
    the simulator's own (``processes._log_returns``); wicks are half a bar's sigma times
    a half-normal; volume 1000."""
    if process not in ("regime", "ou"):
        raise ValueError(f"write_process_csv draws regime or ou paths, not {process!r}")
    bars = train_bars + test_bars
    rng = np.random.default_rng([0x50524F43, seed])
    index = PROCESSES.index(process)
    p = {k: np.array([float(params.get(k, v))]) for k, v in DEFAULTS[process].items()}
    p["start"] = np.array([1.0 if rng.random() < 0.5 else -1.0])  # the first regime's sign
    z = rng.standard_normal((1, bars))
    ext = rng.random((1, bars)) if process == "regime" else None
    logret = _log_returns(index, p, z, ext, None)[0][0]
    close = start_price * np.exp(np.cumsum(logret))
    open_ = np.concatenate(([start_price], close[:-1]))
    half = 0.5 * float(p["sigma"][0]) * np.abs(rng.standard_normal((2, bars)))
    frame = pd.DataFrame({"Date": _hourly(bars), "Open": open_, "High": np.maximum(open_, close) * np.exp(half[0]),
                          "Low": np.minimum(open_, close) * np.exp(-half[1]), "Close": close, "Volume": 1000.0})
    return _write_split(frame, directory, prefix, train_bars)
