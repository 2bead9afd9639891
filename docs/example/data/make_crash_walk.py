"""Write ``crash_walk.csv``: 8,000 business-day bars of a driftless geometric random walk (log
returns N(0, 1 %), no signal of any kind) whose last 3,000 bars fell 69 % (t = -2.08 for their
drift). docs/walkforward.md walks forward on it to show that being out of a falling market is not
an edge.

    python docs/example/data/make_crash_walk.py   # writes docs/example/data/crash_walk.csv
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
SEED = 3  # the first seed of [0x435241, seed] whose last 3,000 bars fell by more than 60 %


def crash_walk(bars: int = 8000, seed: int = SEED) -> pd.DataFrame:
    """OHLCV bars of the walk: each bar opens at the previous close."""
    rng = np.random.default_rng([0x435241, seed])
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[100.0, close[:-1]]
    return pd.DataFrame({"Date": pd.bdate_range("1990-01-01", periods=bars).strftime("%Y-%m-%d"), "Open": open_,
                         "High": np.maximum(open_, close), "Low": np.minimum(open_, close), "Close": close,
                         "Volume": 1000})


if __name__ == "__main__":
    frame = crash_walk()
    frame.to_csv(HERE / "crash_walk.csv", index=False, float_format="%.10g")
    close = frame["Close"].to_numpy()
    print(f"wrote {HERE / 'crash_walk.csv'}: the last 3,000 bars fell {100 * (close[-1] / close[-3001] - 1):.1f} %")
