"""Bar times without pandas: naive-UTC int64 nanoseconds, ``numpy.datetime64`` and ISO text.

The stream keeps every time as naive-UTC nanoseconds (``int``), and shows it as a
``numpy.datetime64[ns]`` (``stamp``) or ISO 8601 text (``iso``, ``shown``: the text
``pandas.Timestamp`` writes, so the JSON outputs keep their form). ``time_ns`` reads a bar's
time: a ``numpy.datetime64``, a ``datetime``/``date`` or an ISO 8601 string
(``2024-01-02``, ``2024-01-02 14:30``, ``2024-01-02T14:30:00.5Z``, ``...+02:00``) without
pandas; anything else (another text format, an epoch number, a ``pandas.Timestamp``, or a
value these rules refuse) goes to ``pandas.Timestamp``, imported then, which reads it or
says why not.
"""
from __future__ import annotations

import re
import sys
from datetime import date, datetime, timedelta, timezone
from typing import Any, Optional

import numpy as np

NS = np.dtype("datetime64[ns]")
_EPOCH = datetime(1970, 1, 1)
_ISO = re.compile(r"(\d{4})-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?")
_ZONE = re.compile(r"Z|([+-])(\d{2}):?(\d{2})")
_YEARS = (1678, 2261)  # years whose every instant fits in int64 nanoseconds


def stamp(ns: int) -> np.datetime64:
    """``ns`` (naive-UTC nanoseconds) as a ``numpy.datetime64[ns]``."""
    return np.datetime64(int(ns), "ns")


def iso(ns: int | np.datetime64, sep: str = "T") -> str:
    """``ns`` (nanoseconds, or a ``numpy.datetime64``) as ISO 8601 text, as ``pandas.Timestamp.isoformat``
    writes it: seconds always, then ``.ffffff`` for microseconds or ``.fffffffff`` for nanoseconds, only when
    there are any."""
    if isinstance(ns, np.datetime64):
        ns = int(ns.astype(NS).view(np.int64))
    seconds, frac = divmod(int(ns), 10**9)
    text = (_EPOCH + timedelta(seconds=seconds)).isoformat(sep)
    if frac % 1000:
        return f"{text}.{frac:09d}"
    return f"{text}.{frac // 1000:06d}" if frac else text


def shown(ns: int) -> str:
    """``ns`` as messages show a time (``str(pandas.Timestamp)``: ``2024-01-02 14:30:00``)."""
    return iso(ns, " ")


def time_ns(value: Any) -> Optional[int]:
    """A bar's time as naive-UTC nanoseconds (a time zone converted to UTC, as the loader does); None for
    a missing time (NaT). ValueError, TypeError or OverflowError (pandas') for a value that is not a time."""
    fast = _fast_ns(value)
    return _pandas_ns(value) if fast is None else fast


def _fast_ns(value: Any) -> Optional[int]:
    """``time_ns`` without pandas, or None where pandas decides (see the module docstring)."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, pandas.Timestamp):
        return None
    if isinstance(value, np.datetime64):
        return int(value.view(np.int64)) if value.dtype == NS and not np.isnat(value) else None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if isinstance(value, datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        elif value.tzinfo is not None:
            return None
        if not _YEARS[0] <= value.year <= _YEARS[1]:
            return None
        return (value - _EPOCH) // timedelta(microseconds=1) * 1000
    return iso_ns(value) if isinstance(value, str) else None


def iso_ns(text: str) -> Optional[int]:
    """An ISO 8601 string's naive-UTC nanoseconds (None: not of the forms ``time_ns`` reads itself)."""
    found = _ISO.match(text)
    if found is None or not _YEARS[0] <= int(found.group(1)) <= _YEARS[1]:
        return None
    zone = _ZONE.fullmatch(text, found.end()) if found.end() < len(text) else None
    if found.end() < len(text) and zone is None:
        return None
    try:
        ns = int(np.datetime64(found.group(0).replace(" ", "T"), "ns").view(np.int64))
    except ValueError:
        return None
    if zone is not None and zone.group(1):
        hours, minutes = int(zone.group(2)), int(zone.group(3))
        if hours > 23 or minutes > 59:
            return None
        offset = (hours * 60 + minutes) * 60 * 10**9
        ns += -offset if zone.group(1) == "+" else offset
    return ns


def _pandas_ns(value: Any) -> Optional[int]:
    """``time_ns`` through ``pandas.Timestamp`` (imported here, for the values the fast rules leave)."""
    import pandas as pd

    stamp_ = pd.Timestamp(value)
    if stamp_ is pd.NaT or pd.isna(stamp_):
        return None
    if stamp_.tzinfo is not None:
        stamp_ = stamp_.tz_convert("UTC").tz_localize(None)
    return int(stamp_.as_unit("ns").value)
