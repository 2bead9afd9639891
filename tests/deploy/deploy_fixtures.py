"""Shared by the deploy tests (test_policy, test_predict, test_onnx): a CSV of daily bars and a
tiny model trained on it by the training CLI's main() (in this process: ``cli_in_process``); and
the same with two feature columns."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import TINY, cli_in_process

BARS = 260
FEATURES = "vol_z,Mom"  # as the training command names them: the file has Vol_Z and mom
VOL_WARMUP = 30  # Vol_Z's leading NaN rows (mom has 10): every feature is defined from bar 30 on


def write_prices(path: Path, bars: int = BARS, seed: int = 5) -> pd.DataFrame:
    """``bars`` business days of a random walk with regimes of drift, in cents, opens off the
    previous close; with a Volume column."""
    rng = np.random.default_rng(seed)
    drift = np.repeat(rng.choice([-0.004, 0.004], size=bars // 20 + 1), 20)[:bars]
    close = np.round(100.0 * np.exp(np.cumsum(drift + 0.012 * rng.standard_normal(bars))), 2)
    open_ = np.round(np.r_[100.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(bars)), 2)
    frame = pd.DataFrame({"Date": pd.bdate_range("2021-01-01", periods=bars).strftime("%Y-%m-%d"),
                          "Open": open_, "High": np.maximum(open_, close) + 0.25,
                          "Low": np.minimum(open_, close) - 0.25, "Close": close,
                          "Volume": rng.integers(1000, 5000, bars)})
    frame.to_csv(path, index=False)
    return frame


def write_featured_prices(path: Path, bars: int = BARS, seed: int = 5) -> pd.DataFrame:
    """``write_prices``'s bars with two indicator columns that start with NaN rows, as real
    indicators do: ``Vol_Z`` (30-bar volatility of the log returns, in %: NaN for bars 0..29)
    and ``mom`` (10-bar momentum: NaN for bars 0..9)."""
    frame = write_prices(path, bars, seed)
    returns = np.log(frame["Close"]).diff()
    frame["Vol_Z"] = np.round(100.0 * returns.rolling(VOL_WARMUP).std(), 6)
    frame["mom"] = np.round(frame["Close"] / frame["Close"].shift(10) - 1.0, 6)
    assert frame["Vol_Z"].isna().sum() == VOL_WARMUP and frame["mom"].isna().sum() == 10
    frame.to_csv(path, index=False)
    return frame


def featured_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with prices.csv (``write_featured_prices``) and checkpoints/ of a tiny model
    trained on it with ``--features vol_z,Mom``, trained once per test session and shared by
    the pytest-xdist workers (under a file lock). Tests read it; they write elsewhere."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, common to its workers
    cwd = base / "deploy-featured"
    with open(base / "deploy-featured.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cwd / "trained").exists():
            cwd.mkdir(exist_ok=True)
            write_featured_prices(cwd / "prices.csv")
            result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval",
                                    "8", "--features", FEATURES)
            assert result.returncode == 0, result.output
            (cwd / "trained").write_text("ok\n")
    return cwd


def train_tiny(cwd: Path, *extra: str) -> Path:
    """Train a tiny model on ``cwd/prices.csv`` (written here); returns its best.pt."""
    write_prices(cwd / "prices.csv")
    result = cli_in_process(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8",
                            *extra)
    assert result.returncode == 0, result.output
    return cwd / "checkpoints" / "best.pt"


def write_head(source: Path, target: Path, rows: int) -> Path:
    """The header and the first ``rows`` data rows of a CSV (a file as it stood earlier)."""
    lines = source.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[: rows + 1]))
    return target
