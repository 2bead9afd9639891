"""bench/family_signal_view.py's figures on a known AR(1): its autocorrelation and half-life, and
the share of its variance a short rolling window absorbs against a long one (no files, no rule)."""
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.family_signal_view import half_life, rolling_mean, view  # noqa: E402


def ar1(phi: float, bars: int, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.empty(bars)
    x[0] = rng.standard_normal()
    shocks = rng.standard_normal(bars) * math.sqrt(1.0 - phi ** 2)
    for t in range(1, bars):
        x[t] = phi * x[t - 1] + shocks[t]
    return x


def test_half_life_and_rolling_mean():
    assert math.isclose(half_life(0.5), 1.0) and half_life(1.0) == math.inf
    np.testing.assert_allclose(rolling_mean(np.arange(5.0), 2), [0.5, 1.5, 2.5, 3.5])


def test_a_slow_columns_level_is_absorbed_by_a_short_window_and_kept_by_a_long_one():
    phi = 0.5 ** (1 / 50)  # a half-life of 50 bars
    x = ar1(phi, 30_000)
    nxt = 0.05 * x + np.random.default_rng(6).standard_normal(len(x))
    raw, short, long_ = view(x, nxt, [128, 2048], skip=2048)
    assert abs(raw["acf1"] - phi) < 0.01 and math.isclose(raw["corr"], 1.0) and math.isclose(raw["ic_kept"], 1.0)
    assert short["absorbed"] > 0.4 > 0.15 > long_["absorbed"]  # ~2.9 h / N: 1.1 (capped below 1) and 0.07
    assert short["half_life"] < long_["half_life"] and long_["corr"] > 0.9 > short["corr"]
