"""ppo_lstm.stats.alpha against statsmodels (HAC OLS) and arch (the stationary bootstrap), and the
property the verdict rests on: a fixed exposure has an alpha of 0, whatever the market did."""
from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm
from arch.bootstrap import StationaryBootstrap

from ppo_lstm.stats import alpha_bootstrap, alpha_sharpe, alpha_test, block_length, hedged_returns, newey_west_lags


def _market(seed: int, bars: int, drift: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(drift, 0.01, bars)


def test_the_hac_test_is_statsmodels_newey_west_one_sided():
    bench = _market(0, 1200)
    rng = np.random.default_rng(1)
    noise = np.convolve(rng.normal(0, 0.004, 1210), np.ones(5) / 5, mode="valid")[:1200]  # autocorrelated
    agent = 0.0003 + 0.4 * bench + noise
    test = alpha_test(agent, bench, 252)
    assert test.lags == newey_west_lags(1200) == 6  # floor(4 * 12 ** (2 / 9))
    fit = sm.OLS(agent, sm.add_constant(bench)).fit(cov_type="HAC", cov_kwds={"maxlags": 6})
    assert (test.alpha, test.beta, test.std_error) == pytest.approx((fit.params[0], fit.params[1], fit.bse[0]),
                                                                    rel=1e-12)
    assert test.p_value == pytest.approx(fit.pvalues[0] / 2, rel=1e-9)  # t > 0: half the two-sided p
    assert test.lower_annual == pytest.approx(fit.conf_int(alpha=0.10)[0, 0] * 252, rel=1e-9)  # one-sided 95 %
    assert test.alpha_annual == pytest.approx(fit.params[0] * 252)
    assert (test.lower_annual > 0) == (test.p_value < 0.05)
    # the hedged returns' mean is the alpha; their Sharpe the appraisal ratio
    hedged = hedged_returns(agent, bench)
    assert hedged.mean() == pytest.approx(test.alpha, rel=1e-9)
    assert alpha_sharpe(agent, bench) == pytest.approx(hedged.mean() / hedged.std(ddof=1), rel=1e-9)


def test_the_bootstrap_bound_is_arch_basic_interval_for_the_same_draws():
    bench = _market(2, 800)
    agent = 0.0004 + 0.7 * bench + np.random.default_rng(3).normal(0, 0.005, 800)
    test = alpha_bootstrap(agent, bench, 252, reps=499, seed=5)
    assert test.block_length == block_length(agent, bench)

    def intercept(y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.array([sm.OLS(y, sm.add_constant(x)).fit().params[0]])

    bootstrap = StationaryBootstrap(test.block_length, agent, bench, seed=np.random.default_rng(5))
    low, _ = bootstrap.conf_int(intercept, 499, method="basic", size=0.90)[:, 0]  # its lower end: one-sided 95 %
    assert test.lower_annual == pytest.approx(low * 252, rel=1e-9)
    bootstrap = StationaryBootstrap(test.block_length, agent, bench, seed=np.random.default_rng(5))
    draws = bootstrap.apply(intercept, 499)[:, 0]
    alpha = intercept(agent, bench)[0]
    assert test.p_value == pytest.approx((1 + np.sum(draws - alpha >= alpha)) / 500)


@pytest.mark.parametrize("weight", [0.0, 1.0, -1.0, 0.5, -2.0])
def test_a_fixed_exposure_has_no_alpha_on_any_path(weight: float):
    for seed, drift in ((4, -0.002), (5, 0.002), (6, 0.0)):  # falling, rising, driftless
        bench = _market(seed, 1000, drift)
        agent = weight * bench
        test = alpha_test(agent, bench, 252)
        assert test.exact_fit and test.alpha == 0.0 and test.p_value == 1.0 and test.beta == pytest.approx(weight)
        assert alpha_bootstrap(agent, bench, 252, reps=50).p_value == 1.0
        assert alpha_sharpe(agent, bench) is None


def test_timing_without_skill_is_rejected_at_about_the_tests_size():
    rejected = 0
    for seed in range(200):  # falling markets; in or out by a coin flip each bar
        bench = _market(100 + seed, 1000, -0.001)
        timing = np.where(np.random.default_rng(seed).random(1000) < 0.5, bench, 0.0)
        rejected += alpha_test(timing, bench, 252).p_value < 0.05
    assert 2 <= rejected <= 20  # 5 % of 200 is 10; a 1 %-to-10 % band


def test_skill_shows_and_bad_input_is_refused():
    bench = _market(7, 1500, -0.001)
    skilled = 0.3 * bench + np.abs(_market(8, 1500)) * 0.3  # earns beyond its exposure on every bar
    assert alpha_test(skilled, bench, 252).p_value < 1e-6 and alpha_bootstrap(skilled, bench, 252, reps=200).p_value < 0.01
    with pytest.raises(ValueError, match="differ in length"):
        alpha_test(bench, bench[:-1], 252)
    with pytest.raises(ValueError, match="at least 3 bars"):
        alpha_test(bench[:2], bench[:2], 252)
