"""Stationary block bootstrap tests of an edge: the mean excess return and the Sharpe difference.

Per-bar returns are serially dependent (volatility clusters, positions held for many bars), so bars
are resampled in blocks of random, geometrically distributed length (Politis and Romano's stationary
bootstrap, ``arch.bootstrap.StationaryBootstrap``), with the mean block length from Politis and
White's rule (``arch.bootstrap.optimal_block_length``). Paired series are resampled with the same
blocks, so their dependence is kept.

Each test gives the statistic, a two-sided ``basic`` interval (what ``arch``'s ``conf_int(method="basic")``
gives for the same draws) and a one-sided p-value for ``H0: statistic <= 0`` from the bootstrap
distribution re-centred on the estimate: ``p = (1 + #{θ*_b - θ̂ >= θ̂}) / (B + 1)``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
from arch.bootstrap import StationaryBootstrap, optimal_block_length

from ppo_lstm.stats.performance import as_returns, sample_std


@dataclass(frozen=True)
class BootstrapTest:
    """One bootstrap test: the estimate, its interval and the one-sided p-value of ``H0: value <= 0``."""

    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    block_length: float
    reps: int
    size: float

    def as_dict(self) -> dict[str, float | int]:
        """The fields (JSON-safe)."""
        return asdict(self)


def block_length(*series: np.ndarray) -> float:
    """Mean block length for the stationary bootstrap: Politis-White's, the largest over the series, >= 1.

    A constant series has no autocorrelation to estimate, and counts as 1.
    """
    lengths = [1.0]
    for values in series:
        if values.size >= 2 and sample_std(values) > 0:
            length = float(optimal_block_length(values)["stationary"].iloc[0])
            if np.isfinite(length):
                lengths.append(length)
    return max(lengths)


def _sharpe(values: np.ndarray) -> float:
    """Per-bar Sharpe, with a constant (bootstrap) sample taken as 0."""
    std = sample_std(values)
    return 0.0 if std == 0.0 else float(np.mean(values)) / std


def _test(statistic: Callable[..., float], data: tuple[np.ndarray, ...], reps: int, seed: int,
          size: float) -> BootstrapTest:
    estimate = float(statistic(*data))
    length = block_length(*data)
    bootstrap = StationaryBootstrap(length, *data, seed=np.random.default_rng(seed))
    draws = bootstrap.apply(lambda *x: np.array([statistic(*x)]), reps)[:, 0]
    low_q, high_q = np.percentile(draws, [100 * (1 - size) / 2, 100 * (1 + size) / 2])
    exceed = int(np.sum(draws - estimate >= estimate))
    return BootstrapTest(estimate=estimate, ci_low=float(2 * estimate - high_q), ci_high=float(2 * estimate - low_q),
                         p_value=(1 + exceed) / (reps + 1), block_length=length, reps=reps, size=size)


def mean_excess_test(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, reps: int = 2000,
                     seed: int = 0, size: float = 0.95) -> BootstrapTest:
    """The annualised mean excess return ``mean(agent - benchmark) * periods_per_year`` (a fraction).

    ``agent`` and ``benchmark`` are simple per-bar returns ``[T]`` on the same bars.
    """
    excess = as_returns(agent) - as_returns(benchmark)
    return _test(lambda x: float(np.mean(x)) * periods_per_year, (excess,), reps, seed, size)


def sharpe_difference_test(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, reps: int = 2000,
                           seed: int = 0, size: float = 0.95) -> BootstrapTest:
    """The annualised Sharpe difference ``(SR(agent) - SR(benchmark)) sqrt(periods_per_year)``, pairs resampled."""
    agent, benchmark = as_returns(agent), as_returns(benchmark)
    scale = float(np.sqrt(periods_per_year))
    return _test(lambda a, b: (_sharpe(a) - _sharpe(b)) * scale, (agent, benchmark), reps, seed, size)
