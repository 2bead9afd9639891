"""Statistics of out-of-sample returns: performance figures, and how sure an edge is.

- ``performance.py``: annualised return, per-bar and annualised Sharpe, max drawdown of a return series;
- ``alpha.py``: the alpha and beta of a strategy over its benchmark, with HAC (statsmodels) and
  stationary-bootstrap (arch) one-sided tests, and the hedged returns ``r - beta r_b``;
- ``sharpe_tests.py``: the Probabilistic and Deflated Sharpe Ratios (Bailey and López de Prado);
- ``bootstrap.py``: stationary block bootstrap tests (``arch``) of the mean excess return and the Sharpe difference;
- ``spa.py``: Hansen's SPA test (``arch``): does the best of several strategies have a positive alpha;
- ``verdict.py``: ``edge_verdict``, the rule and the one line ``Edge over buy-and-hold: shown|not shown (...)``.
"""
from ppo_lstm.stats.alpha import (AlphaBootstrap, AlphaTest, alpha_bootstrap, alpha_sharpe, alpha_test,
                                  hedged_returns, newey_west_lags)
from ppo_lstm.stats.bootstrap import BootstrapTest, block_length, mean_excess_test, sharpe_difference_test
from ppo_lstm.stats.performance import annualised_return, annualised_sharpe, max_drawdown, per_period_sharpe
from ppo_lstm.stats.sharpe_tests import (deflated_sharpe_ratio, expected_max_sharpe, probabilistic_sharpe_ratio,
                                         psr_from_moments)
from ppo_lstm.stats.spa import SpaResult, spa_test
from ppo_lstm.stats.verdict import (VERDICT_PREFIX, EdgeVerdict, edge_verdict, rescaled_variance, sampling_variance,
                                    seed_trial_sharpes, trial_variance)

__all__ = ["AlphaBootstrap", "AlphaTest", "BootstrapTest", "EdgeVerdict", "SpaResult", "VERDICT_PREFIX",
           "alpha_bootstrap", "alpha_sharpe", "alpha_test", "annualised_return", "annualised_sharpe", "block_length",
           "deflated_sharpe_ratio", "edge_verdict", "expected_max_sharpe", "hedged_returns", "max_drawdown",
           "mean_excess_test", "newey_west_lags", "per_period_sharpe", "probabilistic_sharpe_ratio",
           "psr_from_moments", "rescaled_variance", "sampling_variance", "seed_trial_sharpes",
           "sharpe_difference_test", "spa_test", "trial_variance"]
