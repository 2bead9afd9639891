"""A file's observation columns are computed once per file and setting, read-only, and are the
values each function gives on the file's bars."""
from __future__ import annotations

import numpy as np
import pytest

from envs.data import MarketData
from envs.data.features import feature_zscores
from envs.ema_deviation import ema_deviations
from envs.markets.file_columns import file_columns
from envs.observation import normalised_returns, rolling_rms


def market_data(bars: int = 600) -> MarketData:
    rng = np.random.default_rng(3)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, bars)))
    open_ = np.concatenate(([100.0], close[:-1]))
    stamps = (np.datetime64("2020-01-01") + np.arange(bars) * np.timedelta64(1, "h")).astype("datetime64[ns]")
    return MarketData(source="x.csv", timestamps=stamps, open=open_, high=np.maximum(open_, close), low=np.minimum(
        open_, close), close=close, volume=np.ones(bars), bar_seconds=3600.0, feature_names=("a",),
        features=rng.normal(size=(bars, 1)))


def test_the_columns_are_the_functions_values_once_per_file_and_setting():
    data = market_data()
    z, f = file_columns(data, 500, 8, ("a",), 64, (20,))
    assert file_columns(data, 500, 8, ("a",), 64, (20,))[0] is z  # read back, not computed again
    np.testing.assert_array_equal(z[:499], normalised_returns(data.close[:500], 8))
    assert not z[499:].any()
    np.testing.assert_array_equal(f[:500, 0], feature_zscores(data.features[:500], 64)[:, 0].astype(np.float32))
    rms = rolling_rms(data.close[:500], 8)[:, None]
    expected = ema_deviations(data.open[:1], data.close[:500, None], rms, 8, (20,))[:, 0]
    np.testing.assert_array_equal(f[:500, 1], expected[:, 0].astype(np.float32))
    assert not f[500:].any()
    with pytest.raises(ValueError):
        z[0] = 1.0  # read-only: no market can change what another reads
    other, _ = file_columns(data, 600, 8, ("a",), 64, (20,))  # another setting: its own columns
    assert other is not z and other[:499].tolist() != [0.0] * 499
    assert file_columns(market_data(), 500, 8, (), 64, ())[1] is None  # another file, no feature columns


def test_spans_ending_at_different_bars_compute_the_file_once_and_keep_each_spans_bits(monkeypatch):
    import envs.markets.file_columns as module
    data = market_data()
    calls = []
    real = module.stacked_zscores
    monkeypatch.setattr(module, "stacked_zscores", lambda *a, **k: calls.append(1) or real(*a, **k))
    his = [9, 300, 340, 380, 420, 460, 500, 540, 600]  # a backtest's episodes, each ending at its own bar
    got = [file_columns(data, hi, 8, ("a",), 64, (20,)) for hi in his]
    assert len(calls) == 1  # the whole file, once: not once per span
    for hi, (z, f) in zip(his, got):  # each span is what computing it alone gives, bit for bit
        alone_z, alone_f = module._compute(market_data(), hi, 8, ("a",), (64,), (20,))
        np.testing.assert_array_equal(z, alone_z)
        np.testing.assert_array_equal(f, alone_f)
        assert not z.flags.writeable and not f.flags.writeable
