"""A session's history: the bars of an open request checked as a data file is, and what the server keeps of them.

``history_data`` turns the request's bars into a ``MarketData`` as ``envs.data.load_ohlcv`` would
(the loader ``predict-ppo-lstm --data`` uses: the same checks, the same floats), with the policy's
feature columns: bars with ISO 8601 times in order, valid as a plain file's are
(``envs.data.plain_csv.plain_bars``), without pandas; any others through the loader itself (pandas
imported then), which reads them or says what is wrong. ``chain_before_last`` is the bar chain's digest
before the history's last bar (so a repeat of that bar can be told from another bar of the same time),
and ``widest_gap_ns`` the widest gap between two of its bars (the calendar a later bar's gap is compared
with).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from envs.data.names import _ADJ_CLOSE, _PRICE_ALIASES, _TIME_NAMES, _VOLUME, _norm
from envs.data.market_data import MarketData
from envs.data.plain_csv import plain_bars

from ..deploy.bars import as_market_data, features_of
from ..deploy.state import bar_records, chain_digest
from ..deploy.times import iso_ns
from ..errors import UsageError
from .models import Bar

_NS = np.dtype("datetime64[ns]")
_PRICES = ("open", "high", "low", "close", "volume")


def _feature_columns(bars: list[Bar], names: tuple[str, ...]) -> list[str]:
    """The feature keys every bar carries (the first bar's, in its spelling); UsageError when bars differ,
    or carry features a policy without them does not read."""
    first = bars[0].features or {}
    if not names:
        if any(bar.features for bar in bars):
            raise UsageError("bars carry features, but this policy reads no feature columns (it was trained "
                             "without --features)")
        return []
    keys = {key.lower() for key in first}
    for i, bar in enumerate(bars):
        theirs = {key.lower() for key in (bar.features or {})}
        if theirs != keys:
            raise UsageError(f"bar {i} ({bar.time}): its features name {sorted(theirs)}, bar 0's name "
                             f"{sorted(keys)}; every bar carries the same columns (null where a column has no value "
                             f"yet)")
    return list(first)


def history_data(bars: list[Bar], names: tuple[str, ...]) -> MarketData:
    """The bars as a ``MarketData`` with the feature columns ``names`` (UsageError, one line, for what the
    loader refuses: e.g. a missing feature column, bars out of order or twice)."""
    columns = _feature_columns(bars, names)
    plain = _plain(bars, names, columns)
    if plain is not None:
        return plain
    import pandas as pd

    frame = pd.DataFrame({"Date": [bar.time for bar in bars],
                          **{name.capitalize(): [getattr(bar, name) for bar in bars] for name in _PRICES}})
    for key in columns:
        frame[key] = [np.nan if (v := (bar.features or {}).get(key)) is None else v for bar in bars]
    return as_market_data(frame, None, names)


def _plain(bars: list[Bar], names: tuple[str, ...], columns: list[str]) -> Optional[MarketData]:
    """``history_data`` without pandas, or None where the loader decides: a time that is not ISO 8601, a
    feature key the loader could read as a time, price or volume column, or bars ``plain_bars`` leaves."""
    taken = {*_TIME_NAMES, *_ADJ_CLOSE, *_VOLUME, *(alias for aliases in _PRICE_ALIASES.values() for alias in aliases)}
    lower = {key.lower(): key for key in columns}
    if len(lower) != len(columns) or any(_norm(key) in taken for key in columns) or any(
            name.lower() not in lower for name in names):
        return None
    stamps = [iso_ns(bar.time) for bar in bars]
    if any(t is None for t in stamps):
        return None
    prices = [np.array([getattr(bar, name) for bar in bars], dtype=np.float64) for name in _PRICES]
    keys = [lower[name.lower()] for name in names]
    features = np.array([[np.nan if (v := (bar.features or {}).get(key)) is None else v for key in keys]
                         for bar in bars], dtype=np.float64).reshape(len(bars), len(keys))
    return plain_bars("DataFrame", np.array(stamps, dtype=np.int64).view("datetime64[ns]"), *prices, names,
                      features if names else None)


def bar_stamps(data: MarketData) -> np.ndarray:
    """The bars' times as int64 nanoseconds."""
    return np.asarray(data.timestamps).astype(_NS).view(np.int64)


def chain_before_last(data: MarketData, names: tuple[str, ...], trained_with: str) -> bytes:
    """The bar chain's digest after every bar of ``data`` but the last (empty for one bar)."""
    raw = features_of(data, names, trained_with)
    n = len(data) - 1
    records = bar_records(bar_stamps(data)[:n], data.open[:n], data.high[:n], data.low[:n], data.close[:n],
                          data.volume[:n], None if raw is None else raw[:n])
    return chain_digest(b"", records)


def widest_gap_ns(data: MarketData) -> Optional[int]:
    """The widest gap between two consecutive bars of ``data`` (None for one bar)."""
    stamps = bar_stamps(data)
    return int(np.diff(stamps).max()) if len(stamps) > 1 else None
