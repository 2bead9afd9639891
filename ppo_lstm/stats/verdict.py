"""The verdict on an edge over a benchmark (buy-and-hold), from out-of-sample per-bar returns.

The question is timing skill, not exposure: the agent's returns are regressed on the benchmark's
on the same bars (:mod:`ppo_lstm.stats.alpha`), and the edge is ``shown`` when

1. the intercept (alpha, per bar) is positive with a one-sided Newey-West (HAC) p-value below
   ``level`` (5 %), so its one-sided 95 % lower bound is above 0,
2. the stationary bootstrap of the intercept confirms it: its one-sided p-value is below ``level`` too,
3. where more than one trial was run (seeds times configurations tried), the Deflated Sharpe Ratio of
   the hedged returns ``r_a - beta r_b`` (mean: the alpha) is above ``1 - level``: their Sharpe ratio
   beats, with that probability, the best one that as many trials with no skill would show by luck.

Cash, always long, always short or any fixed exposure has an alpha of 0 and is never ``shown``.
The mean excess return over the benchmark and the Sharpe difference are kept as descriptions; they
mix timing with exposure and decide nothing. The line starts ``Edge over buy-and-hold: shown`` or
``... not shown``; every bound it prints is the one the rule uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ppo_lstm.stats.alpha import (AlphaBootstrap, AlphaTest, alpha_bootstrap, alpha_sharpe, alpha_test,
                                  hedged_returns)
from ppo_lstm.stats.bootstrap import BootstrapTest, mean_excess_test, sharpe_difference_test
from ppo_lstm.stats.performance import as_returns
from ppo_lstm.stats.sharpe_tests import deflated_sharpe_ratio, probabilistic_sharpe_ratio

VERDICT_PREFIX = "Edge over buy-and-hold:"


@dataclass(frozen=True)
class EdgeVerdict:
    """The figures behind the verdict; see the module docstring for the rule."""

    shown: bool
    level: float  # the tests' size: 0.05
    bars: int
    periods_per_year: float
    alpha: AlphaTest  # HAC regression on the benchmark: alpha, beta, one-sided p and lower bound
    bootstrap: Optional[AlphaBootstrap]  # the intercept under the stationary bootstrap (None: not needed)
    excess: Optional[BootstrapTest]  # description: annualised mean excess return (fraction)
    sharpe_difference: Optional[BootstrapTest]  # description: annualised Sharpe(agent) - Sharpe(benchmark)
    psr_zero: Optional[float]  # P(true Sharpe of the agent > 0)
    dsr: Optional[float]  # Deflated Sharpe Ratio of the hedged returns; None for one trial
    n_trials: int
    trial_sharpe_variance: Optional[float]  # per bar, the variance the DSR used (never below 1 / (T - 1))

    @property
    def p_value(self) -> float:
        """The one-sided HAC p-value of ``H0: alpha <= 0``."""
        return self.alpha.p_value

    def line(self) -> str:
        """One plain line, beginning ``Edge over buy-and-hold: shown`` or ``... not shown``."""
        a = self.alpha
        boot = "not needed" if self.bootstrap is None else f"{self.bootstrap.p_value:.3g}"
        figures = (f"alpha {100 * a.alpha_annual:+.1f} % a year, one-sided {100 * (1 - self.level):.0f} % lower bound "
                   f"{100 * a.lower_annual:+.1f} %; p = {a.p_value:.3g}, bootstrap p = {boot}; beta {a.beta:.2f}")
        if self.n_trials > 1:
            dsr = "undefined" if self.dsr is None else f"{self.dsr:.2f}"
            figures += f"; deflated Sharpe {dsr} over {self.n_trials} trials"
        return f"{VERDICT_PREFIX} {'shown' if self.shown else 'not shown'} ({figures})"

    def as_dict(self) -> dict[str, Any]:
        """Every figure (JSON-safe), the line included."""
        return {"shown": self.shown, "line": self.line(), "level": self.level, "bars": self.bars,
                "periods_per_year": self.periods_per_year, "alpha": self.alpha.as_dict(),
                "bootstrap": None if self.bootstrap is None else self.bootstrap.as_dict(),
                "excess_return": None if self.excess is None else self.excess.as_dict(),
                "sharpe_difference": None if self.sharpe_difference is None else self.sharpe_difference.as_dict(),
                "psr_zero": self.psr_zero, "dsr": self.dsr, "n_trials": self.n_trials,
                "trial_sharpe_variance": self.trial_sharpe_variance}


def sampling_variance(bars: int) -> float:
    """The variance of a per-bar Sharpe estimate with no skill over ``bars`` bars: ``1 / (T - 1)``."""
    return 1.0 / max(bars - 1, 1)


def trial_variance(trial_sharpes: Optional[Sequence[float]], bars: int, *others: Optional[float]) -> float:
    """The variance of the trials' per-bar Sharpe ratios that the DSR uses.

    The largest of: the sample variance (``ddof=1``) of ``trial_sharpes`` measured over the same
    ``bars``, any of ``others`` (variances already in these units), and the no-skill sampling variance
    :func:`sampling_variance`. Trials that agree (seeds of one configuration) do not make the luck of
    the best of them smaller than the noise of one Sharpe estimate.
    """
    values = [float(s) for s in (trial_sharpes or []) if s is not None and np.isfinite(s)]
    candidates = [sampling_variance(bars)]
    if len(values) >= 2:
        candidates.append(float(np.var(values, ddof=1)))
    candidates += [float(v) for v in others if v is not None and np.isfinite(v)]
    return max(candidates)


def rescaled_variance(sharpes: Sequence[float], measured_bars: int, bars: int) -> Optional[float]:
    """The spread of Sharpe ratios measured over ``measured_bars`` bars, as it would be over ``bars``.

    Their sample variance is the spread of true skill plus the sampling variance over
    ``measured_bars``; that sampling part is swapped for the one over ``bars``:
    ``max(var - 1 / (T_m - 1), 0) + 1 / (T - 1)``. None with fewer than two Sharpe ratios or bars.
    """
    values = [float(s) for s in sharpes if s is not None and np.isfinite(s)]
    if len(values) < 2 or measured_bars < 2:
        return None
    skill = max(float(np.var(values, ddof=1)) - sampling_variance(measured_bars), 0.0)
    return skill + sampling_variance(bars)


def edge_verdict(agent: np.ndarray, benchmark: np.ndarray, periods_per_year: float, *, n_trials: int = 1,
                 trial_sharpes: Optional[Sequence[float]] = None, extra_trial_variance: Optional[float] = None,
                 level: float = 0.05, reps: int = 2000, seed: int = 0, describe: bool = True) -> EdgeVerdict:
    """The verdict on ``agent``'s edge over ``benchmark``: simple per-bar returns ``[T]`` on the same bars.

    ``n_trials`` counts every configuration and seed tried (>= 1); ``trial_sharpes`` are those trials'
    per-bar Sharpe ratios of their hedged returns over the same bars, and ``extra_trial_variance`` a
    variance in the same units from elsewhere (a tuning study, see :func:`rescaled_variance`).
    ``describe=False`` computes only what decides: the descriptive bootstraps (excess return, Sharpe
    difference) are left out, and the intercept's bootstrap runs only where the HAC test passes (where
    it fails, the edge is not shown whatever the bootstrap says), so ``bootstrap`` may be None.
    """
    agent, benchmark = as_returns(agent), as_returns(benchmark)
    if agent.shape != benchmark.shape:
        raise ValueError(f"agent and benchmark returns differ in length: {agent.size} and {benchmark.size}")
    if agent.size < 3:
        raise ValueError(f"the verdict needs at least 3 bars, got {agent.size}")
    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    size = 1.0 - level
    hac = alpha_test(agent, benchmark, periods_per_year, size=size)
    needed = describe or (hac.alpha > 0 and hac.p_value < level)
    boot = alpha_bootstrap(agent, benchmark, periods_per_year, reps=reps, seed=seed, size=size) if needed else None
    variance: Optional[float] = None
    dsr: Optional[float] = None
    if n_trials > 1:
        variance = trial_variance(trial_sharpes, agent.size, extra_trial_variance)
        dsr = None if hac.exact_fit else deflated_sharpe_ratio(hedged_returns(agent, benchmark), n_trials, variance)
    shown = (hac.alpha > 0 and hac.p_value < level and boot is not None and boot.p_value < level
             and (n_trials == 1 or (dsr is not None and dsr > size)))
    excess = difference = None
    if describe:
        excess = mean_excess_test(agent, benchmark, periods_per_year, reps=reps, seed=seed + 1, size=size)
        difference = sharpe_difference_test(agent, benchmark, periods_per_year, reps=reps, seed=seed + 2, size=size)
    return EdgeVerdict(shown=bool(shown), level=level, bars=int(agent.size), periods_per_year=float(periods_per_year),
                       alpha=hac, bootstrap=boot, excess=excess, sharpe_difference=difference,
                       psr_zero=probabilistic_sharpe_ratio(agent), dsr=dsr, n_trials=int(n_trials),
                       trial_sharpe_variance=variance)


def seed_trial_sharpes(seeds: Sequence[np.ndarray], benchmark: np.ndarray) -> list[float]:
    """Per-bar Sharpe ratios of each seed's hedged returns over ``benchmark`` ``[T]`` (exact fits left out)."""
    sharpes = [alpha_sharpe(r, benchmark) for r in seeds]
    return [s for s in sharpes if s is not None]
