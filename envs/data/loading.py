"""Load a historical OHLCV file (CSV, CSV.gz or Parquet) into validated arrays.

``load_ohlcv(path)`` reads the file with pandas, finds the time and price
columns, parses the timestamps, sorts the bars oldest-first and checks them.
Every problem raises ``DataError`` whose message is one line: the file, what
is wrong, the column and row, and how to fix it.

Reading
    ``.parquet``/``.pq`` -> ``pandas.read_parquet``; anything else ->
    ``pandas.read_csv`` (compression such as ``.csv.gz`` is inferred from the
    extension). A CSV that comes out as one column is re-read with ``;`` or tab
    as the separator when its header contains one.

Column names
    Matched case-insensitively after dropping spaces, ``_``, ``-`` and ``.``:
    open ``Open``/``o``, high ``High``/``h``, low ``Low``/``l``, close
    ``Close``/``c``; adjusted close ``Adj Close``/``adj_close``/``Adj. Close``/
    ``Adjusted Close`` is optional (see below); volume ``Volume``/``vol``/``v``
    is optional (zeros when absent, NaN volume counts as 0). The matching:
    ``envs.data.columns``.

Adjusted prices
    With both Close and Adj Close, Open/High/Low are scaled by each row's
    ``Adj Close / Close`` and the close is ``Adj Close`` (as yfinance's
    ``auto_adjust``); an Adj Close without a raw Close is refused. The rule and
    why: ``envs.data.checks``.

Time column (first match wins)
    ``Datetime``, ``Timestamp``, ``Date``, ``Time``, ``Gmt time`` and a few
    other names (``envs.data.columns._TIME_NAMES``); a ``Date`` column plus a time-of-day
    ``Time`` column (``22:00:00``) are joined; failing those, an unnamed first
    column (``,Open,High,...`` -> ``Unnamed: 0``, or the index pandas makes when
    the header is one field short, or a Parquet index).

Timestamp parsing
    An explicit ``date_format``, unix epochs (unit from the median value) or
    ``YYYYMMDD`` integers, ISO 8601, or candidate formats with an ambiguity
    rule; time zones become naive UTC. The full rules: ``envs.data.timestamps``.

Row numbers in messages
    "row N" is the 1-based data row in the file's original order, plus "line
    N+1" for CSV; see ``envs.data.errors``.

Checks
    missing columns, empty file or no data rows, unparseable or missing
    timestamps, non-numeric/NaN/inf/zero/negative prices (Adj Close included),
    an Adj Close / Close ratio that scales a price out of float range, then on
    the adjusted prices: High < Low, High/Low not bracketing Open/Close
    (relative tolerance 1e-9; messages quote the file's values), non-numeric/inf/negative
    volume, duplicate timestamps (both rows named) and fewer than ``min_rows``
    rows (at least 2). Checks are vectorised; only the first offending row is
    formatted into the message, with a count of the others.
"""
from __future__ import annotations

import os
import re
from typing import Sequence

import numpy as np
import pandas as pd

from envs.data.checks import _adjust, _check_ohlc, _check_positive, _check_scaled, _first_bad, _numeric
from envs.data.columns import _PRICE_ALIASES, _VOLUME, _feature_columns, _find, _price_columns, _time_column
from envs.data.errors import DataError, _Ctx
from envs.data.market_data import MarketData
from envs.data.timestamps import _parse_time

__all__ = ["DataError", "MarketData", "load_ohlcv", "date_span"]


# ----------------------------------------------------------------------------- reading

def _read(ctx: _Ctx, path: str) -> pd.DataFrame:
    """Read the file into a DataFrame with a default RangeIndex in file order."""
    try:
        if not ctx.is_csv:
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, low_memory=False)
            if frame.shape[1] == 1:
                header = str(frame.columns[0])
                for sep in (";", "\t"):
                    if sep in header:
                        frame = pd.read_csv(path, sep=sep, low_memory=False)
                        break
    except pd.errors.EmptyDataError:
        raise ctx.fail("the file is empty (no header and no rows); export the data again") from None
    except pd.errors.ParserError as err:
        raise ctx.fail(f"cannot parse as CSV: {err}; fix that line or re-export the file") from None
    except UnicodeDecodeError as err:
        raise ctx.fail(f"is not UTF-8 text ({err.reason} at byte {err.start}); re-save the file as UTF-8 CSV") from None
    except (OSError, ValueError, ImportError) as err:
        kind = "Parquet" if not ctx.is_csv else "CSV"
        raise ctx.fail(f"cannot read as {kind}: {err}; check the file is a valid {kind} file") from None
    return _tidy(frame)


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with a named or non-range index made a column, string column names and a
    default RangeIndex in row order."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None:
        frame = frame.reset_index()
    frame.columns = [str(c) for c in frame.columns]
    return frame.reset_index(drop=True)


# ----------------------------------------------------------------------------- entry point

def load_ohlcv(path: str | os.PathLike | pd.DataFrame, date_format: str | None = None, min_rows: int = 2,
               features: Sequence[str] = ()) -> MarketData:
    """Load and validate an OHLCV file; bars come back oldest first.

    The rules are in the module docstrings: this one, ``envs.data.timestamps`` and ``envs.data.checks``.
    ``path`` may also be a DataFrame already in memory (a time index becomes the time column),
    checked by the same rules; its messages name it "DataFrame" and count rows from 1.

    ``date_format`` forces a strftime format for string timestamps (``--date-format``).
    ``min_rows`` is the fewest bars the caller can use (window + episode length + 1); at least 2.
    ``features``: names of extra numeric columns to keep (``--features``; see
    :func:`envs.data.columns._feature_columns` for the rules), in ``MarketData.features``.
    Raises ``DataError`` (a ``ValueError``) with a one-line message for any problem.
    """
    if isinstance(path, pd.DataFrame):
        source = "DataFrame"
        ctx = _Ctx(source, is_csv=False)
        frame = _tidy(path.copy(deep=False))
    else:
        source = os.fspath(path)
        name = source.lower()
        ctx = _Ctx(source, is_csv=not name.endswith((".parquet", ".pq")))
        if not os.path.exists(source):
            raise ctx.fail("file not found; check the path (relative paths are from the current directory)")
        if os.path.isdir(source):
            raise ctx.fail("is a directory, not a data file; pass a .csv, .csv.gz or .parquet file")
        if os.path.getsize(source) == 0:
            raise ctx.fail("the file is empty (0 bytes); export the data again")
        frame = _read(ctx, source)
    columns = list(frame.columns)
    cols, adj_col = _price_columns(ctx, columns)
    time_name, time_raw = _time_column(ctx, frame)
    vol_col = _find(ctx, columns, _VOLUME, "volume")

    n = len(frame)
    if n == 0:
        raise ctx.fail("has a header but no data rows; export the data again")
    need = max(int(min_rows), 2)
    if n < need:
        raise ctx.fail(
            f"needs at least {need} rows for one episode (window + episode length + 1); got {n} "
            f"— lower --episode-length/--window or use a longer file"
        )

    stamps = _parse_time(ctx, time_name, time_raw, date_format)
    raw = {key: _numeric(ctx, cols[key], frame[cols[key]]) for key in _PRICE_ALIASES}
    named = [(cols[key], raw[key]) for key in _PRICE_ALIASES]
    adj_close = None if adj_col is None else _numeric(ctx, adj_col, frame[adj_col])
    if adj_close is not None:
        named.append((adj_col, adj_close))
    _check_positive(ctx, named)
    px = raw if adj_close is None else _adjust(raw, adj_close)
    if adj_close is not None:
        _check_scaled(ctx, adj_col, cols["close"], raw, px)
    _check_ohlc(ctx, cols, px, raw)

    if vol_col is not None:
        volume = _numeric(ctx, vol_col, frame[vol_col])
        volume = np.where(np.isnan(volume), 0.0, volume)

        def bad_volume(i: int) -> str:
            return (f"invalid volume {volume[i]:g} in column '{vol_col}' at {ctx.row(i)}{{more}}; "
                    f"volume must be finite and >= 0, fix or delete that row")

        _first_bad(ctx, [(vol_col, ~(np.isfinite(volume) & (volume >= 0)), bad_volume)])
    else:
        volume = np.zeros(n, dtype=np.float64)

    ns = stamps.astype(np.int64)
    order = np.argsort(ns, kind="stable")
    ns_sorted = ns[order]
    dup = np.flatnonzero(ns_sorted[1:] == ns_sorted[:-1])
    if dup.size:
        later = np.maximum(order[dup], order[dup + 1])
        k = dup[int(np.argmin(later))]
        a, b = sorted((int(order[k]), int(order[k + 1])))
        raise ctx.fail(
            f"duplicate timestamp {pd.Timestamp(ns_sorted[k])} in column '{time_name}' at {ctx.row(a)} and "
            f"{ctx.row(b)}" + (f" ({dup.size - 1} more duplicates)" if dup.size > 1 else "")
            + "; delete one of the rows"
        )

    feature_values = _feature_columns(ctx, frame, features, order) if features else None
    bar_seconds = float(np.median(np.diff(ns_sorted))) / 1e9
    return MarketData(
        source=source,
        timestamps=stamps[order],
        open=px["open"][order],
        high=px["high"][order],
        low=px["low"][order],
        close=px["close"][order],
        volume=volume[order].astype(np.float64),
        bar_seconds=bar_seconds,
        feature_names=tuple(str(f) for f in features) if features else (),
        features=feature_values,
    )


# ----------------------------------------------------------------------------- date slices


_NUMERIC_DATE = re.compile(r"^\s*(\d{1,2})([/.-])(\d{1,2})\2(\d{4})(?!\d)")


def _refuse_ambiguous(text: str, flag: str) -> None:
    """DataError for a date such as ``01/09/2017`` that reads as two days (month first or day
    first), naming both readings in ISO form. ``13/09/2017`` or ``05/05/2017`` read one way."""
    found = _NUMERIC_DATE.match(text)
    if found is None:
        return
    first, second, year = int(found.group(1)), int(found.group(3)), found.group(4)
    if first != second and 1 <= first <= 12 and 1 <= second <= 12:
        month_first, day_first = f"{year}-{first:02d}-{second:02d}", f"{year}-{second:02d}-{first:02d}"
        raise DataError(f"{flag} {text!r} can be read two ways: {month_first} (month first) or {day_first} "
                        f"(day first); write the one you mean in ISO form, YYYY-MM-DD (e.g. {day_first})")


def _parse_date(text: str, flag: str) -> tuple[pd.Timestamp, bool]:
    """``text`` as a naive UTC timestamp, and whether it named a whole day (no time of day).
    DataError for text that is not a date or reads as two (``01/09/2017``)."""
    _refuse_ambiguous(str(text), flag)
    try:
        stamp = pd.Timestamp(str(text).strip())
    except (ValueError, TypeError, OverflowError):
        stamp = pd.NaT
    if stamp is pd.NaT or pd.isna(stamp):
        raise DataError(f"{flag} {text!r} is not a date; use e.g. 2021-03-01 or '2021-03-01 14:30'")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    whole_day = stamp == stamp.normalize() and ":" not in str(text)
    return stamp, whole_day


def date_span(data: MarketData, start: str | None = None, end: str | None = None,
              flags: tuple[str, str] = ("--start", "--end")) -> tuple[int, int]:
    """Bars ``lo..hi-1`` of ``data`` with ``start <= time <= end`` (both inclusive, either may be None).

    Dates are parsed by pandas (``2021-03-01``, ``2021-03-01T14:30``, ...), except one
    that reads as two days (``01/09/2017``: January 9 or September 1); a time zone
    is converted to UTC like the file's stamps. An ``end`` without a time of day
    includes that whole day. Raises ``DataError`` (one line, naming the ``flags`` that
    gave ``start`` and ``end``) for an unparseable date, ``start`` after ``end``, or a
    range holding no bars.
    """
    times = data.timestamps
    lo, hi = 0, len(times)
    first, last = pd.Timestamp(times[0]), pd.Timestamp(times[-1])
    t0 = t1 = None
    if start is not None:
        t0, _ = _parse_date(start, flags[0])
        lo = int(np.searchsorted(times, t0.to_datetime64(), side="left"))
    if end is not None:
        t1, whole_day = _parse_date(end, flags[1])
        if whole_day:
            t1 = t1 + pd.Timedelta(days=1) - pd.Timedelta(1, "ns")
        hi = int(np.searchsorted(times, t1.to_datetime64(), side="right"))
    if t0 is not None and t1 is not None and t0 > t1:
        raise DataError(f"{flags[0]} {start} is after {flags[1]} {end}; swap them")
    if lo >= hi:
        raise DataError(f"{data.source}: no bars from {start or 'the start'} to {end or 'the end'}; "
                        f"the data runs from {first} to {last}")
    return lo, hi
