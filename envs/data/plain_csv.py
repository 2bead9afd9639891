"""``read_plain_csv``: a plain OHLCV CSV file read without pandas, or None where the loader must decide.

The ONNX inference route (``ppo_lstm.deploy``) reads its ``--data`` file here, so it runs without
pandas. This is not a second loader: it reads one layout, the one ``export``s and
``predict-ppo-lstm --state`` files are made of, and hands every other file to ``load_ohlcv``
(``loading.py``, with pandas) by returning None. That keeps one set of rules and one set of
messages: a file this reader accepts is one the loader accepts, with the same arrays bit for bit
(``tests/deploy/test_plain_csv.py``); anything it is unsure of, the loader reads, or refuses with its
own message.

The layout: a ``.csv`` file (UTF-8, no byte-order mark, comma-separated, no quotes), a header
naming each column once, with one time column (``Date``, ``Datetime``, ``Timestamp``, ``Time``, ...:
the loader's names, only one of them), one column for each of open, high, low and close (the
loader's names, no adjusted close), at most one volume column, and the ``features`` columns (named
as the loader matches them, case-insensitively); at least 2 rows, each with every field; times in
ISO 8601 without a time zone (``2024-01-02``, ``2024-01-02 14:30:00``), strictly increasing;
numbers in plain decimal notation (``-12.5``: no exponent, no ``+``, at most 17 digits after the
leading zeros); prices > 0, high >= low and bracketing open and close exactly (the loader's
tolerance is its to apply), volume given on every row; a feature column blank only in its leading
rows, its values within the z-score's range.
"""
from __future__ import annotations

import csv
import os
import re
from typing import Optional, Sequence

import numpy as np

from envs.data.names import _ADJ_CLOSE, _PRICE_ALIASES, _TIME_NAMES, _VOLUME, _norm
from envs.data.features import out_of_range
from envs.data.market_data import MarketData

__all__ = ["read_plain_csv", "plain_bars"]

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MAX_DIGITS = 17
_YEARS = (1678, 2261)  # years whose every instant fits in int64 nanoseconds


def read_plain_csv(path: str | os.PathLike, features: Sequence[str] = ()) -> Optional[MarketData]:
    """``path`` as ``load_ohlcv(path, features=features)`` reads it, or None when it is not of the plain
    layout (the module docstring): then ``load_ohlcv`` reads it, or says what is wrong with it."""
    source = os.fspath(path)
    if not source.lower().endswith(".csv") or not os.path.isfile(source):
        return None
    try:
        with open(source, newline="", encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return None
    if not text or text.startswith("\ufeff") or '"' in text:
        return None
    rows = list(csv.reader(text.splitlines()))
    if len(rows) < 3 or any(len(row) != len(rows[0]) for row in rows):
        return None
    picked = _columns(rows[0], features)
    if picked is None:
        return None
    return _bars(source, rows[1:], picked, tuple(str(name) for name in features))


def _columns(header: list[str], features: Sequence[str]) -> Optional[list[Optional[int]]]:
    """The indices of the time, open, high, low, close and volume (None: none) columns, then the
    feature columns; None unless each is named once and nothing else reads as a time or price."""
    normed = [_norm(name) for name in header]
    if len(set(header)) != len(header) or any(n in _ADJ_CLOSE for n in normed) or len(header) < 5:
        return None
    picked: list[Optional[int]] = []
    for aliases in (_TIME_NAMES, *_PRICE_ALIASES.values(), _VOLUME):
        hits = [i for i, n in enumerate(normed) if n in aliases]
        if len(hits) > 1 or (not hits and aliases is not _VOLUME):
            return None
        picked.append(hits[0] if hits else None)
    for name in features:
        hits = [i for i, column in enumerate(header) if column.lower() == str(name).lower()]
        if len(hits) != 1 or hits[0] in picked:
            return None
        picked.append(hits[0])
    return picked


def _bars(source: str, rows: list[list[str]], picked: list[Optional[int]], names: tuple[str, ...]
          ) -> Optional[MarketData]:
    """The rows' validated bars (None at the first value the plain layout does not hold)."""
    times = [row[picked[0]] for row in rows]
    if not all(_TIME.fullmatch(t) and _YEARS[0] <= int(t[:4]) <= _YEARS[1] for t in times):
        return None
    try:
        stamps = np.array([t.replace(" ", "T") for t in times], dtype="datetime64[ns]")
    except ValueError:
        return None
    columns = [_numbers([row[j] for row in rows], blank=False) if j is not None else np.zeros(len(rows))
               for j in picked[1:6]]
    features = [_numbers([row[j] for row in rows], blank=True) for j in picked[6:]]
    if any(c is None for c in columns + features):
        return None
    return plain_bars(source, stamps, *columns, names, np.stack(features, axis=1) if names else None)


def plain_bars(source: str, stamps: np.ndarray, open_: np.ndarray, high: np.ndarray, low: np.ndarray,
               close: np.ndarray, volume: np.ndarray, names: tuple[str, ...] = (),
               features: Optional[np.ndarray] = None) -> Optional[MarketData]:
    """Bars already read (``stamps`` datetime64[ns], float64 columns, ``features`` [n, F] with NaN for a
    blank) as the loader would make them, or None unless they hold the plain layout's values (the module
    docstring: increasing times, valid prices, feature columns blank only in their warm-up)."""
    ns = stamps.view(np.int64)
    o, h, lo, c, v = open_, high, low, close, volume
    if len(ns) < 2 or not (np.diff(ns) > 0).all():
        return None
    prices_ok = (np.isfinite(h) & (o > 0) & (lo > 0) & (c > 0) & (h >= lo) & (h >= np.maximum(o, c))
                 & (lo <= np.minimum(o, c)))
    if not (prices_ok.all() and (np.isfinite(v) & (v >= 0)).all()):
        return None
    if names and not all(_warm_up_only(features[:, k]) for k in range(len(names))):
        return None
    return MarketData(source=source, timestamps=stamps, open=o, high=h, low=lo, close=c, volume=v,
                      bar_seconds=float(np.median(np.diff(ns))) / 1e9,
                      feature_names=names, features=features if names else None)


def _numbers(cells: list[str], blank: bool) -> Optional[np.ndarray]:
    """The cells as float64 (a blank one NaN when ``blank``); None at a cell of another form."""
    out = np.empty(len(cells))
    for i, cell in enumerate(cells):
        if cell == "" and blank:
            out[i] = np.nan
        elif _NUMBER.fullmatch(cell) and sum(ch.isdigit() for ch in cell.lstrip("-0.")) <= _MAX_DIGITS:
            out[i] = float(cell)
        else:
            return None
    return out


def _warm_up_only(column: np.ndarray) -> bool:
    """Whether the column is blank only in its leading rows, has a value, and every value is in range."""
    defined = ~np.isnan(column)
    if not defined.any():
        return False
    first = int(np.argmax(defined))
    return bool(defined[first:].all() and not out_of_range(column[first:]).any())
