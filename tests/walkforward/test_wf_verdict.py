"""The walk-forward's verdict inputs: P&L over each fold's starting equity, where a position held
unchanged through the real engine is an exact multiple of buy-and-hold, and the verdict on them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from envs.config import EnvConfig
from envs.data import MarketData
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.stats import alpha_test
from ppo_lstm.walkforward.config import WalkForwardConfig
from ppo_lstm.walkforward.policies import RulePolicy
from ppo_lstm.walkforward.results import basket, capital_frame, on_starting_capital, trial_count, verdict_of
from ppo_lstm.walkforward.trading import returns_of


def _walk(seed: int, bars: int, drift: float) -> MarketData:
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(drift, 0.01, bars)))
    open_ = np.r_[100.0, close[:-1]]
    return MarketData(source="walk.csv", timestamps=pd.bdate_range("2001-01-01", periods=bars).values, open=open_,
                      high=np.maximum(open_, close), low=np.minimum(open_, close), close=close,
                      volume=np.ones(bars), bar_seconds=86400.0)


def test_pnl_on_starting_capital_restarts_each_fold():
    r = np.array([0.1, -0.5, 1.0, 0.2, 0.5])
    fold = np.array([1, 1, 1, 2, 2])
    # fold 1: equity 1, 1.1, 0.55, 1.1 -> P&L 0.1, -0.55, 0.55; fold 2: 1, 1.2, 1.8 -> 0.2, 0.6
    assert on_starting_capital(r, fold) == pytest.approx([0.1, -0.55, 0.55, 0.2, 0.6])


@pytest.mark.parametrize("lots", [-1, 0, 1])
def test_a_position_held_through_the_engine_has_no_alpha_in_a_crash(lots: int):
    data = _walk(0, 400, -0.004)  # falls about 75 % over the scored bars
    env = EnvConfig(fee_bps=10.0, slippage_bps=0.0)
    result = backtest_history(RulePolicy(env, np.full(340, lots)), env, data, 59, 400, greedy=True)
    agent, bench = returns_of(result.equity), returns_of(result.buy_and_hold_equity)
    fold = np.ones(agent.size)
    assert bench.sum() < -0.5
    test = alpha_test(on_starting_capital(agent, fold), on_starting_capital(bench, fold), 252)
    assert test.alpha <= 0 and test.p_value > 0.5 and test.beta == pytest.approx(lots, abs=2e-3)
    if lots == -1:  # in simple returns the short's weight in its own equity drifts: not a fixed multiple
        assert np.std(agent[1:] / bench[1:]) > 0.05


def test_the_verdict_on_the_capital_series_and_the_trial_count():
    rng = np.random.default_rng(1)
    bench = rng.normal(0.0, 0.01, 600)
    skill = rng.normal(0.001, 0.003, 600)
    oos = pd.DataFrame({"time": pd.bdate_range("2010-01-01", periods=600), "instrument": "x.csv",
                        "fold": np.repeat([1, 2], 300), "buy_and_hold": bench, "flat": 0.0, "ma_10_40": bench})
    for seed in (1, 2):
        oos[f"seed_{seed}"] = 0.5 * bench + skill + rng.normal(0, 1e-4, 600)
    oos["ensemble"] = oos[["seed_1", "seed_2"]].mean(axis=1)
    capital = basket(capital_frame(oos, [1, 2]), [1, 2])
    assert capital["buy_and_hold"].to_numpy()[:300] == pytest.approx(on_starting_capital(bench[:300], np.ones(300)))
    verdict = verdict_of(capital, [1, 2], 252.0, WalkForwardConfig(seeds=2))
    assert verdict.result.shown and verdict.n_trials == 2
    assert verdict.spa.best in ("seed_1", "seed_2", "ensemble") and verdict.spa.p_consistent < 0.05
    assert verdict.spa.fixed_exposures == ("ma_10_40",)  # buy-and-hold itself, bar for bar
    assert [trial_count(WalkForwardConfig(seeds=s, configs_tried=c)) for s, c in ((1, 100), (3, 100))] == [100, 300]


def test_each_instrument_gets_its_own_alpha_in_the_report():
    from ppo_lstm.walkforward.report import instrument_lines
    from ppo_lstm.walkforward.results import instrument_alphas
    rng = np.random.default_rng(2)
    parts = []
    for name, skill in (("a.csv", 0.002), ("b.csv", 0.0)):
        bench = rng.normal(0.0, 0.01, 400)
        part = pd.DataFrame({"time": pd.bdate_range("2010-01-01", periods=400), "instrument": name,
                             "fold": np.repeat([1, 2], 200), "buy_and_hold": bench, "flat": 0.0, "ma_10_40": bench,
                             "seed_1": 0.5 * bench + rng.normal(skill, 0.003, 400)})
        part["ensemble"] = part["seed_1"]
        parts.append(part)
    capital = capital_frame(pd.concat(parts, ignore_index=True), [1])
    alphas = instrument_alphas(capital, 252.0)
    assert list(alphas) == ["a.csv", "b.csv"]
    for name, part in capital.groupby("instrument"):
        expected = alpha_test(part["ensemble"].to_numpy(), part["buy_and_hold"].to_numpy(), 252.0)
        assert alphas[name]["alpha_annual"] == pytest.approx(expected.alpha_annual)
    assert alphas["a.csv"]["p_value"] < 0.05 < alphas["b.csv"]["p_value"]
    lines = instrument_lines(alphas)
    assert lines[1].startswith("## Alpha per instrument") and any(line.startswith("| b.csv |") for line in lines)
    assert instrument_lines({"a.csv": alphas["a.csv"]}) == []  # one instrument: the verdict's own alpha says it


def test_the_seeds_sharpe_line_says_how_many_seeds_have_one():
    from ppo_lstm.walkforward.report import spread_line

    every = {"min": -0.43, "max": -0.3, "std": 0.092, "seeds": 3, "with_sharpe": 3}
    assert spread_line(every) == "Spread of the seeds' Sharpe ratios: -0.43 to -0.30 (std 0.09)."
    older = {"min": 0.04, "max": 0.71, "std": 0.38}  # a summary.json written before the counts
    assert spread_line(older) == "Spread of the seeds' Sharpe ratios: 0.04 to 0.71 (std 0.38)."
    one = {"min": -0.26, "max": -0.26, "std": None, "seeds": 2, "with_sharpe": 1}
    assert spread_line(one) == ("Sharpe ratio of the one seed whose returns vary: -0.26 (1 of 2 seeds have "
                                "constant returns (flat) and no Sharpe ratio).")
    two = {"min": 0.1, "max": 0.5, "std": 0.28, "seeds": 3, "with_sharpe": 2}
    assert spread_line(two).startswith("Spread of the Sharpe ratios of the 2 seeds whose returns vary: 0.10 to 0.50")
    none = {"min": None, "max": None, "std": None, "seeds": 2, "with_sharpe": 0}
    assert spread_line(none) == "Spread of the seeds' Sharpe ratios: none; all 2 seeds have constant returns (flat)."
