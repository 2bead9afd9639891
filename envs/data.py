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
    is optional (zeros when absent, NaN volume counts as 0).

Adjusted prices
    With both Close and Adj Close, every row is put on the adjusted basis as
    yfinance's ``auto_adjust`` does: Open, High and Low are multiplied by that
    row's ``Adj Close / Close`` and the close is ``Adj Close``, so fills (at
    opens) and marks (at closes) use the same prices and a split or dividend
    adds no profit or loss. Volume is left as it is in the file (as yfinance
    does). A row whose Adj Close equals its Close comes out bit-identical to the
    file without the column. An Adj Close without a raw Close is refused: the
    opens cannot be adjusted, and mixing raw opens with adjusted closes invents
    a profit or loss at every split and dividend (rename it to Close when the
    file's Open/High/Low are already adjusted).

Time column (first match wins)
    ``Datetime``, ``Timestamp``, ``Date``, ``Time``, ``Gmt time`` and a few
    other names (see ``_TIME_NAMES``); a ``Date`` column plus a time-of-day
    ``Time`` column (``22:00:00``) are joined; failing those, an unnamed first
    column (``,Open,High,...`` -> ``Unnamed: 0``, or the index pandas makes when
    the header is one field short, or a Parquet index).

Timestamp parsing
    * ``date_format`` given: every row must match that strftime format.
    * numeric values (or digit strings) are epochs, the unit chosen from the
      median value: ``[1e8, 1e11)`` seconds, ``[1e11, 1e14)`` milliseconds,
      ``[1e14, 1e17)`` microseconds, ``>= 1e17`` nanoseconds; integers in
      ``[1e7, 1e8)`` are read as ``YYYYMMDD``. Every row must fall in the
      chosen unit's range.
    * strings: ISO 8601 first; otherwise a list of candidate formats (pandas'
      month-first and day-first guesses for the first value, then common
      ``d.m.Y``, ``m/d/Y``, ``Y.m.d``... dates with optional times) is tried on
      a sample, and the candidates that parse the sample are checked on every
      row. Ambiguity rule: when several formats parse every row and give
      different times, prefer (1) one whose times are monotonic in file order
      (ascending or descending), then (2) the most regular spacing once
      sorted (largest share of gaps equal to the median gap), then (3) the
      earlier candidate: pandas' guesses for the first value come first, the
      day-first guess before the month-first one for ``dd.mm.`` dates and the
      other way round otherwise, then the fixed list, which likewise tries
      ``.`` dates day-first first and ``/`` or ``-`` dates month-first first.
    * time zones are converted to UTC and dropped; the result is naive
      ``datetime64[ns]``.

Row numbers in messages
    "row N" is the 1-based data row in the file's original order (before
    sorting). For CSV the message adds "line N+1", the line in the file for a
    one-line header and no blank lines (pandas skips blank lines, so each blank
    line above the row shifts the real line down by one).

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
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

__all__ = ["DataError", "MarketData", "load_ohlcv", "date_span"]

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_YEAR = 365.0 * SECONDS_PER_DAY
TRADING_DAYS_PER_YEAR = 252.0


class DataError(ValueError):
    """A problem with a data file. str(err) is ONE line: what is wrong, where (file, column, row), and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


@dataclass(frozen=True, eq=False)
class MarketData:
    """Validated bars, oldest first. ``eq=False``: instances compare by identity (fields are arrays)."""

    source: str
    timestamps: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    bar_seconds: float

    def __len__(self) -> int:
        return int(self.close.shape[0])

    @property
    def periods_per_year(self) -> float:
        """Bars per year, for annualising returns and volatility.

        Rule: bars about one day apart (0.75 to 1.25 days) where at least 10% of
        the gaps exceed 1.5 bars (weekends and holidays of an exchange calendar,
        including FX's Friday-to-Sunday gap) -> 252 trading days. Otherwise a
        365-day calendar year divided by ``bar_seconds`` (daily crypto -> 365,
        hourly -> 8760, one-minute -> 525600).
        """
        if not self.bar_seconds > 0:
            return float("nan")
        if 0.75 * SECONDS_PER_DAY <= self.bar_seconds <= 1.25 * SECONDS_PER_DAY and len(self) > 1:
            gaps = np.diff(self.timestamps).astype("timedelta64[ns]").astype(np.int64) / 1e9
            if np.mean(gaps > 1.5 * self.bar_seconds) >= 0.10:
                return TRADING_DAYS_PER_YEAR
        return SECONDS_PER_YEAR / self.bar_seconds


# ----------------------------------------------------------------------------- column names

_PRICE_ALIASES: dict[str, tuple[str, ...]] = {
    "open": ("open", "o", "openprice"),
    "high": ("high", "h", "highprice"),
    "low": ("low", "l", "lowprice"),
    "close": ("close", "c", "closeprice"),
}
_ADJ_CLOSE = ("adjclose", "adjustedclose", "adjclosing")  # Adj Close; scales Open/High/Low when Close is there too
_VOLUME = ("volume", "vol", "v")
_TIME_NAMES = (
    "datetime", "timestamp", "date", "time", "gmttime", "utctime", "localtime", "datetimeutc",
    "dateutc", "timeutc", "opentime", "unix", "unixtime", "epoch", "ts", "dt",
)
_UNNAMED = re.compile(r"^(unnamed:?\d*|index|level0|)$")
_TIME_OF_DAY = r"\s*\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*([AaPp][Mm])?\s*"


def _norm(name: object) -> str:
    """Normalised column name: lower case without spaces, underscores, dashes or dots."""
    return re.sub(r"[\s_\-.]+", "", str(name).lower())


class _Ctx:
    """Where we are: file name and how to describe a row."""

    def __init__(self, source: str, is_csv: bool) -> None:
        self.source = source
        self.is_csv = is_csv

    def row(self, i: int) -> str:
        """Describe 0-based data index ``i`` in the user's terms."""
        return f"row {i + 1} (line {i + 2})" if self.is_csv else f"row {i + 1}"

    def fail(self, message: str) -> DataError:
        return DataError(f"{self.source}: {message}")


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _more(mask: np.ndarray) -> str:
    extra = int(np.count_nonzero(mask)) - 1
    return f" ({extra} more such row{'s' if extra != 1 else ''})" if extra > 0 else ""


def _find(ctx: _Ctx, columns: list[str], aliases: tuple[str, ...], what: str) -> str | None:
    """Column matching the first alias that matches any column; None when no alias matches."""
    normed = [_norm(c) for c in columns]
    for alias in aliases:
        hits = [c for c, n in zip(columns, normed) if n == alias]
        if len(hits) > 1:
            names = " and ".join(repr(str(h)) for h in hits)
            raise ctx.fail(f"columns {names} both look like the {what} column; rename or drop one of them")
        if hits:
            return hits[0]
    return None


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
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None:
        frame = frame.reset_index()
    frame.columns = [str(c) for c in frame.columns]
    return frame.reset_index(drop=True)


# ----------------------------------------------------------------------------- timestamps

_DATES_DAY_FIRST = ("%d.%m.%Y", "%m.%d.%Y", "%d.%m.%y", "%m.%d.%y")
_DATES_MONTH_FIRST = (
    "%m/%d/%Y", "%d/%m/%Y", "%m/%d/%y", "%d/%m/%y", "%m-%d-%Y", "%d-%m-%Y",
)
_DATES_YEAR_FIRST = ("%Y.%m.%d", "%Y/%m/%d", "%Y%m%d", "%Y-%m-%d")
_DATES_NAMED = ("%d-%b-%Y", "%d %b %Y", "%b %d, %Y", "%d-%b-%y", "%Y-%b-%d")
_TIMES = (
    "", " %H:%M", " %H:%M:%S", " %H:%M:%S.%f", "T%H:%M:%S", "T%H:%M:%S.%f",
    " %I:%M %p", " %I:%M:%S %p", " %H%M%S",
)


def _candidate_formats(first: str) -> list[str]:
    """Formats to try for string stamps whose first value is ``first``."""
    out: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        european = re.match(r"\s*\d{1,2}\.\d{1,2}\.", first) is not None
        for dayfirst in ((True, False) if european else (False, True)):
            try:
                guess = guess_datetime_format(first, dayfirst=dayfirst)
            except Exception:  # noqa: BLE001 - a failed guess is just no candidate
                guess = None
            if guess:
                out.append(guess)
    for dates in (_DATES_DAY_FIRST, _DATES_MONTH_FIRST, _DATES_YEAR_FIRST, _DATES_NAMED):
        for date in dates:
            for time in _TIMES:
                try:  # cheap pre-filter on the first value; pandas decides on the real data
                    datetime.strptime(first, date + time)
                except ValueError:
                    continue
                out.append(date + time)
    return list(dict.fromkeys(out))


def _to_dt(values: pd.Series, fmt: str) -> pd.Series:
    """Parse strings with one format; failures become NaT. Result is UTC-aware."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pd.to_datetime(values, format=fmt, errors="coerce", utc=True)
        except (ValueError, TypeError, OverflowError):
            return pd.Series(pd.NaT, index=values.index, dtype="datetime64[ns, UTC]")


def _regularity(ns: np.ndarray) -> tuple[bool, float]:
    """(monotonic in file order, share of sorted gaps equal to the median gap) for int64 nanoseconds."""
    if ns.size < 2:
        return True, 1.0
    gaps = np.diff(ns)
    monotonic = bool(np.all(gaps > 0) or np.all(gaps < 0))
    sorted_gaps = np.diff(np.sort(ns))
    return monotonic, float(np.mean(sorted_gaps == np.median(sorted_gaps)))


def _parse_strings(ctx: _Ctx, col: str, values: pd.Series, date_format: str | None) -> pd.Series:
    """Parse non-null string stamps (index = data row) into UTC-aware datetimes."""
    if date_format is not None:
        parsed = _to_dt(values, date_format)
        bad = parsed.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise ctx.fail(
                f"timestamp {_show(values.iloc[i])} in column '{col}' at {ctx.row(int(values.index[i]))} "
                f"does not match --date-format {date_format!r}{_more(bad)}; fix the row or the format"
            )
        return parsed

    n = len(values)
    pick = np.unique(np.concatenate([np.arange(min(n, 100)), np.arange(max(n - 100, 0), n),
                                     np.linspace(0, n - 1, num=min(n, 100)).astype(np.int64)]))
    sample = values.iloc[pick]
    if not _to_dt(sample, "ISO8601").isna().any():
        iso = _to_dt(values, "ISO8601")
        if not iso.isna().any():
            return iso
    scored: list[tuple[int, int, str]] = []  # (failures in sample, order, format)
    for order, fmt in enumerate(_candidate_formats(str(values.iloc[0]))):
        scored.append((int(_to_dt(sample, fmt).isna().sum()), order, fmt))
    scored.sort()

    full: list[tuple[int, str, pd.Series]] = []  # every-row successes
    best_fail: tuple[int, str, pd.Series] | None = None
    for fails, order, fmt in scored:
        if fails:
            break
        parsed = _to_dt(values, fmt)
        nbad = int(parsed.isna().sum())
        if nbad == 0:
            full.append((order, fmt, parsed))
        elif best_fail is None or nbad < best_fail[0]:
            best_fail = (nbad, fmt, parsed)
    if full:
        first = full[0][2]
        distinct = [f for f in full if not f[2].equals(first)]
        if not distinct:
            return first

        def key(item: tuple[int, str, pd.Series]) -> tuple[bool, float, int]:
            ns = item[2].dt.tz_convert(None).to_numpy().astype("datetime64[ns]").astype(np.int64)
            monotonic, regular = _regularity(ns)
            return (not monotonic, -regular, item[0])

        return min(full, key=key)[2]

    if best_fail is None:
        fmt = scored[0][2] if scored else "ISO8601"
        best_fail = (0, fmt, _to_dt(values, fmt))
    bad = best_fail[2].isna().to_numpy()
    i = int(np.argmax(bad))
    raise ctx.fail(
        f"cannot parse timestamp {_show(values.iloc[i])} in column '{col}' at {ctx.row(int(values.index[i]))}"
        f"{_more(bad)}; fix the row or pass --date-format with a strftime format for it "
        f"(e.g. '%d.%m.%Y %H:%M:%S.%f')"
    )


_EPOCH_UNITS = (("s", 1e8, 1e11), ("ms", 1e11, 1e14), ("us", 1e14, 1e17), ("ns", 1e17, np.inf))


def _parse_numbers(ctx: _Ctx, col: str, values: pd.Series) -> pd.Series:
    """Parse numeric stamps (index = data row): unix epoch in s/ms/us/ns, or YYYYMMDD integers."""
    v = values.to_numpy(dtype=np.float64)
    med = float(np.median(v))
    integral = bool(np.all(v == np.floor(v)))
    if integral and 1e7 <= med < 1e8:
        ok = (v >= 1e7) & (v < 1e8)
        if ok.all():
            return _parse_strings(ctx, col, values.astype(np.int64).astype(str), "%Y%m%d")
        unit, lo, hi = "YYYYMMDD", 1e7, 1e8
    else:
        for unit, lo, hi in _EPOCH_UNITS:
            if lo <= med < hi:
                break
        else:
            raise ctx.fail(
                f"numeric timestamps in column '{col}' (e.g. {_show(values.iloc[0])} at "
                f"{ctx.row(int(values.index[0]))}) are too small for unix seconds (~1.5e9) or milliseconds "
                f"(~1.5e12); use real timestamps"
            )
        ok = (v >= lo) & (v < hi)
    if not ok.all():
        bad = ~ok
        i = int(np.argmax(bad))
        raise ctx.fail(
            f"timestamp {_show(values.iloc[i])} in column '{col}' at {ctx.row(int(values.index[i]))} is out of range "
            f"for {unit} like the other rows{_more(bad)}; fix that row"
        )
    data = v.astype(np.int64) if integral else v
    try:
        return pd.Series(pd.to_datetime(data, unit=unit, utc=True), index=values.index)
    except (ValueError, OverflowError) as err:
        raise ctx.fail(f"cannot convert column '{col}' from unix {unit}: {err}; check the values") from None


def _parse_time(ctx: _Ctx, col: str, raw: pd.Series, date_format: str | None) -> np.ndarray:
    """Parse the time column into naive-UTC datetime64[ns] in file order."""
    missing = raw.isna().to_numpy()
    if isinstance(raw.dtype, pd.StringDtype) or raw.dtype == object:
        missing = missing | (raw.astype(str).str.strip() == "").to_numpy()
    if missing.any():
        i = int(np.argmax(missing))
        raise ctx.fail(f"missing timestamp in column '{col}' at {ctx.row(i)}{_more(missing)}; fill or delete that row")

    if isinstance(raw.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(raw.dtype):
        parsed = pd.to_datetime(raw, utc=True)
    elif date_format is not None:
        parsed = _parse_strings(ctx, col, raw.astype(str).str.strip(), date_format)
    elif pd.api.types.is_bool_dtype(raw.dtype):
        raise ctx.fail(f"column '{col}' holds true/false values, not timestamps; point it at a date column")
    elif pd.api.types.is_numeric_dtype(raw.dtype):
        parsed = _parse_numbers(ctx, col, raw)
    else:
        first = raw.iloc[0]
        if not isinstance(first, str) and hasattr(first, "year"):  # date/datetime objects (e.g. Parquet date32)
            parsed = pd.to_datetime(raw, utc=True, errors="coerce")
        else:
            text = raw.astype(str).str.strip()
            digits = r"[+-]?\d+(\.\d+)?"
            if re.fullmatch(digits, text.iloc[0]) and text.str.fullmatch(digits).all():
                parsed = _parse_numbers(ctx, col, pd.to_numeric(text))
            else:
                parsed = _parse_strings(ctx, col, text, None)
    try:
        return parsed.dt.tz_convert(None).to_numpy().astype("datetime64[ns]")
    except (ValueError, OverflowError) as err:
        raise ctx.fail(f"timestamps in column '{col}' are out of range ({err}); check the dates") from None


def _time_column(ctx: _Ctx, frame: pd.DataFrame) -> tuple[str, pd.Series]:
    """Name (for messages) and raw values of the time column."""
    columns = list(frame.columns)
    date_col = _find(ctx, columns, ("date",), "date")
    time_col = _find(ctx, columns, ("time",), "time")
    if date_col is not None and time_col is not None:
        tod = frame[time_col]
        if not pd.api.types.is_numeric_dtype(tod.dtype) and tod.astype(str).str.fullmatch(_TIME_OF_DAY).all():
            joined = frame[date_col].astype(str).str.strip() + " " + tod.astype(str).str.strip()
            joined[frame[date_col].isna() | tod.isna()] = np.nan
            return f"{date_col}+{time_col}", joined
    col = _find(ctx, columns, _TIME_NAMES, "time")
    if col is None and columns and _UNNAMED.match(_norm(columns[0])):
        col = columns[0]
    if col is None:
        raise ctx.fail(
            f"no time column found (looked for Date, Time, Datetime, Timestamp, Gmt time, unix, or an unnamed "
            f"first column); columns found: {', '.join(map(repr, columns))}; rename the time column to Date"
        )
    return col, frame[col]


# ----------------------------------------------------------------------------- prices

def _numeric(ctx: _Ctx, col: str, raw: pd.Series) -> np.ndarray:
    """Column as float64; non-numeric text is an error naming the first bad value."""
    if pd.api.types.is_bool_dtype(raw.dtype):
        raise ctx.fail(f"column '{col}' holds true/false values, not numbers; check the header")
    if pd.api.types.is_numeric_dtype(raw.dtype):
        return raw.to_numpy(dtype=np.float64, na_value=np.nan)
    text = raw.astype(str).str.strip()
    coerced = pd.to_numeric(text, errors="coerce")
    blank = raw.isna().to_numpy() | text.str.lower().isin(["", "nan", "na", "n/a", "null", "none"]).to_numpy()
    bad = coerced.isna().to_numpy() & ~blank
    if bad.any():
        i = int(np.argmax(bad))
        raise ctx.fail(
            f"non-numeric value {_show(raw.iloc[i])} in column '{col}' at {ctx.row(i)}{_more(bad)}; "
            f"fix or delete that row"
        )
    return coerced.to_numpy(dtype=np.float64, na_value=np.nan)


def _first_bad(ctx: _Ctx, checks: list[tuple[str, np.ndarray, Callable[[int], str]]]) -> None:
    """Raise for the earliest row (over all checks) whose mask is set; ``describe(i)`` builds the message."""
    best: tuple[int, str, np.ndarray, Callable[[int], str]] | None = None
    for col, mask, describe in checks:
        if mask.any():
            i = int(np.argmax(mask))
            if best is None or i < best[0]:
                best = (i, col, mask, describe)
    if best is not None:
        i, col, mask, describe = best
        raise ctx.fail(describe(i).replace("{more}", _more(mask)))


def _check_positive(ctx: _Ctx, named: list[tuple[str, np.ndarray]]) -> None:
    """Every price finite and > 0; the earliest bad row over all ``(column, values)`` is reported."""
    checks: list[tuple[str, np.ndarray, Callable[[int], str]]] = []
    for col, v in named:

        def msg(i: int, col: str = col, v: np.ndarray = v) -> str:
            x = v[i]
            if np.isnan(x):
                what = "missing value (NaN)"
            else:
                what = "infinite value" if np.isinf(x) else f"non-positive price {x:g}"
            return (f"{what} in column '{col}' at {ctx.row(i)}{{more}}; "
                    f"prices must be finite and > 0, fix or delete that row")

        checks.append((col, ~(np.isfinite(v) & (v > 0)), msg))
    _first_bad(ctx, checks)


def _adjust(px: dict[str, np.ndarray], adj_close: np.ndarray) -> dict[str, np.ndarray]:
    """Prices on the adjusted basis: Open/High/Low times ``Adj Close / Close`` per row, close = Adj Close.

    Where Adj Close equals Close the ratio is exactly 1.0, so those rows keep their exact values.
    """
    with np.errstate(over="ignore", under="ignore"):  # out-of-range results are reported by _check_scaled
        ratio = adj_close / px["close"]
        return {"open": px["open"] * ratio, "high": px["high"] * ratio, "low": px["low"] * ratio,
                "close": adj_close}


def _check_scaled(ctx: _Ctx, adj_col: str, close_col: str, raw: dict[str, np.ndarray],
                  px: dict[str, np.ndarray]) -> None:
    """Adjusted Open/High/Low still finite and > 0 (a wild Adj Close / Close ratio can overflow or underflow)."""
    bad = np.zeros(len(px["close"]), dtype=bool)
    for key in ("open", "high", "low"):
        bad |= ~(np.isfinite(px[key]) & (px[key] > 0))

    def msg(i: int) -> str:
        return (f"'{adj_col}' {px['close'][i]:g} / '{close_col}' {raw['close'][i]:g} at "
                f"{ctx.row(i)}{{more}} scales Open/High/Low out of range; check both columns in that row")

    _first_bad(ctx, [(adj_col, bad, msg)])


def _check_ohlc(ctx: _Ctx, cols: dict[str, str], px: dict[str, np.ndarray], shown: dict[str, np.ndarray]) -> None:
    """High >= Low and High/Low bracketing Open/Close, checked on ``px``; messages quote ``shown`` (the file's values).

    ``px`` is ``shown`` scaled by a positive factor per row (or ``shown`` itself), so a row
    fails on one exactly when it fails on the other, up to rounding the tolerance absorbs.
    """
    o, h, lo, c = px["open"], px["high"], px["low"], px["close"]
    so, sh, slo, sc = shown["open"], shown["high"], shown["low"], shown["close"]
    tol = 1e-9 * h

    def hl(i: int) -> str:
        return (f"High {sh[i]:g} is below Low {slo[i]:g} in columns '{cols['high']}'/'{cols['low']}' at "
                f"{ctx.row(i)}{{more}}; fix or delete that row")

    def br_high(i: int) -> str:
        return (f"High {sh[i]:g} is below Open {so[i]:g} or Close {sc[i]:g} in column '{cols['high']}' at "
                f"{ctx.row(i)}{{more}}; High must be >= Open and Close, fix or delete that row")

    def br_low(i: int) -> str:
        return (f"Low {slo[i]:g} is above Open {so[i]:g} or Close {sc[i]:g} in column '{cols['low']}' at "
                f"{ctx.row(i)}{{more}}; Low must be <= Open and Close, fix or delete that row")

    _first_bad(ctx, [
        (cols["high"], h < lo, hl),
        (cols["high"], h + tol < np.maximum(o, c), br_high),
        (cols["low"], lo - tol > np.minimum(o, c), br_low),
    ])


# ----------------------------------------------------------------------------- entry point

def load_ohlcv(path: str | os.PathLike, date_format: str | None = None, min_rows: int = 2) -> MarketData:
    """Load and validate an OHLCV file; bars come back oldest first. See the module docstring for the rules.

    ``date_format`` forces a strftime format for string timestamps (``--date-format``).
    ``min_rows`` is the fewest bars the caller can use (window + episode length + 1); at least 2.
    Raises ``DataError`` (a ``ValueError``) with a one-line message for any problem.
    """
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
    cols: dict[str, str] = {}
    for key, aliases in _PRICE_ALIASES.items():
        found = _find(ctx, columns, aliases, key)
        if found is not None:
            cols[key] = found
    adj_col = _find(ctx, columns, _ADJ_CLOSE, "adjusted close")
    missing = [k.capitalize() for k in _PRICE_ALIASES if k not in cols]
    if missing == ["Close"] and adj_col is not None:
        raise ctx.fail(
            f"has an adjusted close '{adj_col}' but no raw Close column, so Open/High/Low cannot be adjusted "
            f"(they are scaled by {adj_col} / Close per row); add the raw Close column (yfinance: "
            f"auto_adjust=False keeps both), or rename '{adj_col}' to Close if Open/High/Low are already adjusted"
        )
    if missing:
        raise ctx.fail(
            f"missing price column(s) {', '.join(missing)}; columns found: {', '.join(map(repr, columns))}; "
            f"the file needs Open, High, Low and Close columns (any case)"
        )
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
    )


# ----------------------------------------------------------------------------- date slices


def _parse_date(text: str, flag: str) -> tuple[pd.Timestamp, bool]:
    """``text`` as a naive UTC timestamp, and whether it named a whole day (no time of day)."""
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


def date_span(data: MarketData, start: str | None = None, end: str | None = None) -> tuple[int, int]:
    """Bars ``lo..hi-1`` of ``data`` with ``start <= time <= end`` (both inclusive, either may be None).

    Dates are parsed by pandas (``2021-03-01``, ``2021-03-01T14:30``, ...); a time zone
    is converted to UTC like the file's stamps. An ``end`` without a time of day
    includes that whole day. Raises ``DataError`` (one line) for an unparseable date,
    ``start`` after ``end``, or a range holding no bars.
    """
    times = data.timestamps
    lo, hi = 0, len(times)
    first, last = pd.Timestamp(times[0]), pd.Timestamp(times[-1])
    t0 = t1 = None
    if start is not None:
        t0, _ = _parse_date(start, "--start")
        lo = int(np.searchsorted(times, t0.to_datetime64(), side="left"))
    if end is not None:
        t1, whole_day = _parse_date(end, "--end")
        if whole_day:
            t1 = t1 + pd.Timedelta(days=1) - pd.Timedelta(1, "ns")
        hi = int(np.searchsorted(times, t1.to_datetime64(), side="right"))
    if t0 is not None and t1 is not None and t0 > t1:
        raise DataError(f"--start {start} is after --end {end}; swap them")
    if lo >= hi:
        raise DataError(f"{data.source}: no bars from {start or 'the start'} to {end or 'the end'}; "
                        f"the data runs from {first} to {last}")
    return lo, hi
