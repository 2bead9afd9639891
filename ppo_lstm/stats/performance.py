"""Performance figures of a per-bar return series: annualised return, Sharpe, drawdown.

Every function takes simple per-bar returns ``r`` ``[T]`` (``r_t = equity_t / equity_{t-1} - 1``)
and gives a plain ``float``, or ``None`` where the figure is undefined (never NaN), so results go
straight into JSON. The definitions match :func:`ppo_lstm.evaluation.metrics.trading_metrics`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

# A sample std this small next to the returns themselves is rounding noise of a constant series.
_STD_RTOL = 1e-12


def as_returns(r: np.ndarray) -> np.ndarray:
    """``r`` as a finite float64 vector ``[T]``; ValueError otherwise."""
    out = np.asarray(r, dtype=np.float64)
    if out.ndim != 1:
        raise ValueError(f"returns must be one series [T], got shape {out.shape}")
    if not np.all(np.isfinite(out)):
        raise ValueError("returns must be finite")
    return out


def sample_std(r: np.ndarray) -> float:
    """Sample standard deviation (``ddof=1``), taken as 0 where it is rounding noise of a constant series."""
    if r.size < 2:
        return 0.0
    std = float(np.std(r, ddof=1))
    return 0.0 if std <= _STD_RTOL * float(np.max(np.abs(r))) else std


def annualised_return(r: np.ndarray, periods_per_year: float) -> Optional[float]:
    """Geometric annual return ``prod(1 + r) ** (periods_per_year / T) - 1`` (a fraction).

    ``-1`` if the equity reaches 0 or below; None for an empty series or an overflowing power.
    """
    r = as_returns(r)
    if r.size == 0:
        return None
    growth = float(np.prod(1.0 + r))
    if growth <= 0.0:
        return -1.0
    try:
        return growth ** (periods_per_year / r.size) - 1.0
    except OverflowError:
        return None


def per_period_sharpe(r: np.ndarray) -> Optional[float]:
    """``mean(r) / std(r)`` per bar (risk-free rate 0, ``ddof=1``); None if ``T < 2`` or ``std == 0``."""
    r = as_returns(r)
    std = sample_std(r)
    if std == 0.0:
        return None
    return float(np.mean(r)) / std


def annualised_sharpe(r: np.ndarray, periods_per_year: float) -> Optional[float]:
    """``per_period_sharpe(r) * sqrt(periods_per_year)``; None where the per-bar Sharpe is undefined."""
    sharpe = per_period_sharpe(r)
    return None if sharpe is None else sharpe * float(np.sqrt(periods_per_year))


def max_drawdown(r: np.ndarray) -> float:
    """Largest fall from a running peak of the equity ``prod(1 + r)`` (starting at 1), a fraction >= 0."""
    r = as_returns(r)
    equity = np.concatenate(([1.0], np.cumprod(1.0 + r)))
    peak = np.maximum.accumulate(equity)
    return float(np.max(1.0 - equity / peak))
