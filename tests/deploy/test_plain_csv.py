"""The ONNX route's pandas-free readers agree with the loader: ``envs.data.plain_csv.read_plain_csv`` gives
``load_ohlcv``'s arrays bit for bit on a plain file, and None on every other file (which ``as_market_data``
then hands to the loader, so its messages stay the loader's); the server's history (``history_data``)
gives the loader's arrays without pandas too; ``times`` writes and reads times as pandas does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deploy_fixtures import write_featured_prices
from envs.data import DataError, MarketData, load_ohlcv
from envs.data.plain_csv import read_plain_csv
from ppo_lstm.deploy.bars import as_market_data
from ppo_lstm.deploy.times import iso, shown, time_ns
from ppo_lstm.errors import UsageError
from ppo_lstm.serve.history import _plain, history_data
from ppo_lstm.serve.models import Bar

FEATURES = ("vol_z", "Mom")


def same(a: MarketData, b: MarketData) -> None:
    """Every field of ``a`` is ``b``'s, bit for bit."""
    assert a.source == b.source and a.feature_names == b.feature_names and a.bar_seconds == b.bar_seconds
    assert a.timestamps.dtype == b.timestamps.dtype and np.array_equal(a.timestamps, b.timestamps)
    for name in ("open", "high", "low", "close", "volume"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert (a.features is None) == (b.features is None)
    if a.features is not None:
        assert a.features.shape == b.features.shape and a.features.tobytes() == b.features.tobytes()


def test_a_plain_file_is_read_as_the_loader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    frame = write_featured_prices(path)
    frame["Date"] = frame["Date"] + " 14:30:00.25"
    frame["Close"] = frame["Close"] * (1 + 1e-13)  # 17 significant digits, as repr writes floats
    frame["High"] = np.maximum(frame["High"], frame["Close"])
    frame.to_csv(path, index=False)
    for features in ((), FEATURES):
        plain = read_plain_csv(path, features)
        assert plain is not None
        same(plain, load_ohlcv(path, features=features))
    frame.drop(columns="Volume").to_csv(path, index=False)  # no volume: zeros, as the loader's
    same(read_plain_csv(path), load_ohlcv(path))


@pytest.mark.parametrize("change", [
    "adj close", "semicolons", "quoted", "unsorted", "twice", "day first", "blank price", "exponent", "zone",
    "blank line", "Date and Time", "bad price", "high below close", "gap in a feature", "gz",
])
def test_any_other_file_goes_to_the_loader(tmp_path: Path, change: str) -> None:
    path = tmp_path / ("prices.csv.gz" if change == "gz" else "prices.csv")
    frame = write_featured_prices(tmp_path / "base.csv")
    sep, text = ",", None
    if change == "adj close":
        frame["Adj Close"] = frame["Close"] * 0.5
    elif change == "unsorted":
        frame = frame.iloc[::-1]
    elif change == "twice":
        frame = pd.concat([frame, frame.iloc[[-1]]])
    elif change == "day first":
        frame["Date"] = pd.to_datetime(frame["Date"]).dt.strftime("%d/%m/%Y")
    elif change == "blank price":
        frame["Open"] = frame["Open"].astype(object)
        frame.iloc[40, frame.columns.get_loc("Open")] = ""
    elif change == "exponent":
        frame["Volume"] = frame["Volume"].map(lambda v: f"{v:e}")
    elif change == "zone":
        frame["Date"] = frame["Date"] + "T00:00:00Z"
    elif change == "Date and Time":
        frame.insert(1, "Time", "00:00:00")
    elif change == "bad price":
        frame.iloc[50, frame.columns.get_loc("Close")] = -1.0
    elif change == "high below close":
        frame.iloc[60, frame.columns.get_loc("High")] = frame["Close"].iloc[60] * (1 - 1e-12)  # the loader's tolerance
    elif change == "gap in a feature":
        frame.iloc[100, frame.columns.get_loc("Vol_Z")] = np.nan
    if change == "semicolons":
        sep = ";"
    frame.to_csv(path, index=False, sep=sep, quoting=1 if change == "quoted" else 0)
    if change == "blank line":
        text = path.read_text().replace("\n", "\n\n", 3)
        path.write_text(text)
    assert read_plain_csv(path, FEATURES) is None
    try:
        expected: object = load_ohlcv(path, features=FEATURES)
    except DataError as err:
        expected = str(err)
    if isinstance(expected, str):
        with pytest.raises(UsageError) as refused:
            as_market_data(path, None, FEATURES)
        assert str(refused.value).split(" (the policy was trained with")[0] == expected  # the loader's message
    else:
        same(as_market_data(path, None, FEATURES), expected)


def test_the_servers_history_is_read_as_the_loader_reads_it(tmp_path: Path) -> None:
    frame = write_featured_prices(tmp_path / "prices.csv")
    bars = [Bar(time=f"{r.Date}T09:30:00+02:00", open=r.Open, high=r.High, low=r.Low, close=r.Close, volume=r.Volume,
                features={"Vol_Z": None if np.isnan(r.Vol_Z) else r.Vol_Z, "mom": None if np.isnan(r.mom) else r.mom})
            for r in frame.itertuples()]
    plain = _plain(bars, FEATURES, ["Vol_Z", "mom"])
    assert plain is not None
    loaded = pd.DataFrame({"Date": [b.time for b in bars], **{k.capitalize(): [getattr(b, k) for b in bars]
                                                               for k in ("open", "high", "low", "close", "volume")}})
    loaded["Vol_Z"], loaded["mom"] = frame["Vol_Z"], frame["mom"]
    same(plain, load_ohlcv(loaded, features=FEATURES))
    assert _plain(bars[::-1], FEATURES, ["Vol_Z", "mom"]) is None  # out of order: the loader's to refuse
    with pytest.raises(UsageError, match="duplicate timestamp"):
        history_data(bars + bars[-1:], FEATURES)


@pytest.mark.parametrize("text", ["2024-01-02", "2024-01-02 14:30", "2024-01-02T14:30:00.000001",
                                  "2024-01-02T14:30:00.123456789", "1969-12-31T23:59:59.5-05:30", "2024-01-02T14:30Z",
                                  "01/02/2024", "2024-01-02T14:30:00+0100"])
def test_times_are_read_and_written_as_pandas_does(text: str) -> None:
    stamp = pd.Timestamp(text)
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    ns = time_ns(text)
    assert ns == stamp.value and iso(ns) == stamp.isoformat() and shown(ns) == str(stamp)
    assert iso(np.datetime64(ns, "ns")) == stamp.isoformat()
