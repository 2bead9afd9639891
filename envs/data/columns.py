"""Which columns of an OHLCV table are what: prices, volume, time, and the ``--features`` columns.

Used by ``envs.data.load_ohlcv``. Column names are matched case-insensitively after
dropping spaces, ``_``, ``-`` and ``.`` (``_norm``); each role has its aliases
(``_PRICE_ALIASES``, ``_ADJ_CLOSE``, ``_VOLUME``, ``_TIME_NAMES``), and two columns
matching the same role is an error. ``_time_column`` also joins a ``Date`` column with
a time-of-day ``Time`` column, and falls back on an unnamed first column;
``_feature_columns`` reads the ``--features`` columns' values and checks them.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from envs.data.checks import _numeric
from envs.data.errors import _Ctx, _more
from envs.data.features import FEATURE_MAX_ABS, FEATURE_MIN_ABS, out_of_range
from envs.data.names import _ADJ_CLOSE, _PRICE_ALIASES, _TIME_NAMES, _VOLUME, _norm  # noqa: F401 - re-exported

_UNNAMED = re.compile(r"^(unnamed:?\d*|index|level0|)$")
_TIME_OF_DAY = r"\s*\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\s*([AaPp][Mm])?\s*"


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


def _price_columns(ctx: _Ctx, columns: list[str]) -> tuple[dict[str, str], Optional[str]]:
    """The open/high/low/close columns by key, and the adjusted close column (None without one)."""
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
    return cols, adj_col


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


def _feature_columns(ctx: _Ctx, frame: pd.DataFrame, names: Sequence[str], order: np.ndarray) -> np.ndarray:
    """The ``--features`` columns ``[n, F]`` float64 in time order (``order``: the sort).

    A name matches a column case-insensitively (failing that, ignoring spaces, ``_``,
    ``-`` and ``.``). In time order, a column may start with missing values (NaN or
    blank: an indicator's warm-up); after its first value every row must hold a finite
    number. Text, inf, a gap after the warm-up, or a value :func:`envs.data.features.out_of_range`
    is a ``DataError`` naming the file, the column and the row (the row as in the file).
    """
    columns = list(frame.columns)
    out = np.empty((len(frame), len(names)))
    for j, name in enumerate(names):
        hits = [c for c in columns if c.lower() == str(name).lower()]
        if not hits:
            hits = [c for c in columns if _norm(c) == _norm(name)]
        if len(hits) != 1:
            if hits:
                raise ctx.fail(f"columns {' and '.join(map(repr, hits))} both match feature {name!r}; "
                               f"rename one of them")
            raise ctx.fail(f"has no feature column {name!r} (--features); columns found: "
                           f"{', '.join(map(repr, columns))}; add the column or drop it from --features")
        col = hits[0]
        values = _numeric(ctx, col, frame[col])[order]
        missing = np.isnan(values)
        start = int(np.argmax(~missing)) if (~missing).any() else len(values)
        if start == len(values):
            raise ctx.fail(f"feature column '{col}' holds no values (all missing); fill it or drop it from --features")
        bad = ~np.isfinite(values)
        bad[:start] = np.isinf(values[:start])
        if bad.any():
            i = int(np.argmax(bad))
            what = "missing value (NaN)" if np.isnan(values[i]) else "infinite value"
            raise ctx.fail(
                f"{what} in feature column '{col}' at {ctx.row(int(order[i]))}{_more(bad)}, after the column's "
                f"first value at {ctx.row(int(order[start]))}; only leading rows (a warm-up) may be missing; "
                f"fill or delete that row")
        huge = out_of_range(values)
        if huge.any():
            i = int(np.argmax(huge))
            raise ctx.fail(
                f"feature column '{col}' at {ctx.row(int(order[i]))}{_more(huge)} holds {values[i]:g}, outside the "
                f"magnitudes {FEATURE_MIN_ABS:g}..{FEATURE_MAX_ABS:g} (or 0) that its rolling z-score can square in "
                f"float64; rescale the column (e.g. divide it by a power of ten: its z-score, what the agent "
                f"sees, stays the same)")
        out[:, j] = values
    return out
