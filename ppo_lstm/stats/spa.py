"""Hansen's test for Superior Predictive Ability (``arch.bootstrap.SPA``): does the best of several
strategies beat the benchmark, after looking at all of them?

The strategies (seeds, their ensemble, a rule) are compared with buy-and-hold by their alpha: each
one's per-bar hedged returns ``r_k - beta_k r_b`` (:func:`ppo_lstm.stats.alpha.hedged_returns`,
mean: its alpha) are the loss differentials against the benchmark, whose own hedged return is 0.
``H0``: no strategy has a positive alpha. Picking the best strategy after the fact is accounted for
by the test, which a p-value of the best one alone is not. Hansen (2005), "A Test for Superior
Predictive Ability", Journal of Business & Economic Statistics 23(4).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np
from arch.bootstrap import SPA

from ppo_lstm.stats.alpha import alpha_sharpe, hedged_returns
from ppo_lstm.stats.bootstrap import block_length


@dataclass(frozen=True)
class SpaResult:
    """The SPA test's p-values (``consistent`` is Hansen's; ``lower`` and ``upper`` bracket it),
    the strategies compared and the one with the largest alpha."""


    p_consistent: float
    p_lower: float
    p_upper: float
    strategies: tuple[str, ...]
    fixed_exposures: tuple[str, ...]  # left out: an exact multiple of the benchmark has an alpha of 0
    best: str
    best_alpha_per_bar: float
    block_length: float
    reps: int

    def as_dict(self) -> dict[str, Any]:
        """The fields (JSON-safe)."""
        out = asdict(self)
        out["strategies"], out["fixed_exposures"] = list(self.strategies), list(self.fixed_exposures)
        return out


def spa_test(benchmark: np.ndarray, strategies: Mapping[str, np.ndarray], reps: int = 1000,
             seed: int = 0) -> SpaResult:
    """SPA of ``strategies`` (name -> per-bar returns ``[T]``) against ``benchmark`` ``[T]``, in alpha."""
    if not strategies:
        raise ValueError("the SPA test needs at least one strategy")
    names = tuple(n for n in strategies if alpha_sharpe(strategies[n], benchmark) is not None)
    fixed = tuple(n for n in strategies if n not in names)
    if not names:  # every strategy is a fixed exposure: each alpha is 0, none can be superior
        return SpaResult(1.0, 1.0, 1.0, names, fixed, "", 0.0, 1.0, reps)
    hedged = np.column_stack([hedged_returns(strategies[n], benchmark) for n in names])  # [T, K]
    length = block_length(*hedged.T)
    # losses: the benchmark's hedged return is 0; a strategy's loss is minus its hedged return
    test = SPA(np.zeros(hedged.shape[0]), -hedged, block_size=max(int(round(length)), 1), reps=reps,
               bootstrap="stationary", studentize=True, seed=np.random.default_rng(seed))
    test.compute()
    p = test.pvalues
    means = hedged.mean(axis=0)
    best = int(np.argmax(means))
    return SpaResult(p_consistent=float(p["consistent"]), p_lower=float(p["lower"]), p_upper=float(p["upper"]),
                     strategies=names, fixed_exposures=fixed, best=names[best], best_alpha_per_bar=float(means[best]),
                     block_length=length, reps=reps)
