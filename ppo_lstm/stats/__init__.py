"""Statistics of out-of-sample returns: performance figures, and how sure an edge is.

- ``performance.py``: annualised return, per-bar and annualised Sharpe, max drawdown of a return series;
- ``sharpe_tests.py``: the Probabilistic and Deflated Sharpe Ratios (Bailey and López de Prado);
- ``bootstrap.py``: stationary block bootstrap tests (``arch``) of the mean excess return and the Sharpe difference;
- ``verdict.py``: ``edge_verdict``, the rule and the one line ``Edge over buy-and-hold: shown|not shown (...)``.
"""
from ppo_lstm.stats.bootstrap import BootstrapTest, block_length, mean_excess_test, sharpe_difference_test
from ppo_lstm.stats.performance import annualised_return, annualised_sharpe, max_drawdown, per_period_sharpe
from ppo_lstm.stats.sharpe_tests import (deflated_sharpe_ratio, expected_max_sharpe, probabilistic_sharpe_ratio,
                                         psr_from_moments)
from ppo_lstm.stats.verdict import VERDICT_PREFIX, EdgeVerdict, edge_verdict, trial_variance

__all__ = ["BootstrapTest", "EdgeVerdict", "VERDICT_PREFIX", "annualised_return", "annualised_sharpe",
           "block_length", "deflated_sharpe_ratio", "edge_verdict", "expected_max_sharpe", "max_drawdown",
           "mean_excess_test", "per_period_sharpe", "probabilistic_sharpe_ratio", "psr_from_moments",
           "sharpe_difference_test", "trial_variance"]
