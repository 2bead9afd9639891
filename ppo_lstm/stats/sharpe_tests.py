"""How sure a Sharpe ratio is: the Probabilistic and the Deflated Sharpe Ratio.

Bailey and López de Prado, "The Sharpe Ratio Efficient Frontier" (Journal of Risk, 2012) and
"The Deflated Sharpe Ratio" (Journal of Portfolio Management, 2014). All Sharpe ratios here are
per bar (not annualised): divide an annual figure by ``sqrt(periods_per_year)`` first.

* ``PSR(SR*) = Φ((SR - SR*) sqrt(T - 1) / sqrt(1 - γ3 SR + (γ4 - 1) / 4 SR²))``: the probability that
  the true Sharpe ratio exceeds ``SR*``, given the measured ``SR`` over ``T`` bars with skewness
  ``γ3`` and (non-excess) kurtosis ``γ4``.
* ``DSR = PSR(E[max SR])``: the PSR against the Sharpe ratio that the best of ``N`` trials with
  zero true skill would show by luck, ``E[max SR] = sqrt(V) ((1 - γ) Φ⁻¹(1 - 1/N) + γ Φ⁻¹(1 - 1/(N e)))``
  with ``V`` the variance of the trials' Sharpe ratios and ``γ`` the Euler-Mascheroni constant.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
from scipy import stats as scipy_stats

from ppo_lstm.stats.performance import as_returns, per_period_sharpe

EULER_GAMMA = 0.5772156649015329


def expected_max_sharpe(n_trials: int, trial_sharpe_variance: float) -> float:
    """``E[max SR]`` of ``n_trials`` independent trials with zero true Sharpe and this variance (per bar)."""
    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    if trial_sharpe_variance < 0:
        raise ValueError(f"trial_sharpe_variance must be >= 0, got {trial_sharpe_variance}")
    if n_trials == 1:
        return 0.0
    norm = scipy_stats.norm
    spread = (1.0 - EULER_GAMMA) * norm.ppf(1.0 - 1.0 / n_trials) + EULER_GAMMA * norm.ppf(
        1.0 - 1.0 / (n_trials * math.e))
    return math.sqrt(trial_sharpe_variance) * float(spread)


def psr_from_moments(sharpe: float, benchmark_sharpe: float, bars: int, skewness: float, kurtosis: float) -> float:
    """PSR from the measured per-bar Sharpe, the series' length, skewness and (non-excess) kurtosis."""
    if bars < 2:
        raise ValueError(f"the PSR needs at least 2 bars, got {bars}")
    variance = 1.0 - skewness * sharpe + (kurtosis - 1.0) / 4.0 * sharpe ** 2
    if variance <= 0:  # possible only for extreme skew; the estimator's variance is then not identified
        return float(sharpe > benchmark_sharpe)
    z = (sharpe - benchmark_sharpe) * math.sqrt(bars - 1) / math.sqrt(variance)
    return float(scipy_stats.norm.cdf(z))


def probabilistic_sharpe_ratio(r: np.ndarray, benchmark_sharpe: float = 0.0) -> Optional[float]:
    """PSR of the returns ``r`` ``[T]`` against ``benchmark_sharpe`` (per bar); None if their Sharpe is undefined."""
    r = as_returns(r)
    sharpe = per_period_sharpe(r)
    if sharpe is None:
        return None
    skewness = float(scipy_stats.skew(r, bias=True))
    kurtosis = float(scipy_stats.kurtosis(r, fisher=False, bias=True))
    return psr_from_moments(sharpe, benchmark_sharpe, r.size, skewness, kurtosis)


def deflated_sharpe_ratio(r: np.ndarray, n_trials: int, trial_sharpe_variance: float) -> Optional[float]:
    """DSR of the returns ``r`` ``[T]``: their PSR against ``E[max SR]`` of ``n_trials`` trials."""
    return probabilistic_sharpe_ratio(r, expected_max_sharpe(n_trials, trial_sharpe_variance))
