"""ppo_lstm.stats against arch, scipy, the project's trading metrics and the published DSR example."""
from __future__ import annotations

import math

import numpy as np
import pytest
from arch.bootstrap import StationaryBootstrap, optimal_block_length
from scipy import stats as scipy_stats

from ppo_lstm.evaluation.metrics import trading_metrics
from ppo_lstm.stats import (annualised_return, annualised_sharpe, block_length, deflated_sharpe_ratio,
                            expected_max_sharpe, max_drawdown, mean_excess_test, per_period_sharpe,
                            probabilistic_sharpe_ratio, psr_from_moments, sharpe_difference_test)


def _returns(seed: int, mean: float, std: float, bars: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(mean, std, bars)


def test_performance_figures_match_the_backtest_metrics():
    r = _returns(0, 0.0005, 0.01, 600)
    equity = 1000.0 * np.concatenate(([1.0], np.cumprod(1.0 + r)))
    metrics = trading_metrics(equity, np.ones(600), np.zeros(0), 0.0, 252.0)
    assert annualised_return(r, 252) * 100 == pytest.approx(metrics.annual_return_pct, rel=1e-9)
    assert annualised_sharpe(r, 252) == pytest.approx(metrics.sharpe, rel=1e-9)
    assert max_drawdown(r) * 100 == pytest.approx(metrics.max_drawdown_pct, rel=1e-9)


def test_performance_figures_on_a_worked_series():
    r = np.array([0.10, -0.10, 0.05])  # equity 1, 1.1, 0.99, 1.0395
    assert annualised_return(r, 3) == pytest.approx(1.0395 - 1)
    assert max_drawdown(r) == pytest.approx(0.10)
    assert per_period_sharpe(r) == pytest.approx(np.mean(r) / np.std(r, ddof=1))
    assert per_period_sharpe(np.full(5, 0.01)) is None and annualised_sharpe(np.zeros(1), 252) is None
    assert annualised_return(np.array([-1.0, 0.5]), 252) == -1.0


def test_deflated_sharpe_ratio_reproduces_the_published_example():
    # Bailey and López de Prado (2014), section "A numerical example": 100 trials, annualised variance of
    # the trials' Sharpe 1/2, best annualised Sharpe 2.5 over 1,250 daily bars, skew -3, kurtosis 10:
    # E[max SR] = 0.1132 per day and DSR = 0.9004.
    variance = 0.5 / 250
    assert expected_max_sharpe(100, variance) == pytest.approx(0.1132, abs=5e-5)
    dsr = psr_from_moments(2.5 / math.sqrt(250), expected_max_sharpe(100, variance), 1250, -3.0, 10.0)
    assert dsr == pytest.approx(0.9004, abs=5e-4)


def test_psr_uses_the_sample_moments_and_reduces_to_the_normal_formula():
    r = _returns(1, 0.001, 0.01, 400) ** 3 * 1e4  # skewed and fat-tailed
    sharpe = np.mean(r) / np.std(r, ddof=1)
    skew, kurt = scipy_stats.skew(r), scipy_stats.kurtosis(r, fisher=False)
    expected = scipy_stats.norm.cdf(sharpe * math.sqrt(399)
                                    / math.sqrt(1 - skew * sharpe + (kurt - 1) / 4 * sharpe ** 2))
    assert probabilistic_sharpe_ratio(r) == pytest.approx(expected, rel=1e-12)
    # normal moments (skew 0, kurtosis 3): the variance of the Sharpe estimate is 1 + SR^2 / 2 (Lo, 2002)
    assert psr_from_moments(0.1, 0.02, 500, 0.0, 3.0) == pytest.approx(
        scipy_stats.norm.cdf(0.08 * math.sqrt(499) / math.sqrt(1 + 0.1 ** 2 / 2)))
    assert deflated_sharpe_ratio(r, 1, 0.3) == pytest.approx(probabilistic_sharpe_ratio(r))
    assert deflated_sharpe_ratio(r, 50, 1e-3) < probabilistic_sharpe_ratio(r)


def test_bootstrap_interval_is_arch_basic_interval_for_the_same_draws():
    a, b = _returns(2, 0.0008, 0.01, 700), _returns(3, 0.0003, 0.012, 700)
    test = mean_excess_test(a, b, 252, reps=499, seed=7)
    assert test.block_length == pytest.approx(float(optimal_block_length(a - b)["stationary"].iloc[0]))
    arch_ci = StationaryBootstrap(test.block_length, a - b, seed=np.random.default_rng(7)).conf_int(
        lambda x: np.array([x.mean() * 252]), 499, method="basic")
    assert (test.ci_low, test.ci_high) == pytest.approx((arch_ci[0, 0], arch_ci[1, 0]), rel=1e-12)
    assert test.estimate == pytest.approx(np.mean(a - b) * 252)


def test_bootstrap_p_value_agrees_with_the_t_test_on_iid_returns():
    excess = _returns(4, 0.0004, 0.01, 2500)
    test = mean_excess_test(excess, np.zeros_like(excess), 252, reps=4000, seed=0)
    t_p = scipy_stats.ttest_1samp(excess, 0.0, alternative="greater").pvalue
    assert 0.005 < t_p < 0.2  # a borderline case, where the two can disagree visibly
    assert test.p_value == pytest.approx(t_p, abs=0.02)


def test_sharpe_difference_p_value_agrees_with_jobson_korkie_memmel_on_iid_returns():
    rng = np.random.default_rng(5)
    common = rng.normal(0, 0.01, 3000)
    a = 0.0006 + 0.6 * common + rng.normal(0, 0.008, 3000)
    b = 0.0002 + 0.6 * common + rng.normal(0, 0.008, 3000)
    test = sharpe_difference_test(a, b, 252, reps=3000, seed=1)
    sa, sb = np.mean(a) / np.std(a, ddof=1), np.mean(b) / np.std(b, ddof=1)
    rho = np.corrcoef(a, b)[0, 1]
    variance = (2 - 2 * rho + 0.5 * (sa ** 2 + sb ** 2 - 2 * sa * sb * rho ** 2)) / 3000  # Memmel (2003)
    jkm_p = scipy_stats.norm.sf((sa - sb) / math.sqrt(variance))
    assert test.estimate == pytest.approx((sa - sb) * math.sqrt(252))
    assert 0.005 < jkm_p < 0.2
    assert test.p_value == pytest.approx(jkm_p, abs=0.02)


def test_block_length_follows_autocorrelation_and_is_at_least_one():
    rng = np.random.default_rng(6)
    iid = rng.normal(size=2000)
    persistent = np.convolve(rng.normal(size=2040), np.ones(40) / 40, mode="valid")[:2000]
    assert block_length(iid) < 3 < block_length(persistent)
    assert block_length(np.zeros(100)) == 1.0
    assert block_length(iid, persistent) == block_length(persistent)
