"""Timestamp parsing for the OHLCV loader: the time column's raw values to naive-UTC ``datetime64[ns]``.

``_parse_time`` takes the raw values of the column ``envs.data.loading`` found and
returns them parsed, in file order, or raises ``DataError`` naming the first
row it cannot read.

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
"""
from __future__ import annotations

import re
import warnings
from datetime import datetime

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from envs.data.errors import _Ctx, _more, _show


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
