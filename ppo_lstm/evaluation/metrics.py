"""Trading metrics of one backtest: returns, risk, drawdown and trade statistics.

Every figure is a plain ``float`` or ``int``, or ``None`` where it is undefined
(never NaN or inf), so :meth:`TradingMetrics.as_dict` goes straight through
``json.dumps``. The same function scores the agent and buy-and-hold on the same bars.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

# A sample std this small next to the returns themselves is rounding noise of a constant
# series (e.g. equity growing by exactly 1% a bar), not risk: Sharpe is then undefined.
_STD_RTOL = 1e-12


@dataclass
class TradingMetrics:
    """Figures of one backtest; see :func:`trading_metrics` for the definitions."""

    total_return_pct: float
    annual_return_pct: Optional[float]
    annual_volatility_pct: Optional[float]
    sharpe: Optional[float]
    sortino: Optional[float]
    calmar: Optional[float]
    max_drawdown_pct: float
    max_drawdown_bars: int
    trades: int
    win_rate_pct: Optional[float]
    profit_factor: Optional[float]
    exposure_pct: Optional[float]
    fees_paid: float  # fees and slippage: the same figure as fees_and_slippage_paid

    @property
    def fees_and_slippage_paid(self) -> float:
        """Fees plus slippage paid, in money (``fees_paid`` is the same figure)."""
        return self.fees_paid

    def as_dict(self) -> dict[str, Optional[float | int]]:
        """The fields, in declaration order (JSON-safe), then ``fees_and_slippage_paid``:
        the figure of ``fees_paid`` under a name that says slippage is in it (``fees_paid``
        stays, so that scripts reading it keep working)."""
        return {**asdict(self), "fees_and_slippage_paid": self.fees_paid}


def trading_metrics(equity: np.ndarray, position: np.ndarray, trade_pnls: np.ndarray, fees_paid: float,
                    periods_per_year: float) -> TradingMetrics:
    """Score one backtest of ``T`` bars.

    Inputs:

    * ``equity`` ``[T+1]``: the starting cash (must be > 0), then the equity after each
      bar, marked to market at the bar's close; finite.
    * ``position`` ``[T]``: signed lots held during each bar (0 = flat).
    * ``trade_pnls`` ``[k]``: net profit of each closed trade (lot), fees included.
    * ``fees_paid``: total fees and slippage in money (passed through).
    * ``periods_per_year``: bars per year (252 for daily bars), > 0.

    Definitions, with per-bar simple returns ``r_t = equity[t] / equity[t-1] - 1``
    (``t = 1..T``) and ``std`` the sample standard deviation (``ddof=1``):

    * ``total_return_pct = 100 (equity[T] / equity[0] - 1)``.
    * ``annual_return_pct = 100 ((equity[T] / equity[0]) ** (periods_per_year / T) - 1)``
      (geometric); ``-100`` if ``equity[T] <= 0``; None if ``T == 0`` or the power
      overflows a float (a short, lucky run at a high bar frequency).
    * ``annual_volatility_pct = 100 std(r) sqrt(periods_per_year)``; None if ``T < 2``.
    * ``sharpe = mean(r) / std(r) * sqrt(periods_per_year)`` (risk-free rate 0); None if
      ``T < 2`` or ``std(r) == 0`` (taken as 0 when ``std(r) <= 1e-12 max|r|``, so that a
      constant return series with rounding noise has no Sharpe of 1e14).
    * ``sortino = mean(r) / dd * sqrt(periods_per_year)`` with the downside deviation
      ``dd = sqrt(mean(min(r_t, 0) ** 2))`` over all ``T`` bars (target 0); None if
      ``T == 0`` or ``dd == 0`` (no losing bar).
    * Volatility, Sharpe and Sortino are also None if the equity was ``<= 0`` before the
      last bar (returns on a non-positive base mean nothing; the env ends an episode there).
    * ``max_drawdown_pct = 100 max_t (1 - equity[t] / max(equity[:t+1]))``, ``t = 0..T``:
      a number >= 0 (0 for equity that never falls; above 100 if equity goes negative).
    * ``max_drawdown_bars``: the longest run of consecutive bars whose closing equity
      ``equity[t]`` is below the running peak ``max(equity[:t])`` (starting cash
      included); a drawdown still open at the end counts its bars so far. So the bar
      that gets back to the peak is not counted: ``[100, 110, 99, 105, 110]`` gives 2
      (bars 2 and 3). It is the longest time under water, which need not be the deepest
      drawdown's.
    * ``calmar = annual_return_pct / max_drawdown_pct``; None if the max drawdown is 0
      or the annual return is None.
    * ``trades = k``; ``win_rate_pct = 100 #(pnl > 0) / k`` (a zero-pnl trade is not a
      win), None if ``k == 0``.
    * ``profit_factor = sum(pnl > 0) / |sum(pnl < 0)|``; 0.0 if there are losing trades
      but no winning one; None if there is no losing trade (no trades, or only winners
      and break-evens: the ratio would be infinite or 0/0).
    * ``exposure_pct = 100 #(position != 0) / T``; None if ``T == 0``.
    * ``fees_paid``: the input, as a float (fees and slippage; also ``fees_and_slippage_paid``).

    Raises ``ValueError`` on bad shapes, non-finite inputs, ``equity[0] <= 0`` or
    ``periods_per_year <= 0``.
    """
    equity, position, trade_pnls = _checked(equity, position, trade_pnls, fees_paid, periods_per_year)
    returns = _returns(equity)
    annual = _annual_return_pct(equity, periods_per_year)
    drawdown = _max_drawdown_pct(equity)
    return TradingMetrics(
        total_return_pct=_finite(100.0 * (equity[-1] / equity[0] - 1.0)),
        annual_return_pct=annual,
        annual_volatility_pct=_annual_volatility_pct(returns, periods_per_year),
        sharpe=_sharpe(returns, periods_per_year),
        sortino=_sortino(returns, periods_per_year),
        calmar=_finite(annual / drawdown) if annual is not None and drawdown > 0 else None,
        max_drawdown_pct=drawdown,
        max_drawdown_bars=_max_drawdown_bars(equity),
        trades=int(trade_pnls.size),
        win_rate_pct=_finite(100.0 * np.count_nonzero(trade_pnls > 0) / trade_pnls.size) if trade_pnls.size else None,
        profit_factor=_profit_factor(trade_pnls),
        exposure_pct=_finite(100.0 * np.count_nonzero(position) / position.size) if position.size else None,
        fees_paid=float(fees_paid),
    )


def _checked(equity: np.ndarray, position: np.ndarray, trade_pnls: np.ndarray, fees_paid: float,
             periods_per_year: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs as float64 arrays, or ValueError saying what is wrong."""
    equity = np.asarray(equity, dtype=np.float64)
    position = np.asarray(position, dtype=np.float64)
    trade_pnls = np.asarray(trade_pnls, dtype=np.float64)
    if equity.ndim != 1 or equity.size == 0:
        raise ValueError(f"equity must be a non-empty 1-D array [T+1], got shape {equity.shape}")
    if position.shape != (equity.size - 1,):
        raise ValueError(f"position must have shape [T] = ({equity.size - 1},), got {position.shape}")
    if trade_pnls.ndim != 1:
        raise ValueError(f"trade_pnls must be a 1-D array [k], got shape {trade_pnls.shape}")
    for name, values in (("equity", equity), ("position", position), ("trade_pnls", trade_pnls)):
        if not np.isfinite(values).all():
            raise ValueError(f"{name} has NaN or inf values")
    if equity[0] <= 0:
        raise ValueError(f"equity[0] (the starting cash) must be > 0, got {equity[0]}")
    if not math.isfinite(fees_paid):
        raise ValueError(f"fees_paid must be finite, got {fees_paid}")
    if not (math.isfinite(periods_per_year) and periods_per_year > 0):
        raise ValueError(f"periods_per_year must be a finite number > 0, got {periods_per_year}")
    return equity, position, trade_pnls


def _finite(value: float) -> Optional[float]:
    """``value`` as a plain float, or None if it is NaN or inf."""
    value = float(value)
    return value if math.isfinite(value) else None


def _returns(equity: np.ndarray) -> Optional[np.ndarray]:
    """Per-bar simple returns ``[T]``, or None if equity was <= 0 before the last bar."""
    if (equity[:-1] <= 0).any():
        return None
    return equity[1:] / equity[:-1] - 1.0


def _annual_return_pct(equity: np.ndarray, periods_per_year: float) -> Optional[float]:
    bars = equity.size - 1
    if bars == 0:
        return None
    growth = equity[-1] / equity[0]
    if growth <= 0:
        return -100.0
    exponent = math.log(growth) * periods_per_year / bars
    if exponent > 700.0:  # exp overflows a float near 709.78
        return None
    return _finite(100.0 * math.expm1(exponent))


def _std_is_zero(returns: np.ndarray, std: float) -> bool:
    return std <= _STD_RTOL * float(np.abs(returns).max())


def _annual_volatility_pct(returns: Optional[np.ndarray], periods_per_year: float) -> Optional[float]:
    if returns is None or returns.size < 2:
        return None
    return _finite(100.0 * returns.std(ddof=1) * math.sqrt(periods_per_year))


def _sharpe(returns: Optional[np.ndarray], periods_per_year: float) -> Optional[float]:
    if returns is None or returns.size < 2:
        return None
    std = float(returns.std(ddof=1))
    if _std_is_zero(returns, std):
        return None
    return _finite(returns.mean() / std * math.sqrt(periods_per_year))


def _sortino(returns: Optional[np.ndarray], periods_per_year: float) -> Optional[float]:
    if returns is None or returns.size == 0:
        return None
    downside = math.sqrt(float(np.mean(np.minimum(returns, 0.0) ** 2)))
    if downside == 0:
        return None
    return _finite(returns.mean() / downside * math.sqrt(periods_per_year))


def _max_drawdown_pct(equity: np.ndarray) -> float:
    """``100 max_t (1 - equity[t] / running peak)`` over ``equity`` ``[T+1]``."""
    peak = np.maximum.accumulate(equity)
    return float(100.0 * np.max(1.0 - equity / peak))


def _max_drawdown_bars(equity: np.ndarray) -> int:
    """Longest run of consecutive bars closing below the running peak, over ``equity`` ``[T+1]``."""
    peak = np.maximum.accumulate(equity)
    below = np.concatenate(([0], (equity[1:] < peak[:-1]).astype(np.int8), [0]))  # [T+2]
    edges = np.diff(below)  # +1 where a run starts, -1 one past where it ends
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return int((ends - starts).max()) if starts.size else 0


def _profit_factor(trade_pnls: np.ndarray) -> Optional[float]:
    losses = -float(trade_pnls[trade_pnls < 0].sum())
    if losses == 0:
        return None
    return _finite(float(trade_pnls[trade_pnls > 0].sum()) / losses)


@dataclass
class EpisodeReturns:
    """How the episodes of a simulated backtest went one by one; see :func:`episode_returns`."""

    mean_return_pct: float
    std_return_pct: Optional[float]
    median_return_pct: float
    p5_return_pct: float
    p95_return_pct: float
    episodes_with_gain_pct: float

    def as_dict(self) -> dict[str, Optional[float]]:
        """The fields, in declaration order (JSON-safe)."""
        return asdict(self)


def episode_returns(returns_pct: np.ndarray) -> EpisodeReturns:
    """The spread of ``returns_pct`` ``[N]``, each episode's return in % from the starting cash.

    ``mean``, ``std`` (sample, ``ddof=1``; None for one episode), ``median`` and the 5th and 95th
    percentiles (numpy's linear interpolation) of the returns, and ``episodes_with_gain_pct``:
    100 #(return > 0) / N. Raises ``ValueError`` on an empty or non-finite input.
    """
    r = np.asarray(returns_pct, dtype=np.float64)
    if r.ndim != 1 or r.size == 0 or not np.isfinite(r).all():
        raise ValueError(f"returns_pct must be a non-empty 1-D array of finite numbers, got shape {r.shape}")
    p5, median, p95 = (float(v) for v in np.percentile(r, [5.0, 50.0, 95.0]))
    return EpisodeReturns(
        mean_return_pct=float(r.mean()),
        std_return_pct=float(r.std(ddof=1)) if r.size > 1 else None,
        median_return_pct=median, p5_return_pct=p5, p95_return_pct=p95,
        episodes_with_gain_pct=100.0 * np.count_nonzero(r > 0) / r.size,
    )
