"""Shared by the deploy tests (test_policy, test_predict, test_onnx): a CSV of daily bars and a
tiny model trained on it by the real training CLI."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from conftest import TINY, run_cli

BARS = 260


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


def train_tiny(cwd: Path, *extra: str) -> Path:
    """Train a tiny model on ``cwd/prices.csv`` (written here); returns its best.pt."""
    write_prices(cwd / "prices.csv")
    result = run_cli(cwd, *TINY, "--data", "prices.csv", "--episodes", "16", "--checkpoint-interval", "8", *extra)
    assert result.returncode == 0, result.output
    return cwd / "checkpoints" / "best.pt"


def write_head(source: Path, target: Path, rows: int) -> Path:
    """The header and the first ``rows`` data rows of a CSV (a file as it stood earlier)."""
    lines = source.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[: rows + 1]))
    return target
