"""The bars a ``TradingPolicy`` is fed, checked: one bar's time and OHLCV, its feature values, and files.

Each check raises ``UsageError`` with one line naming the bar (or the file) and what is
wrong: ``bar_values`` for ``update``'s time and prices, ``check_after`` for ``feed``'s first bar,
``feature_row`` for its ``features`` mapping, ``features_of`` for a ``MarketData``'s feature columns, and
``as_market_data`` for a file or DataFrame (through ``envs.data.load_ohlcv``).
``parse_start`` and ``with_costs`` check ``--start`` and the cost overrides.
"""
from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any, Mapping, Optional, Union

import numpy as np
import pandas as pd

from envs.config import EnvConfig
from envs.data.loading import DataError, MarketData, _parse_date, load_ohlcv

from ..errors import UsageError, one_line

Source = Union[MarketData, pd.DataFrame, str, os.PathLike]
FeatureValues = Mapping[str, Optional[float]]


def bar_time_ns(time: Any) -> int:
    """A bar's time as naive-UTC nanoseconds (time zones converted to UTC, as the loader does)."""
    try:
        stamp = pd.Timestamp(time)
    except (ValueError, TypeError, OverflowError) as err:
        raise UsageError(f"bar time {time!r} is not a time ({one_line(err)})") from None
    if stamp is pd.NaT or pd.isna(stamp):
        raise UsageError(f"bar time {time!r} is not a time")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    return int(stamp.as_unit("ns").value)


def check_after(data: MarketData, stamps: np.ndarray, first: int, last_ns: Optional[int]) -> None:
    """UsageError unless ``data``'s bar ``first`` (its time ``stamps[0]``, ns) comes after ``last_ns``."""
    if len(stamps) and last_ns is not None and int(stamps[0]) <= last_ns:
        raise UsageError(f"{data.source}: bar {first} ({pd.Timestamp(int(stamps[0]))}) is not after the last "
                         f"bar consumed ({pd.Timestamp(last_ns)})")


def bar_values(time: Any, last_ns: Optional[int], open_: float, high: float, low: float, close: float,
               volume: float) -> tuple[int, list[float]]:
    """One new bar's time (ns, after ``last_ns``) and its OHLCV as floats: prices finite and > 0,
    volume finite and >= 0."""
    t = bar_time_ns(time)
    if last_ns is not None and t <= last_ns:
        raise UsageError(f"bar time {pd.Timestamp(t)} is not after the last bar's ({pd.Timestamp(last_ns)})")
    values = [float(v) for v in (open_, high, low, close, volume)]
    if not all(math.isfinite(v) and v > 0 for v in values[:4]):
        raise UsageError(f"bar at {pd.Timestamp(t)}: open, high, low and close must be finite and > 0, got "
                         f"{values[:4]}")
    if not (math.isfinite(values[4]) and values[4] >= 0):
        raise UsageError(f"bar at {pd.Timestamp(t)}: volume must be finite and >= 0, got {values[4]}")
    return t, values


def features_of(data: MarketData, names: tuple[str, ...], trained_with: str) -> Optional[np.ndarray]:
    """The feature columns ``names`` of ``data`` [n, F] float64 in that order (None without
    names); UsageError naming a column ``data`` was not loaded with (``trained_with``: the
    policy's ``--features``)."""
    if not names:
        return None
    have = {str(name).lower(): j for j, name in enumerate(data.feature_names)}
    missing = [name for name in names if name.lower() not in have]
    if missing or data.features is None:
        shown = ", ".join(map(repr, missing or names))
        raise UsageError(f"{data.source}: has no feature column {shown}, which the policy reads "
                         f"(trained with --features {trained_with}); load the "
                         f"data with those columns (load_ohlcv(..., features=...)), or pass a file or DataFrame")
    values = np.asarray(data.features, dtype=np.float64)
    if values.shape != (len(data), len(data.feature_names)):
        raise UsageError(f"{data.source}: its features have shape {values.shape}, expected "
                         f"({len(data)}, {len(data.feature_names)}): one row per bar, one column per name")
    return values[:, [have[name.lower()] for name in names]]


def feature_row(features: Optional[FeatureValues], names: tuple[str, ...], when: pd.Timestamp
                ) -> Optional[np.ndarray]:
    """``update``'s ``features`` as one raw row [1, F] float64 in the order of ``names`` (None
    without names): a mapping matched case-insensitively, each value a number or None/NaN."""
    if not names:
        if features:
            raise UsageError(f"bar at {when}: features {sorted(map(str, features.keys()))} given, but this "
                             f"policy reads no feature columns (it was trained without --features)")
        return None
    if features is None:
        raise UsageError(f"bar at {when}: the policy reads feature columns {', '.join(names)}; pass them as "
                         f"update(..., features={{{', '.join(repr(n) + ': ...' for n in names)}}})")
    if not hasattr(features, "keys"):
        raise UsageError(f"bar at {when}: features must map each column name to its value (a dict), got "
                         f"{type(features).__name__}")
    given = {str(key).lower(): key for key in features.keys()}
    if len(given) != len(list(features.keys())):
        raise UsageError(f"bar at {when}: features name a column twice (names are matched case-insensitively)")
    wanted = {name.lower() for name in names}
    missing = [name for name in names if name.lower() not in given]
    unknown = [str(key) for low, key in given.items() if low not in wanted]
    if missing or unknown:
        what = [f"no value for {', '.join(map(repr, missing))}"] if missing else []
        what += [f"unknown column(s) {', '.join(map(repr, unknown))}"] if unknown else []
        raise UsageError(f"bar at {when}: features: {'; '.join(what)}; the policy reads {', '.join(names)}")
    row = np.empty((1, len(names)))
    for j, name in enumerate(names):
        value = features[given[name.lower()]]
        try:
            row[0, j] = np.nan if value is None else float(value)
        except (TypeError, ValueError):
            raise UsageError(f"bar at {when}: feature {name!r} must be a number, got {value!r}") from None
    return row


def parse_start(start: str) -> pd.Timestamp:
    """``--start`` as a naive-UTC timestamp (the loader's rule); UsageError when it is not a date."""
    try:
        return _parse_date(start, "--start")[0].as_unit("ns")
    except DataError as err:
        raise UsageError(str(err)) from None


def with_costs(env: EnvConfig, fee_bps: Optional[float], slippage_bps: Optional[float]) -> EnvConfig:
    """``env`` with the cost overrides that are not None (UsageError unless finite and >= 0)."""
    for flag, value in (("--fee-bps", fee_bps), ("--slippage-bps", slippage_bps)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a number >= 0, got {value}")
    if fee_bps is not None:
        env = replace(env, fee_bps=float(fee_bps))
    if slippage_bps is not None:
        env = replace(env, slippage_bps=float(slippage_bps))
    return env


def as_market_data(source: Source, date_format: Optional[str] = None,
                   features: tuple[str, ...] = ()) -> MarketData:
    """``source`` as validated bars: a ``MarketData`` as it is; a DataFrame or file through
    ``envs.data.load_ohlcv``, with the feature columns ``features`` (DataError becomes
    UsageError: a file lacking one of them is refused, naming the column)."""
    if isinstance(source, MarketData):
        return source
    try:
        return load_ohlcv(source, date_format, features=features)
    except DataError as err:
        if features and "feature column" in str(err):
            raise UsageError(f"{err} (the policy was trained with --features {','.join(features)})") from None
        raise UsageError(str(err)) from None
