"""Tests for envs.data.load_ohlcv: every rejected input, each a one-line DataError naming the file."""
from __future__ import annotations

import pandas as pd
import pytest

from envs.data import DataError
from ohlcv_fixtures import HEADER, ROWS, csv, error, frame, write


def test_missing_file(tmp_path):
    msg = error(tmp_path / "nope.csv")
    assert "file not found" in msg


def test_directory(tmp_path):
    assert "directory" in error(tmp_path)


def test_empty_file(tmp_path):
    assert "empty" in error(write(tmp_path, ""))


def test_header_only(tmp_path):
    assert "no data rows" in error(write(tmp_path, HEADER))


def test_missing_price_columns(tmp_path):
    rows = ["2017-01-02,10,11", "2017-01-03,10.5,12"]
    msg = error(csv(tmp_path, rows, header="Date,Open,Close\n"))
    assert "missing price column(s) High, Low" in msg
    assert "'Date', 'Open', 'Close'" in msg


def test_missing_time_column(tmp_path):
    rows = ["a,10,11,9,10.5", "b,10.5,12,10,11.5"]
    msg = error(csv(tmp_path, rows, header="Symbol,Open,High,Low,Close\n"))
    assert "no time column" in msg and "'Symbol'" in msg


def test_ambiguous_duplicate_columns(tmp_path):
    rows = ["2017-01-02,10,11,9,10.5,10.5", "2017-01-03,10.5,12,10,11.5,11.5"]
    msg = error(csv(tmp_path, rows, header="Date,Open,High,Low,Close,close \n"))
    assert "'Close'" in msg and "'close '" in msg


@pytest.mark.parametrize(
    "cell, words",
    [("", "missing value (NaN)"), ("nan", "missing value (NaN)"), ("inf", "infinite"),
     ("0", "non-positive price 0"), ("-3", "non-positive price -3")],
)
def test_bad_price_value(tmp_path, cell, words):
    rows = list(ROWS)
    rows[1] = f"2017-01-03,10.5,12,10,{cell},200"
    msg = error(csv(tmp_path, rows))
    assert words in msg
    assert "column 'Close'" in msg and "row 2 (line 3)" in msg


def test_non_numeric_price(tmp_path):
    rows = list(ROWS)
    rows[2] = "2017-01-04,11.5,12.5,11,abc,300"
    msg = error(csv(tmp_path, rows))
    assert "non-numeric value 'abc'" in msg
    assert "column 'Close'" in msg and "row 3 (line 4)" in msg


def test_bad_rows_reported_in_file_order_for_newest_first(tmp_path):
    rows = ROWS[::-1]
    rows[0] = "2017-01-04,11.5,12.5,11,-1,300"  # first data row of the file
    msg = error(csv(tmp_path, rows))
    assert "row 1 (line 2)" in msg


def test_earliest_bad_row_wins_and_others_counted(tmp_path):
    rows = list(ROWS)
    rows[2] = "2017-01-04,0,12.5,11,12,300"
    rows[1] = "2017-01-03,10.5,12,10,0,200"
    msg = error(csv(tmp_path, rows))
    assert "column 'Close'" in msg and "row 2 (line 3)" in msg


def test_high_below_low(tmp_path):
    rows = list(ROWS)
    rows[0] = "2017-01-02,10,9,11,10.5,100"
    msg = error(csv(tmp_path, rows))
    assert "High 9 is below Low 11" in msg and "'High'" in msg and "row 1 (line 2)" in msg


def test_high_not_bracketing_close(tmp_path):
    rows = list(ROWS)
    rows[1] = "2017-01-03,10.5,12,10,12.5,200"
    msg = error(csv(tmp_path, rows))
    assert "High 12 is below Open 10.5 or Close 12.5" in msg
    assert "column 'High'" in msg and "row 2 (line 3)" in msg


def test_low_not_bracketing_open(tmp_path):
    rows = list(ROWS)
    rows[2] = "2017-01-04,10.9,12.5,11,12,300"
    msg = error(csv(tmp_path, rows))
    assert "Low 11 is above Open 10.9" in msg and "column 'Low'" in msg and "row 3 (line 4)" in msg


def test_negative_volume(tmp_path):
    rows = list(ROWS)
    rows[1] = "2017-01-03,10.5,12,10,11.5,-5"
    msg = error(csv(tmp_path, rows))
    assert "volume -5" in msg and "column 'Volume'" in msg and "row 2 (line 3)" in msg


def test_non_numeric_volume(tmp_path):
    rows = list(ROWS)
    rows[2] = "2017-01-04,11.5,12.5,11,12,lots"
    msg = error(csv(tmp_path, rows))
    assert "'lots'" in msg and "column 'Volume'" in msg and "row 3 (line 4)" in msg


def test_duplicate_timestamps_name_both_rows(tmp_path):
    rows = ROWS + ["2017-01-03,10.5,12,10,11.5,200"]
    msg = error(csv(tmp_path, rows))
    assert "duplicate timestamp 2017-01-03" in msg and "column 'Date'" in msg
    assert "row 2 (line 3) and row 4 (line 5)" in msg


def test_too_few_rows(tmp_path):
    msg = error(csv(tmp_path), min_rows=161)
    assert "needs at least 161 rows for one episode (window + episode length + 1); got 3" in msg
    assert "--episode-length/--window" in msg


def test_single_row_below_default_minimum(tmp_path):
    assert "got 1" in error(csv(tmp_path, ROWS[:1]))


def test_unparseable_timestamp(tmp_path):
    rows = list(ROWS)
    rows[1] = "2017-13-45,10.5,12,10,11.5,200"
    msg = error(csv(tmp_path, rows))
    assert "cannot parse timestamp '2017-13-45'" in msg
    assert "column 'Date'" in msg and "row 2 (line 3)" in msg and "--date-format" in msg


def test_garbage_timestamps(tmp_path):
    rows = ["yesterday,10,11,9,10.5,1", "today,10,11,9,10.5,1"]
    msg = error(csv(tmp_path, rows))
    assert "'yesterday'" in msg and "row 1 (line 2)" in msg


def test_missing_timestamp(tmp_path):
    rows = list(ROWS)
    rows[2] = ",11.5,12.5,11,12,300"
    msg = error(csv(tmp_path, rows))
    assert "missing timestamp" in msg and "column 'Date'" in msg and "row 3 (line 4)" in msg


def test_date_format_mismatch(tmp_path):
    msg = error(csv(tmp_path), date_format="%d.%m.%Y")
    assert "does not match --date-format '%d.%m.%Y'" in msg
    assert "'2017-01-02'" in msg and "row 1 (line 2)" in msg


def test_epoch_row_out_of_range(tmp_path):
    rows = ["1483228800,10,11,9,10.5,1", "1483232400000,10,11,9,10.5,1", "1483236000,10,11,9,10.5,1"]
    msg = error(csv(tmp_path, rows, header="timestamp,open,high,low,close,volume\n"))
    assert "column 'timestamp'" in msg and "row 2 (line 3)" in msg


def test_small_integers_are_not_timestamps(tmp_path):
    rows = ["1,10,11,9,10.5,1", "2,10,11,9,10.5,1"]
    assert "too small" in error(csv(tmp_path, rows, header="time,open,high,low,close,volume\n"))


def test_parquet_errors_report_row_without_line(tmp_path):
    df = frame()
    df.loc[1, "Low"] = -1.0
    path = tmp_path / "data.parquet"
    df.to_parquet(path)
    msg = error(path)
    assert "column 'Low'" in msg and "row 2" in msg and "line" not in msg


def test_corrupt_parquet(tmp_path):
    path = write(tmp_path, "not parquet at all", "data.parquet")
    assert "cannot read as Parquet" in error(path)


def test_ragged_csv(tmp_path):
    rows = list(ROWS)
    rows[1] = "2017-01-03,10.5,12,10,11.5,200,extra,fields"
    assert "cannot parse as CSV" in error(csv(tmp_path, rows))


def test_data_error_is_value_error():
    assert issubclass(DataError, ValueError)
    assert str(DataError("a\nb  c")) == "a b c"


def test_bad_timestamp_outside_detection_sample(tmp_path):
    stamps = pd.date_range("2017-01-01", periods=1000, freq="h")
    rows = [f"{t:%Y-%m-%d %H:%M:%S},10,11,9,10.5,1" for t in stamps]
    rows[536] = "2017-01-23 08:61:00,10,11,9,10.5,1"
    msg = error(csv(tmp_path, rows))
    assert "'2017-01-23 08:61:00'" in msg and "row 537 (line 538)" in msg
