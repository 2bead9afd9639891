"""The verdict's rule: alpha, not exposure; a Deflated Sharpe Ratio that deflates; Hansen's SPA (arch)."""
from __future__ import annotations

import numpy as np
import pytest
from arch.bootstrap import SPA

from ppo_lstm.stats import (VERDICT_PREFIX, alpha_sharpe, block_length, deflated_sharpe_ratio, edge_verdict,
                            hedged_returns, rescaled_variance, sampling_variance, spa_test, trial_variance)


def _market(seed: int, bars: int, drift: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(drift, 0.01, bars)


def _skill(seed: int, bars: int, mean: float = 0.001) -> np.ndarray:
    return np.random.default_rng(seed).normal(mean, 0.003, bars)


def test_out_of_a_falling_market_or_short_in_it_is_not_an_edge():
    crash = _market(0, 1500, -0.0015)  # falls about 90 %
    assert np.prod(1 + crash) < 0.2
    for agent in (np.zeros(1500), -crash, 0.3 * crash):
        verdict = edge_verdict(agent, crash, 252, n_trials=2, trial_sharpes=[0.0, 0.0], reps=200)
        assert not verdict.shown and verdict.p_value == 1.0 and verdict.alpha.alpha_annual == 0.0
        # what the rule no longer counts: each beat buy-and-hold by 25 % a year or more, with p < 0.01
        assert verdict.excess.estimate > 0.25 and verdict.excess.p_value < 0.01
        assert verdict.line().startswith(f"{VERDICT_PREFIX} not shown (alpha +0.0 % a year")


def test_skill_is_shown_and_the_line_prints_the_rules_bound():
    bench = _market(1, 1500, 0.0002)
    strong = 0.5 * bench + _skill(2, 1500)
    verdict = edge_verdict(strong, bench, 252, reps=500)
    assert verdict.shown and verdict.dsr is None and verdict.alpha.lower_annual > 0
    assert verdict.p_value < 0.05 and verdict.bootstrap.p_value < 0.05
    a = verdict.alpha
    assert verdict.line() == (f"{VERDICT_PREFIX} shown (alpha {100 * a.alpha_annual:+.1f} % a year, one-sided 95 % "
                              f"lower bound {100 * a.lower_annual:+.1f} %; p = {a.p_value:.3g}, bootstrap p = "
                              f"{verdict.bootstrap.p_value:.3g}; beta {a.beta:.2f})")
    assert verdict.as_dict()["line"] == verdict.line()
    noise = 0.5 * bench + _skill(3, 1500, 0.0)
    assert not edge_verdict(noise, bench, 252, reps=500).shown


def test_the_trials_variance_never_falls_below_the_no_skill_sampling_variance():
    assert sampling_variance(751) == pytest.approx(1 / 750)
    assert trial_variance([0.1], 101) == pytest.approx(0.01)  # one Sharpe ratio: the sampling variance alone
    assert trial_variance([0.1, 0.3], 101) == pytest.approx(0.02)  # a wide spread: its own
    assert trial_variance([0.1, 0.1001, 0.0999], 751) == pytest.approx(1 / 750)  # seeds that agree: the floor
    assert trial_variance([0.1, 0.1001], 751, 0.05) == 0.05
    # Sharpe ratios measured over 200 hold-out bars, rescaled to 751 test bars: their sampling part is swapped
    sharpes = [0.0, 0.1, 0.2, 0.15]
    assert rescaled_variance(sharpes, 200, 751) == pytest.approx(np.var(sharpes, ddof=1) - 1 / 199 + 1 / 750)
    assert rescaled_variance([0.0, 0.01], 200, 751) == pytest.approx(1 / 750)  # no spread beyond sampling noise
    assert rescaled_variance([0.1], 200, 751) is None


def test_more_declared_trials_never_raise_the_deflated_sharpe_ratio():
    bench = _market(4, 750)
    agent = 0.6 * bench + _skill(5, 750, 0.0004)
    seeds = [agent + np.random.default_rng(s).normal(0, 1e-5, 750) for s in range(3)]  # near-identical seeds
    sharpes = [alpha_sharpe(r, bench) for r in seeds]
    assert np.var(sharpes, ddof=1) < 0.1 * sampling_variance(750)  # what used to make the DSR equal PSR(0)
    previous = 1.0
    for n in (1, 2, 3, 10, 30, 100, 300, 3000, 30_000):
        dsr = edge_verdict(agent, bench, 252, n_trials=n, trial_sharpes=sharpes, reps=50).dsr
        dsr = deflated_sharpe_ratio(hedged_returns(agent, bench), 1, 1.0) if dsr is None else dsr
        assert dsr <= previous
        previous = dsr
    assert previous < 0.5
    # 1 seed x 100 configurations against 3 seeds x 100 on the same returns: more trials, never a higher DSR
    one = edge_verdict(agent, bench, 252, n_trials=100, trial_sharpes=sharpes[:1], reps=50)
    three = edge_verdict(agent, bench, 252, n_trials=300, trial_sharpes=sharpes, reps=50)
    assert three.dsr <= one.dsr and one.trial_sharpe_variance == three.trial_sharpe_variance == sampling_variance(750)
    assert three.dsr == pytest.approx(deflated_sharpe_ratio(hedged_returns(agent, bench), 300, 1 / 749))


def test_spa_is_arch_spa_on_the_hedged_returns():
    bench = _market(6, 1000)
    strategies = {"a": 0.5 * bench + _skill(7, 1000, 0.0), "b": -0.2 * bench + _skill(8, 1000, 0.0001),
                  "cash": np.zeros(1000)}
    result = spa_test(bench, strategies, reps=300, seed=3)
    assert result.strategies == ("a", "b") and result.fixed_exposures == ("cash",)
    hedged = np.column_stack([hedged_returns(strategies[n], bench) for n in ("a", "b")])
    reference = SPA(np.zeros(1000), -hedged, block_size=max(int(round(block_length(*hedged.T))), 1), reps=300,
                    bootstrap="stationary", seed=np.random.default_rng(3))
    reference.compute()
    assert result.p_consistent == pytest.approx(float(reference.pvalues["consistent"]))
    assert result.best == ("a" if hedged[:, 0].mean() > hedged[:, 1].mean() else "b")
    assert result.p_consistent > 0.05  # no skill in either
    strong = spa_test(bench, {**strategies, "skill": 0.2 * bench + _skill(9, 1000)}, reps=300)
    assert strong.p_consistent < 0.01 and strong.best == "skill"
    only_fixed = spa_test(bench, {"cash": np.zeros(1000), "long": bench})
    assert only_fixed.p_consistent == 1.0 and only_fixed.strategies == ()


def test_describe_false_decides_the_same_and_skips_only_what_cannot_change_it():
    bench = _market(10, 800, 0.0002)
    for agent in (0.5 * bench + _skill(11, 800), 0.5 * bench + _skill(12, 800, 0.0)):
        full = edge_verdict(agent, bench, 252, reps=300)
        lean = edge_verdict(agent, bench, 252, reps=300, describe=False)
        assert lean.shown == full.shown and lean.excess is None and lean.sharpe_difference is None
        if full.alpha.p_value < 0.05:  # the HAC test passes: the bootstrap must confirm it, so it runs
            assert lean.bootstrap == full.bootstrap
        else:
            assert lean.bootstrap is None and "bootstrap p = not needed" in lean.line()
