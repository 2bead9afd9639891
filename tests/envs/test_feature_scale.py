"""--features is scale-free: the constant test is relative to a column's own scale, and a value
whose square float64 cannot hold is refused at load, naming file, column and row."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from envs.data import DataError, load_ohlcv
from envs.data.features import FEATURE_MAX_ABS, FeatureNormaliser, feature_zscores


def signal(bars: int = 400, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(bars)


@pytest.mark.parametrize("scale", [1e-13, 1e-40, 1e-140, 1e6, 1e140])
def test_a_column_scaled_by_any_factor_gives_the_same_z(scale):
    x = signal() + 3.0
    expected = feature_zscores(x)
    assert np.abs(expected).max() > 1.0  # a real signal, not a constant's zeros
    np.testing.assert_allclose(feature_zscores(x * scale), expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("value", [3e-20, 0.0, 7.0, 1e140])
def test_a_constant_column_is_zero_at_every_scale(value):
    assert not np.any(feature_zscores(np.full(300, value)))


def write(path: Path, feature: np.ndarray) -> None:
    bars = len(feature)
    close = 100.0 * np.exp(np.cumsum(0.01 * signal(bars, 1)))
    pd.DataFrame({"date": pd.date_range("2020-01-01", periods=bars, freq="D").strftime("%Y-%m-%d"),
                  "open": close, "high": close * 1.01, "low": close * 0.99, "close": close,
                  "volume": 1000.0, "Sig": feature}).to_csv(path, index=False)


@pytest.mark.parametrize("value, shown", [(2e154, "2e+154"), (-1e200, "-1e+200"), (1e-160, "1e-160")])
def test_a_value_out_of_range_names_file_column_and_row(tmp_path, value, shown):
    feature = signal(60)
    feature[30] = value
    write(tmp_path / "p.csv", feature)
    with pytest.raises(DataError) as error:
        load_ohlcv(tmp_path / "p.csv", features=("sig",))
    assert str(error.value) == (
        f"{tmp_path / 'p.csv'}: feature column 'Sig' at row 31 (line 32) holds {shown}, outside the magnitudes "
        f"1e-150..1e+150 (or 0) that its rolling z-score can square in float64; rescale the column (e.g. divide "
        f"it by a power of ten: its z-score, what the agent sees, stays the same)")


def test_the_largest_values_in_range_load_and_normalise(tmp_path):
    feature = signal(60) * FEATURE_MAX_ABS / 4
    write(tmp_path / "p.csv", feature)
    z = feature_zscores(load_ohlcv(tmp_path / "p.csv", features=("sig",)).features)
    assert np.isfinite(z).all()
    np.testing.assert_allclose(z, feature_zscores(signal(60)[:, None]), rtol=0, atol=2e-5)


def test_the_live_normaliser_refuses_an_out_of_range_value():
    normaliser = FeatureNormaliser(2)
    normaliser.update([1.0, 2.0])
    with pytest.raises(ValueError, match=r"^feature 1 is 1e\+160, outside the magnitudes 1e-150..1e\+150"):
        normaliser.update([1.0, 1e160])


def _every_term_zscores(values: np.ndarray, window: int) -> np.ndarray:
    """The rule with all ``window`` terms of every row, the zero padding before the first bar
    included: the reference the shortened sums must match bit for bit."""
    from envs.data.features import _zscore

    x = np.asarray(values, dtype=np.float64)
    defined = ~np.isnan(x)
    padded = np.concatenate([np.zeros((window - 1, x.shape[1])), np.where(defined, x, 0.0)])
    padded_def = np.concatenate([np.zeros((window - 1, x.shape[1])), defined.astype(np.float64)])
    n, last = len(x), len(padded)
    total, count, spread = (np.zeros_like(x) for _ in range(3))
    for k in range(window):
        total += padded[last - n - k: last - k]
        count += padded_def[last - n - k: last - k]
    np.maximum(count, 1.0, out=count)
    mean = total / count
    for k in range(window):
        d = (padded[last - n - k: last - k] - mean) * padded_def[last - n - k: last - k]
        spread += d * d
    z = _zscore(np.where(defined, x, 0.0), mean, np.sqrt(spread / count))
    z[~defined] = np.nan
    return z.astype(np.float32)


@pytest.mark.parametrize("window", [4, 40, 1024])
def test_the_padding_terms_left_out_change_no_bit(window):
    """A history shorter than the window (or its first bars) sums only its own rows: the same
    float32 bits as summing the padding's zeros too, with NaN rows and -0.0 values about."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((60, 3)) * np.array([1e-3, 1.0, 1e4])
    values[:5, 0] = np.nan
    values[10:14, 1] = -0.0
    values[20, 2] = 0.0
    expected = _every_term_zscores(values, window)
    assert np.array_equal(feature_zscores(values, window), expected, equal_nan=True)
    assert np.array_equal(feature_zscores(values, window, last=7), expected[-7:], equal_nan=True)
