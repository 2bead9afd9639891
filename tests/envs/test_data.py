"""Tests for envs.data.load_ohlcv: every accepted layout (rejected inputs: ``test_data_errors.py``)."""
from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from envs.data import MarketData, load_ohlcv
from ohlcv_fixtures import HEADER, ROWS, csv, days, frame, write

# ----------------------------------------------------------------------------- accepted layouts

def test_basic_csv(tmp_path):
    path = csv(tmp_path)
    data = load_ohlcv(path)
    assert isinstance(data, MarketData)
    assert data.source == str(path)
    assert len(data) == 3
    assert data.timestamps.dtype == np.dtype("datetime64[ns]")
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))
    for arr in (data.open, data.high, data.low, data.close, data.volume):
        assert arr.dtype == np.float64 and arr.shape == (3,)
    np.testing.assert_array_equal(data.open, [10, 10.5, 11.5])
    np.testing.assert_array_equal(data.high, [11, 12, 12.5])
    np.testing.assert_array_equal(data.low, [9, 10, 11])
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])
    np.testing.assert_array_equal(data.volume, [100, 200, 300])
    assert data.bar_seconds == 86400.0


def test_accepts_pathlike_and_str(tmp_path):
    path = csv(tmp_path)
    assert len(load_ohlcv(str(path))) == len(load_ohlcv(path)) == 3


@pytest.mark.parametrize(
    "header",
    [
        " date , OPEN ,high,LOW_,Close ,VOLUME\n",
        "DATE,o,h,l,c,vol\n",
        "Datetime,Open,High,Low,Close,Vol\n",
        "timestamp,open_,_high,low,close,v\n",
        "Time,Open,High,Low,Close,Volume\n",
    ],
)
def test_column_name_variants(tmp_path, header):
    data = load_ohlcv(csv(tmp_path, header=header))
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])
    np.testing.assert_array_equal(data.volume, [100, 200, 300])
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))


# Adj Close (scaling Open/High/Low, refusing an Adj Close without Close): tests/envs/test_adjusted_prices.py


def test_no_volume_column_gives_zeros(tmp_path):
    rows = [r.rsplit(",", 1)[0] for r in ROWS]
    data = load_ohlcv(csv(tmp_path, rows, header="Date,Open,High,Low,Close\n"))
    assert data.volume.dtype == np.float64
    np.testing.assert_array_equal(data.volume, [0, 0, 0])


def test_nan_volume_is_zero(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,", "2017-01-03,10.5,12,10,11.5,200"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.volume, [0, 200])


def test_index_column_date_empty_header(tmp_path):
    data = load_ohlcv(csv(tmp_path, header=",Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))


def test_index_column_date_unnamed_header(tmp_path):
    data = load_ohlcv(csv(tmp_path, header="Unnamed: 0,Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])


def test_index_column_date_short_header(tmp_path):
    # header one field short: pandas turns the first column into the index
    data = load_ohlcv(csv(tmp_path, header="Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))
    np.testing.assert_array_equal(data.open, [10, 10.5, 11.5])


@pytest.mark.parametrize("name", ["timestamp", "unix", "time", "Timestamp"])
def test_unix_seconds(tmp_path, name):
    rows = ["1483228800,10,11,9,10.5,1", "1483232400,10,11,9,10.5,1", "1483236000,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows, header=f"{name},open,high,low,close,volume\n"))
    np.testing.assert_array_equal(
        data.timestamps, days("2017-01-01T00:00", "2017-01-01T01:00", "2017-01-01T02:00")
    )
    assert data.bar_seconds == 3600.0


def test_unix_milliseconds(tmp_path):
    rows = ["1483228800000,10,11,9,10.5,1", "1483228860000,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows, header="open_time,open,high,low,close,volume\n"))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-01T00:00", "2017-01-01T00:01"))
    assert data.bar_seconds == 60.0


def test_unix_float_seconds(tmp_path):
    rows = ["1483228800.0,10,11,9,10.5,1", "1483228801.5,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows, header="timestamp,open,high,low,close,volume\n"))
    assert data.bar_seconds == 1.5


def test_yyyymmdd_integers(tmp_path):
    rows = ["20170102,10,11,9,10.5,1", "20170103,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03"))


def test_day_first_dukascopy_detected(tmp_path):
    # 01.01.2017 .. 20.01.2017: the days above 12 make month-first impossible
    stamps = pd.date_range("2017-01-01 22:00", periods=20, freq="D")
    rows = [f"{t:%d.%m.%Y %H:%M:%S}.000,1.05,1.06,1.04,1.055,12.5" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows, header="Gmt time,Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.timestamps, stamps.to_numpy().astype("datetime64[ns]"))


def test_day_first_ambiguous_prefers_regular_spacing(tmp_path):
    # every row parses both ways: day-first gives 12 consecutive days, month-first 12 month starts
    stamps = pd.date_range("2017-01-01 22:00", periods=12, freq="D")
    rows = [f"{t:%d.%m.%Y %H:%M:%S}.000,1.05,1.06,1.04,1.055,1" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows, header="Gmt time,Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.timestamps, stamps.to_numpy().astype("datetime64[ns]"))
    assert data.bar_seconds == 86400.0


def test_month_first_us_dates(tmp_path):
    rows = ["01/30/2017,10,11,9,10.5,1", "01/31/2017,10,11,9,10.5,1", "02/01/2017,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-30", "2017-01-31", "2017-02-01"))


def test_explicit_date_format(tmp_path):
    # ambiguous and irregular: only the explicit format decides
    rows = ["01/02/2017,10,11,9,10.5,1", "03/04/2017,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows), date_format="%d/%m/%Y")
    np.testing.assert_array_equal(data.timestamps, days("2017-02-01", "2017-04-03"))
    data = load_ohlcv(csv(tmp_path, rows), date_format="%m/%d/%Y")
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-03-04"))


def test_explicit_date_format_with_fraction(tmp_path):
    rows = ["01.01.2017 22:00:00.000,1,2,0.5,1.5,1", "01.01.2017 23:00:00.000,1,2,0.5,1.5,1"]
    data = load_ohlcv(csv(tmp_path, rows), date_format="%d.%m.%Y %H:%M:%S.%f")
    np.testing.assert_array_equal(data.timestamps, days("2017-01-01T22:00", "2017-01-01T23:00"))


def test_date_and_time_columns_joined(tmp_path):
    rows = ["2017.01.02,10:00,10,11,9,10.5,1", "2017.01.02,11:00,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows, header="Date,Time,Open,High,Low,Close,Volume\n"))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02T10:00", "2017-01-02T11:00"))


def test_timezones_converted_to_utc(tmp_path):
    rows = ["2017-01-02T10:00:00+02:00,10,11,9,10.5,1", "2017-01-02T09:00:00Z,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02T08:00", "2017-01-02T09:00"))


def test_newest_first_is_sorted(tmp_path):
    data = load_ohlcv(csv(tmp_path, ROWS[::-1]))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])
    np.testing.assert_array_equal(data.volume, [100, 200, 300])


def test_semicolon_separator(tmp_path):
    text = HEADER.replace(",", ";") + "\n".join(r.replace(",", ";") for r in ROWS) + "\n"
    data = load_ohlcv(write(tmp_path, text))
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])


def test_gzip_csv(tmp_path):
    path = tmp_path / "data.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(HEADER + "\n".join(ROWS) + "\n")
    data = load_ohlcv(path)
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])


@pytest.mark.parametrize("name", ["data.parquet", "data.pq"])
def test_parquet(tmp_path, name):
    path = tmp_path / name
    frame().to_parquet(path)
    data = load_ohlcv(path)
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))
    np.testing.assert_array_equal(data.close, [10.5, 11.5, 12])
    np.testing.assert_array_equal(data.volume, [0, 0, 0])


def test_parquet_datetime_index_and_tz(tmp_path):
    df = frame().set_index("Date")
    df.index = df.index.tz_localize("US/Eastern")
    path = tmp_path / "data.parquet"
    df.to_parquet(path)
    data = load_ohlcv(path)
    np.testing.assert_array_equal(
        data.timestamps, days("2017-01-02T05:00", "2017-01-03T05:00", "2017-01-04T05:00")
    )


def test_parquet_string_dates_and_unnamed_index(tmp_path):
    df = frame()
    df.index = df.pop("Date").dt.strftime("%d.%m.%Y")
    path = tmp_path / "data.parquet"
    df.to_parquet(path)
    data = load_ohlcv(path)
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-01-03", "2017-01-04"))


# ----------------------------------------------------------------------------- frequency

def test_daily_weekday_calendar_counts_its_own_days(tmp_path):
    stamps = pd.bdate_range("2017-01-02", periods=60)  # Monday to Friday, no holidays: 5 x 365 / 7 a year
    rows = [f"{t:%Y-%m-%d},10,11,9,10.5,1" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows))
    assert data.bar_seconds == 86400.0
    assert data.periods_per_year == 261.0


def test_daily_seven_day_calendar_is_365(tmp_path):
    stamps = pd.date_range("2017-01-01", periods=60, freq="D")
    rows = [f"{t:%Y-%m-%d},10,11,9,10.5,1" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows))
    assert data.bar_seconds == 86400.0
    assert data.periods_per_year == 365.0


def test_hourly_and_minute(tmp_path):
    stamps = pd.date_range("2017-01-02", periods=50, freq="h")
    rows = [f"{t:%Y-%m-%d %H:%M},10,11,9,10.5,1" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows))
    assert data.bar_seconds == 3600.0
    assert data.periods_per_year == 8760.0
    stamps = pd.date_range("2017-01-02", periods=50, freq="min")
    rows = [f"{t:%Y-%m-%d %H:%M},10,11,9,10.5,1" for t in stamps]
    data = load_ohlcv(csv(tmp_path, rows))
    assert data.bar_seconds == 60.0
    assert data.periods_per_year == 525600.0


def test_bar_seconds_is_median_gap(tmp_path):
    # hourly bars with one overnight gap: the median is still one hour
    stamps = list(pd.date_range("2017-01-02 09:00", periods=8, freq="h"))
    stamps += list(pd.date_range("2017-01-03 09:00", periods=8, freq="h"))
    rows = [f"{t:%Y-%m-%d %H:%M},10,11,9,10.5,1" for t in stamps]
    assert load_ohlcv(csv(tmp_path, rows)).bar_seconds == 3600.0


def test_ambiguous_tie_dot_dates_are_day_first(tmp_path):
    rows = ["01.02.2017,10,11,9,10.5,1", "02.03.2017,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-02-01", "2017-03-02"))


def test_ambiguous_tie_slash_dates_are_month_first(tmp_path):
    rows = ["01/02/2017,10,11,9,10.5,1", "02/03/2017,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-01-02", "2017-02-03"))


def test_ambiguous_prefers_monotonic_file_order(tmp_path):
    # day-first: Mar 3, Feb 5, Feb 1 (newest first, monotonic, irregular);
    # month-first: Mar 3, May 2, Jan 2 (evenly spaced once sorted, but not monotonic in the file)
    rows = ["03/03/2017,10,11,9,10.5,1", "05/02/2017,10,11,9,10.5,1", "01/02/2017,10,11,9,10.5,1"]
    data = load_ohlcv(csv(tmp_path, rows))
    np.testing.assert_array_equal(data.timestamps, days("2017-02-01", "2017-02-05", "2017-03-03"))
