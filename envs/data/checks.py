"""Price columns for the OHLCV loader: numbers, the price checks and the Adj Close adjustment.

``_numeric`` turns a column into float64; ``_check_positive``,
``_check_scaled`` and ``_check_ohlc`` check prices, and ``_first_bad``
raises ``DataError`` for the earliest offending row over several vectorised
checks (``envs.data.loading`` uses it for volume too); ``_adjust`` puts the prices on
the Adj Close basis.

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
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from envs.data.errors import _Ctx, _more, _show


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
