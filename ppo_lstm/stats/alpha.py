"""Alpha: the part of a strategy's return that holding the benchmark does not explain.

A strategy's per-bar returns ``r_a [T]`` are regressed on the benchmark's ``r_b [T]`` on the same
bars, ``r_a,t = alpha + beta r_b,t + e_t`` (ordinary least squares). ``beta`` is the exposure the
strategy held on average; ``alpha`` is what it earned beyond that exposure, its timing skill.
Any fixed exposure (cash, always long, always short, half long) earns ``beta r_b`` and has an
alpha of 0, whatever the market did, so a test of ``alpha > 0`` cannot be passed by being out of
a falling market or short in one.

Two tests of ``H0: alpha <= 0``, both one-sided:

* :func:`alpha_test`: Newey-West (HAC) standard errors from ``statsmodels`` (Bartlett kernel,
  ``floor(4 (T / 100) ** (2 / 9))`` lags unless given), the normal distribution, and the one-sided
  ``size`` lower bound ``alpha - z_size se``, which is above 0 exactly when ``p < 1 - size``.
* :func:`alpha_bootstrap`: the intercept under Politis and Romano's stationary bootstrap of the
  pairs ``(r_a, r_b)`` (``arch``), ``p = (1 + #{a*_b - a >= a}) / (B + 1)``, and the one-sided basic
  lower bound ``2 a - q_size(a*)``.

:func:`hedged_returns` ``r_a - beta r_b`` have mean ``alpha``; their per-bar Sharpe ratio
(:func:`alpha_sharpe`, the appraisal ratio) is the statistic the Deflated Sharpe Ratio deflates.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

import numpy as np
from statsmodels.regression.linear_model import OLS  # not statsmodels.api: it imports every model
from statsmodels.tools.tools import add_constant
from arch.bootstrap import StationaryBootstrap
from scipy import stats as scipy_stats

from ppo_lstm.stats.bootstrap import block_length
from ppo_lstm.stats.performance import as_returns, per_period_sharpe, sample_std

# Residuals this small next to the returns are rounding noise of an exact fit (a fixed exposure).
_EXACT_FIT_RTOL = 1e-9


@dataclass(frozen=True)
class AlphaTest:
    """The regression ``r_a = alpha + beta r_b + e`` and its HAC test of ``H0: alpha <= 0``.

    ``alpha`` is per bar, ``alpha_annual = alpha * periods_per_year`` (a fraction a year, not
    compounded) and ``lower_annual`` its one-sided ``size`` lower bound, annualised alike.
    """

    alpha: float
    alpha_annual: float
    lower_annual: float
    beta: float
    t_stat: float
    p_value: float
    std_error: float
    lags: int
    bars: int
    size: float
    exact_fit: bool  # the strategy is a fixed multiple of the benchmark: alpha is 0, p is 1

    def as_dict(self) -> dict[str, Any]:
        """The fields (JSON-safe)."""
        return asdict(self)


@dataclass(frozen=True)
class AlphaBootstrap:
    """The stationary-bootstrap test of the intercept: per-bar estimate, one-sided lower bound, p."""

    alpha: float
    alpha_annual: float
    lower_annual: float
    p_value: float
    block_length: float
    reps: int
    size: float

    def as_dict(self) -> dict[str, Any]:
        """The fields (JSON-safe)."""
        return asdict(self)


def newey_west_lags(bars: int) -> int:
    """Newey and West's (1994) rule of thumb: ``floor(4 (T / 100) ** (2 / 9))``."""
    return int(math.floor(4.0 * (max(bars, 1) / 100.0) ** (2.0 / 9.0)))


def _pair(agent: np.ndarray, benchmark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    agent, benchmark = as_returns(agent), as_returns(benchmark)
    if agent.shape != benchmark.shape:
        raise ValueError(f"agent and benchmark returns differ in length: {agent.size} and {benchmark.size}")
    if agent.size < 3:
        raise ValueError(f"an alpha needs at least 3 bars, got {agent.size}")
    return agent, benchmark


def _ols(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """Intercept and slope of ``y`` on ``x`` (slope 0 when ``x`` is constant)."""
    xc = x - x.mean()
    sxx = float(xc @ xc)
    beta = 0.0 if sxx <= 0.0 or sample_std(x) == 0.0 else float(xc @ (y - y.mean())) / sxx
    return float(y.mean() - beta * x.mean()), beta


def hedged_returns(agent: np.ndarray, benchmark: np.ndarray) -> np.ndarray:
    """``r_a - beta r_b`` ``[T]`` with the OLS ``beta``: alpha plus the residual, bar by bar."""
    agent, benchmark = _pair(agent, benchmark)
    return agent - _ols(agent, benchmark)[1] * benchmark


def alpha_sharpe(agent: np.ndarray, benchmark: np.ndarray) -> Optional[float]:
    """Per-bar Sharpe ratio of :func:`hedged_returns` (the appraisal ratio); None for an exact fit."""
    agent, benchmark = _pair(agent, benchmark)
    alpha, beta = _ols(agent, benchmark)
    if _exact_fit(agent, benchmark, alpha, beta):
        return None
    return per_period_sharpe(agent - beta * benchmark)


def _exact_fit(agent: np.ndarray, benchmark: np.ndarray, alpha: float, beta: float) -> bool:
    scale = max(float(np.max(np.abs(agent))), float(np.max(np.abs(benchmark))) * abs(beta), 1e-300)
    resid = agent - alpha - beta * benchmark
    return float(np.max(np.abs(resid))) <= _EXACT_FIT_RTOL * scale


def alpha_test(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, size: float = 0.95,
               lags: Optional[int] = None) -> AlphaTest:
    """HAC test of ``H0: alpha <= 0`` for simple per-bar returns ``agent [T]`` on ``benchmark [T]``."""
    agent, benchmark = _pair(agent, benchmark)
    bars = int(agent.size)
    lags = newey_west_lags(bars) if lags is None else int(lags)
    alpha, beta = _ols(agent, benchmark)
    if _exact_fit(agent, benchmark, alpha, beta):
        return AlphaTest(alpha=0.0, alpha_annual=0.0, lower_annual=0.0, beta=beta, t_stat=0.0, p_value=1.0,
                         std_error=0.0, lags=lags, bars=bars, size=size, exact_fit=True)
    constant_benchmark = sample_std(benchmark) == 0.0
    design = np.ones((bars, 1)) if constant_benchmark else add_constant(benchmark, has_constant="add")
    fit = OLS(agent, design).fit(cov_type="HAC", cov_kwds={"maxlags": lags})
    alpha, se = float(fit.params[0]), float(fit.bse[0])
    beta = 0.0 if constant_benchmark else float(fit.params[1])
    t = alpha / se if se > 0 else (math.inf if alpha > 0 else 0.0)
    z = float(scipy_stats.norm.ppf(size))
    return AlphaTest(alpha=alpha, alpha_annual=alpha * periods_per_year,
                     lower_annual=(alpha - z * se) * periods_per_year, beta=beta, t_stat=float(t),
                     p_value=float(scipy_stats.norm.sf(t)), std_error=se, lags=lags, bars=bars, size=size,
                     exact_fit=False)


def alpha_bootstrap(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, reps: int = 2000,
                    seed: int = 0, size: float = 0.95) -> AlphaBootstrap:
    """Stationary-bootstrap test of the intercept (pairs resampled in the same blocks)."""
    agent, benchmark = _pair(agent, benchmark)
    alpha, beta = _ols(agent, benchmark)
    length = block_length(agent, benchmark)
    if _exact_fit(agent, benchmark, alpha, beta):
        return AlphaBootstrap(alpha=0.0, alpha_annual=0.0, lower_annual=0.0, p_value=1.0, block_length=length,
                              reps=reps, size=size)
    bootstrap = StationaryBootstrap(length, agent, benchmark, seed=np.random.default_rng(seed))
    draws = bootstrap.apply(lambda y, x: np.array([_ols(y, x)[0]]), reps)[:, 0]
    exceed = int(np.sum(draws - alpha >= alpha))
    lower = 2.0 * alpha - float(np.percentile(draws, 100.0 * size))
    return AlphaBootstrap(alpha=alpha, alpha_annual=alpha * periods_per_year, lower_annual=lower * periods_per_year,
                          p_value=(1 + exceed) / (reps + 1), block_length=length, reps=reps, size=size)
