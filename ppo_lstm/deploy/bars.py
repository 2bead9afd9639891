"""The bars a ``TradingPolicy`` is fed, checked: one bar's time and OHLCV, its feature values, and files.

Each check raises ``UsageError`` with one line naming the bar (or the file) and what is
wrong: ``bar_values`` for ``update``'s time and prices, ``check_after`` for ``feed``'s first bar,
``feature_row`` for its ``features`` mapping, ``features_of`` for a ``MarketData``'s feature columns, and
``as_market_data`` for a file or DataFrame (through ``envs.data.load_ohlcv``, or, for a plain CSV
file, ``envs.data.plain_csv`` without pandas). ``parse_start``, ``check_start`` and ``with_costs`` check
``--start`` and the cost overrides. Nothing here imports pandas until a value needs it: a time that is not
ISO 8601, a DataFrame, a file that is not plain CSV, or a message of the loader's.
"""
from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

import numpy as np

from envs.config import EnvConfig
from envs.data.errors import DataError
from envs.data.market_data import MarketData
from envs.data.plain_csv import read_plain_csv

from ..errors import UsageError, one_line
from .times import NS, iso_ns, shown, stamp, time_ns

if TYPE_CHECKING:
    import pandas as pd

Source = Union[MarketData, "pd.DataFrame", str, os.PathLike]
FeatureValues = Mapping[str, Optional[float]]


def bar_time_ns(time: Any) -> int:
    """A bar's time as naive-UTC nanoseconds (time zones converted to UTC, as the loader does)."""
    try:
        ns = time_ns(time)
    except (ValueError, TypeError, OverflowError) as err:
        raise UsageError(f"bar time {time!r} is not a time ({one_line(err)})") from None
    if ns is None:
        raise UsageError(f"bar time {time!r} is not a time")
    return ns


def check_after(data: MarketData, stamps: np.ndarray, first: int, last_ns: Optional[int]) -> None:
    """UsageError unless ``data``'s bar ``first`` (its time ``stamps[0]``, ns) comes after ``last_ns``."""
    if len(stamps) and last_ns is not None and int(stamps[0]) <= last_ns:
        raise UsageError(f"{data.source}: bar {first} ({shown(int(stamps[0]))}) is not after the last "
                         f"bar consumed ({shown(last_ns)})")


def bar_values(time: Any, last_ns: Optional[int], open_: float, high: float, low: float, close: float,
               volume: float) -> tuple[int, list[float]]:
    """One new bar's time (ns, after ``last_ns``) and its OHLCV as floats: prices finite and > 0,
    volume finite and >= 0."""
    t = bar_time_ns(time)
    if last_ns is not None and t <= last_ns:
        raise UsageError(f"bar time {shown(t)} is not after the last bar's ({shown(last_ns)})")
    values = [float(v) for v in (open_, high, low, close, volume)]
    if not all(math.isfinite(v) and v > 0 for v in values[:4]):
        raise UsageError(f"bar at {shown(t)}: open, high, low and close must be finite and > 0, got "
                         f"{values[:4]}")
    if not (math.isfinite(values[4]) and values[4] >= 0):
        raise UsageError(f"bar at {shown(t)}: volume must be finite and >= 0, got {values[4]}")
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


def feature_row(features: Optional[FeatureValues], names: tuple[str, ...], when: str) -> Optional[np.ndarray]:
    """``update``'s ``features`` as one raw row [1, F] float64 in the order of ``names`` (None
    without names): a mapping matched case-insensitively, each value a number or None/NaN.
    ``when``: the bar's time as messages show it (``times.shown``)."""
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


def parse_start(start: str) -> np.datetime64:
    """``--start`` as a naive-UTC ``numpy.datetime64[ns]`` (the loader's rule, ``envs.data.loading``'s
    ``_parse_date``: an ISO 8601 date is read here, any other text there); UsageError when it is not a date."""
    fast = iso_ns(str(start).strip())  # ISO 8601: one reading, no day-first question
    if fast is not None:
        return stamp(fast)
    from envs.data.loading import _parse_date

    try:
        return _parse_date(start, "--start")[0].as_unit("ns").to_datetime64()
    except DataError as err:
        raise UsageError(str(err)) from None


def check_start(data: MarketData, start: Optional[str]) -> None:
    """UsageError unless ``data`` has a bar at or after ``start`` (``envs.data.date_span``'s rule, and its
    message: the loader's, imported only for it)."""
    if start is None or (len(data) and np.asarray(data.timestamps).astype(NS)[-1] >= parse_start(start)):
        return
    from envs.data.loading import date_span

    try:
        date_span(data, start)
    except DataError as err:
        raise UsageError(str(err)) from None
    raise UsageError(f"{data.source}: no bar at or after {start}")  # date_span refuses every such start


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
    """``source`` as validated bars: a ``MarketData`` as it is; a plain CSV file through
    ``envs.data.plain_csv`` (no pandas), any other file or a DataFrame through ``envs.data.load_ohlcv``,
    with the feature columns ``features`` (DataError becomes UsageError: a file lacking one of them is
    refused, naming the column)."""
    if isinstance(source, MarketData):
        return source
    if isinstance(source, (str, os.PathLike)) and date_format is None:
        plain = read_plain_csv(source, features)
        if plain is not None:
            return plain
    from envs.data.loading import load_ohlcv

    try:
        return load_ohlcv(source, date_format, features=features)
    except DataError as err:
        if features and "feature column" in str(err):
            raise UsageError(f"{err} (the policy was trained with --features {','.join(features)})") from None
        raise UsageError(str(err)) from None
