"""The verdict on an edge over a benchmark (buy-and-hold), from out-of-sample per-bar returns.

The rule: the edge is ``shown`` when

1. the one-sided stationary-bootstrap p-value of the mean excess return (``H0: mean excess <= 0``)
   is below ``alpha`` (5 %), and
2. where more than one trial was run (seeds times configurations tried), the Deflated Sharpe Ratio of
   the excess returns is above ``1 - alpha`` (0.95): the excess return's Sharpe ratio beats, with that
   probability, the best Sharpe ratio that as many trials with no skill would show by luck.

Otherwise it is ``not shown``. The line starts ``Edge over buy-and-hold: shown`` or ``... not shown``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ppo_lstm.stats.bootstrap import BootstrapTest, mean_excess_test, sharpe_difference_test
from ppo_lstm.stats.performance import as_returns, per_period_sharpe
from ppo_lstm.stats.sharpe_tests import deflated_sharpe_ratio, probabilistic_sharpe_ratio

VERDICT_PREFIX = "Edge over buy-and-hold:"


@dataclass(frozen=True)
class EdgeVerdict:
    """The figures behind the verdict; see the module docstring for the rule."""

    shown: bool
    alpha: float
    bars: int
    periods_per_year: float
    excess: BootstrapTest  # annualised mean excess return (fraction)
    sharpe_difference: BootstrapTest  # annualised Sharpe(agent) - Sharpe(benchmark)
    psr_zero: Optional[float]  # P(true Sharpe of the agent > 0)
    psr_benchmark: Optional[float]  # P(true Sharpe of the agent > the benchmark's measured Sharpe)
    dsr: Optional[float]  # Deflated Sharpe Ratio of the excess returns; None for one trial
    n_trials: int
    trial_sharpe_variance: Optional[float]  # per bar, the variance used by the DSR

    @property
    def p_value(self) -> float:
        """One-sided bootstrap p-value of the mean excess return."""
        return self.excess.p_value

    @property
    def excess_annual(self) -> float:
        return self.excess.estimate

    @property
    def ci_low(self) -> float:
        return self.excess.ci_low

    @property
    def ci_high(self) -> float:
        return self.excess.ci_high

    @property
    def block_length(self) -> float:
        return self.excess.block_length

    @property
    def sharpe_diff(self) -> float:
        return self.sharpe_difference.estimate

    @property
    def sharpe_diff_ci(self) -> tuple[float, float]:
        return self.sharpe_difference.ci_low, self.sharpe_difference.ci_high

    @property
    def sharpe_diff_p(self) -> float:
        return self.sharpe_difference.p_value

    def line(self) -> str:
        """One plain line, beginning ``Edge over buy-and-hold: shown`` or ``... not shown``."""
        figures = (f"p = {self.p_value:.3g}; excess return {100 * self.ci_low:+.1f} % to {100 * self.ci_high:+.1f} %"
                   f" a year, {100 * self.excess.size:.0f} %")
        if self.n_trials > 1:
            dsr = "undefined" if self.dsr is None else f"{self.dsr:.2f}"
            figures += f"; deflated Sharpe {dsr} over {self.n_trials} trials"
        return f"{VERDICT_PREFIX} {'shown' if self.shown else 'not shown'} ({figures})"

    def as_dict(self) -> dict[str, Any]:
        """Every figure (JSON-safe), the line included."""
        return {"shown": self.shown, "line": self.line(), "alpha": self.alpha, "bars": self.bars,
                "periods_per_year": self.periods_per_year, "excess_return": self.excess.as_dict(),
                "sharpe_difference": self.sharpe_difference.as_dict(), "psr_zero": self.psr_zero,
                "psr_benchmark": self.psr_benchmark, "dsr": self.dsr, "n_trials": self.n_trials,
                "trial_sharpe_variance": self.trial_sharpe_variance}


def trial_variance(trial_sharpes: Optional[Sequence[float]], bars: int) -> float:
    """Variance of the trials' per-bar Sharpe ratios (``ddof=1``).

    With fewer than two trial Sharpe ratios there is nothing to estimate it from, and the sampling
    variance of a Sharpe estimate with no skill, ``1 / (T - 1)``, stands in for it.
    """
    values = [float(s) for s in (trial_sharpes or []) if s is not None and np.isfinite(s)]
    if len(values) >= 2:
        return float(np.var(values, ddof=1))
    return 1.0 / max(bars - 1, 1)


def edge_verdict(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, *, n_trials: int = 1,
                 trial_sharpes: Optional[Sequence[float]] = None, trial_sharpe_variance: Optional[float] = None,
                 alpha: float = 0.05, reps: int = 2000, seed: int = 0) -> EdgeVerdict:
    """The verdict on ``agent``'s edge over ``benchmark``: simple per-bar returns ``[T]`` on the same bars.

    ``n_trials`` counts every configuration and seed tried (>= 1); ``trial_sharpes`` are those trials'
    per-bar Sharpe ratios of their excess returns, for the variance the DSR needs
    (:func:`trial_variance`), unless ``trial_sharpe_variance`` (per bar) gives that variance itself.
    """
    agent, benchmark = as_returns(agent), as_returns(benchmark)
    if agent.shape != benchmark.shape:
        raise ValueError(f"agent and benchmark returns differ in length: {agent.size} and {benchmark.size}")
    if agent.size < 3:
        raise ValueError(f"the verdict needs at least 3 bars, got {agent.size}")
    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    excess = mean_excess_test(agent, benchmark, periods_per_year, reps=reps, seed=seed, size=1 - alpha)
    difference = sharpe_difference_test(agent, benchmark, periods_per_year, reps=reps, seed=seed + 1, size=1 - alpha)
    benchmark_sharpe = per_period_sharpe(benchmark)
    psr_benchmark = probabilistic_sharpe_ratio(agent, benchmark_sharpe if benchmark_sharpe is not None else 0.0)
    variance: Optional[float] = None
    dsr: Optional[float] = None
    if n_trials > 1:
        variance = (trial_variance(trial_sharpes, agent.size) if trial_sharpe_variance is None
                    else float(trial_sharpe_variance))
        dsr = deflated_sharpe_ratio(agent - benchmark, n_trials, variance)
    shown = excess.p_value < alpha and (n_trials == 1 or (dsr is not None and dsr > 1 - alpha))
    return EdgeVerdict(shown=bool(shown), alpha=alpha, bars=int(agent.size), periods_per_year=float(periods_per_year),
                       excess=excess, sharpe_difference=difference, psr_zero=probabilistic_sharpe_ratio(agent),
                       psr_benchmark=psr_benchmark, dsr=dsr, n_trials=int(n_trials), trial_sharpe_variance=variance)
