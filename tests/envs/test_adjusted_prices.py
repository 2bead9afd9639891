"""Files with ``Adj Close``: Open/High/Low/Close all on the adjusted basis, so fills and marks agree."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from envs import TradingEnv
from envs.data import DataError, load_ohlcv

HEADER = "Date,Open,High,Low,Close,Adj Close,Volume\n"


def write_csv(tmp_path: Path, rows: list[str], header: str = HEADER, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(header + "\n".join(rows) + "\n")
    return path


def error(path: Path) -> str:
    """Load, expect DataError, check the message is one line naming the file, and return it."""
    with pytest.raises(DataError) as info:
        load_ohlcv(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def split_file(tmp_path: Path, bars: int, split: int) -> tuple[Path, pd.DataFrame]:
    """A daily file with a 2:1 split at row ``split``: raw OHLC halve there, Adj Close is continuous.

    Returns the path and the adjusted bars the loader should produce (Yahoo style: the
    raw prices before the split are twice the adjusted ones, Adj Close / Close = 0.5).
    """
    k = np.arange(bars)
    close = np.round(50.0 * np.exp(0.01 * np.sin(0.9 * k) + 0.002 * k), 4)  # adjusted, continuous
    open_ = np.r_[close[0], close[:-1]] * (1.0 + 0.001 * np.cos(1.7 * k))
    high = np.maximum(open_, close) * 1.004
    low = np.minimum(open_, close) * 0.996
    factor = np.where(k < split, 2.0, 1.0)  # raw = adjusted * 2 before the split (exact in binary)
    stamps = pd.bdate_range("2021-03-01", periods=bars)
    raw = pd.DataFrame({
        "Date": stamps.strftime("%Y-%m-%d"), "Open": open_ * factor, "High": high * factor,
        "Low": low * factor, "Close": close * factor, "Adj Close": close, "Volume": 1000.0 * factor,
    })
    path = tmp_path / "split.csv"
    raw.to_csv(path, index=False, float_format="%.17g")
    adjusted = pd.DataFrame({"open": open_, "high": high, "low": low, "close": close})
    return path, adjusted


# ----------------------------------------------------------------------------- the regression: a split

def test_split_mid_file_no_equity_jump(tmp_path):
    """Hold one long lot through a 2:1 split: every reward is the adjusted move, none a -50% jump."""
    W, L = 4, 12
    bars, split = W + L + 1, 9  # exactly one episode: it starts at bar 0; the split is bar 9
    path, adj = split_file(tmp_path, bars, split)
    data = load_ohlcv(path)
    cash = 1000.0
    env = TradingEnv(data=data, window=W, episode_length=L, max_position=1, fee_bps=0.0, slippage_bps=0.0,
                     initial_cash=cash, reward_scale=1.0)
    env.reset(seed=0)
    assert int(env.core.start[0]) == 0
    rewards = []
    for _ in range(L):
        _, reward, terminated, truncated, info = env.step(2)  # target +1 lot, held throughout
        rewards.append(reward)
        assert not terminated
    assert truncated

    # what the continuous adjusted prices imply: units = cash / close[W], filled at open[W+1]
    units = cash / adj.close[W]
    marks = np.r_[adj.open[W + 1], adj.close[W + 1:].to_numpy()]
    want = units * np.diff(marks) / cash
    np.testing.assert_allclose(rewards, want, rtol=1e-9, atol=1e-12)
    split_step = split - (W + 1)  # decision j is marked at bar W+1+j
    assert abs(rewards[split_step]) < 0.02, rewards  # raw closes would give about -0.5 here
    assert info["episode"]["return"] == pytest.approx(units * (adj.close.iloc[-1] - adj.open[W + 1]), rel=1e-9)


def test_split_loaded_prices_are_the_adjusted_ones(tmp_path):
    path, adj = split_file(tmp_path, bars=20, split=8)
    data = load_ohlcv(path)
    for key in ("open", "high", "low", "close"):
        np.testing.assert_allclose(getattr(data, key), adj[key].to_numpy(), rtol=1e-15, err_msg=key)
    np.testing.assert_array_equal(data.volume, np.where(np.arange(20) < 8, 2000.0, 1000.0))  # volume as is


# ----------------------------------------------------------------------------- the loader's rules

def test_open_high_low_scaled_by_adj_close_over_close(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,5.25,100", "2017-01-03,10.5,12,10,11.5,11.5,200",
            "2017-01-04,11.5,12.5,11,12,9.0,300"]
    data = load_ohlcv(write_csv(tmp_path, rows))
    ratio = np.array([5.25 / 10.5, 11.5 / 11.5, 9.0 / 12])
    np.testing.assert_array_equal(data.open, np.array([10, 10.5, 11.5]) * ratio)
    np.testing.assert_array_equal(data.high, np.array([11, 12, 12.5]) * ratio)
    np.testing.assert_array_equal(data.low, np.array([9, 10, 11]) * ratio)
    np.testing.assert_array_equal(data.close, [5.25, 11.5, 9.0])
    np.testing.assert_array_equal(data.volume, [100, 200, 300])  # as yfinance's auto_adjust: not scaled


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_adj_close_equal_to_close_is_bit_identical(tmp_path, fmt):
    rng = np.random.default_rng(0)
    n = 300
    close = np.round(100 * np.exp(np.cumsum(0.02 * rng.standard_normal(n))), 6)
    open_ = np.round(close * np.exp(0.01 * rng.standard_normal(n)), 6)
    frame = pd.DataFrame({
        "Date": pd.bdate_range("2015-01-01", periods=n).strftime("%Y-%m-%d"), "Open": open_,
        "High": np.maximum(open_, close) * 1.01, "Low": np.minimum(open_, close) / 1.01, "Close": close,
        "Volume": rng.integers(0, 10**6, n).astype(float),
    })
    with_adj = frame.assign(**{"Adj Close": frame["Close"]})[
        ["Date", "Open", "High", "Low", "Close", "Adj Close", "Volume"]]
    paths = []
    for name, table in (("plain", frame), ("adj", with_adj)):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "csv":
            table.to_csv(path, index=False, float_format="%.17g")
        else:
            pytest.importorskip("pyarrow")
            table.to_parquet(path, index=False)
        paths.append(path)
    plain, adj = (load_ohlcv(p) for p in paths)
    for key in ("timestamps", "open", "high", "low", "close", "volume"):
        a, b = getattr(plain, key), getattr(adj, key)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), key
    assert plain.bar_seconds == adj.bar_seconds


def test_adjusted_bars_with_touching_high_low_pass_validation(tmp_path):
    # High == Close and Low == Open in the raw file; awkward ratios must not trip the bracketing checks
    rows = [f"2017-01-{d:02d},{o},{c},{o},{c},{a},100"
            for d, (o, c, a) in enumerate([(10.1, 10.7, 3.3333), (10.7, 10.9, 7.77), (10.9, 11.3, 0.1234567)], 2)]
    data = load_ohlcv(write_csv(tmp_path, rows))
    np.testing.assert_array_equal(data.close, [3.3333, 7.77, 0.1234567])


def test_bracketing_checked_on_adjusted_prices(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,5.25,100", "2017-01-03,10.5,11,10,11.5,5.75,200"]
    msg = error(write_csv(tmp_path, rows))
    assert "column 'High'" in msg and "row 2 (line 3)" in msg and "High must be >= Open and Close" in msg


@pytest.mark.parametrize("cell, words", [
    ("", "missing value (NaN)"), ("nan", "missing value (NaN)"), ("0", "non-positive price 0"),
    ("-4.5", "non-positive price -4.5"), ("inf", "infinite value"),
])
def test_bad_adj_close_value(tmp_path, cell, words):
    rows = ["2017-01-02,10,11,9,10.5,10.5,100", f"2017-01-03,10.5,12,10,11.5,{cell},200",
            "2017-01-04,11.5,12.5,11,12,12,300"]
    msg = error(write_csv(tmp_path, rows))
    assert words in msg and "column 'Adj Close'" in msg and "row 2 (line 3)" in msg


def test_non_numeric_adj_close(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,10.5,100", "2017-01-03,10.5,12,10,11.5,n.a.,200"]
    msg = error(write_csv(tmp_path, rows))
    assert "non-numeric value 'n.a.'" in msg and "column 'Adj Close'" in msg and "row 2 (line 3)" in msg


def test_bad_adj_close_in_parquet_names_row(tmp_path):
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"Date": ["2017-01-02", "2017-01-03"], "Open": [10.0, 10.5], "High": [11.0, 12.0],
                          "Low": [9.0, 10.0], "Close": [10.5, 11.5], "Adj_Close": [10.5, -1.0]})
    path = tmp_path / "data.parquet"
    frame.to_parquet(path)
    msg = error(path)
    assert "column 'Adj_Close' at row 2;" in msg and "non-positive price -1" in msg


def test_earliest_bad_row_wins_across_close_and_adj_close(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,10.5,100", "2017-01-03,10.5,12,10,11.5,0,200",
            "2017-01-04,11.5,12.5,11,0,12,300"]
    msg = error(write_csv(tmp_path, rows))
    assert "column 'Adj Close' at row 2" in msg


@pytest.mark.parametrize("adj", ["Adj Close", "adj_close", "Adj. Close", "ADJCLOSE", "Adjusted Close"])
def test_adj_close_without_raw_close_is_refused(tmp_path, adj):
    rows = ["2017-01-02,10,11,9,10.5,100", "2017-01-03,10.5,12,10,11.5,200"]
    msg = error(write_csv(tmp_path, rows, header=f"Date,Open,High,Low,{adj},Volume\n"))
    assert f"'{adj}'" in msg and "no raw Close" in msg and "rename" in msg


def test_adj_close_without_close_or_open_lists_both(tmp_path):
    rows = ["2017-01-02,11,9,10.5,100", "2017-01-03,12,10,11.5,200"]
    msg = error(write_csv(tmp_path, rows, header="Date,High,Low,Adj Close,Volume\n"))
    assert "missing price column(s) Open, Close" in msg



def test_adj_close_ratio_that_overflows_is_reported(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,10.5,100", "2017-01-03,1e-300,2e-300,1e-300,1e-300,1e10,200"]
    msg = error(write_csv(tmp_path, rows))
    assert "'Adj Close' 1e+10 / 'Close' 1e-300 at row 2 (line 3)" in msg and "out of range" in msg
