"""A session's history: the bars of an open request checked as a data file is, and what the server keeps of them.

``history_data`` turns the request's bars into a ``MarketData`` through ``envs.data.load_ohlcv``
(the loader ``predict-ppo-lstm --data`` uses: the same checks, the same floats), with the policy's
feature columns. ``chain_before_last`` is the bar chain's digest before the history's last bar (so a
repeat of that bar can be told from another bar of the same time), and ``widest_gap_ns`` the widest
gap between two of its bars (the calendar a later bar's gap is compared with).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from envs.data import MarketData

from ..deploy.bars import as_market_data, features_of
from ..deploy.state import bar_records, chain_digest
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
    frame = pd.DataFrame({"Date": [bar.time for bar in bars],
                          **{name.capitalize(): [getattr(bar, name) for bar in bars] for name in _PRICES}})
    for key in columns:
        frame[key] = [np.nan if (v := (bar.features or {}).get(key)) is None else v for bar in bars]
    return as_market_data(frame, None, names)


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
