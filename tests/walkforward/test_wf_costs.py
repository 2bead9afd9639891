"""Cost sensitivity (ppo_lstm.walkforward.costs): the ensemble's positions re-priced at another fee
through the same backtest give the same fills, at the cost paid the traded P&L (in the verdict's
units, over each fold's starting equity), and buy-and-hold re-priced on its entry only; the
turnover is the value traded over equity; the break-even search; the basket as the verdict's
(results.basket of results.capital_frame). In-process, small synthetic walks, fast."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from envs.data import MarketData
from ppo_lstm.stats.alpha import alpha_test
from ppo_lstm.walkforward.costs import break_even, cost_sensitivity, legs_of, reprice
from ppo_lstm.walkforward.policies import RulePolicy
from ppo_lstm.walkforward.results import basket, capital_frame, on_starting_capital, oos_frame
from ppo_lstm.walkforward.trading import FoldTrades, returns_of, trade
from test_wf_trading import ENV, agent, walk

WINDOWS = ((150, 200), (200, 260))


def traded(data: MarketData, policy_of, env=ENV) -> list[tuple[int, FoldTrades]]:
    """Each window of ``WINDOWS`` traded as a fold by ``policy_of(a, b)``, as trade_fold keeps it."""
    out = []
    for k, (a, b) in enumerate(WINDOWS, start=1):
        r = trade(policy_of(a, b), env, data, a, b)
        zeros = np.zeros(b - a)
        out.append((k, FoldTrades(time=np.asarray(r.time[1:]), seeds={}, ensemble=returns_of(r.equity),
                                  baselines={"buy_and_hold": returns_of(r.buy_and_hold_equity), "flat": zeros,
                                             "ma_10_40": zeros}, ensemble_positions=r.position)))
    return out


def test_repricing_keeps_the_fills_and_at_the_cost_paid_gives_the_traded_returns() -> None:
    data = walk(260, 6)
    trades = traded(data, lambda a, b: agent(2))
    legs = legs_of({"walk.csv": trades}, [data])
    paid = reprice(legs, ENV, ENV.fee_bps)
    folds = np.concatenate([np.full(len(t.time), k) for k, t in trades])
    for column, traded_returns in (("ensemble", [t.ensemble for _, t in trades]),
                                   ("buy_and_hold", [t.baselines["buy_and_hold"] for _, t in trades])):
        capital = on_starting_capital(np.concatenate(traded_returns), folds)
        assert np.allclose(paid[column], capital, rtol=1e-12, atol=1e-16)
    dearer = reprice(legs, ENV, 40.0)
    a, b = WINDOWS[0]
    priced = dataclasses.replace(ENV, fee_bps=40.0)
    cheap, again = (trade(RulePolicy(env, legs[0].positions), env, data, a, b) for env in (ENV, priced))
    assert np.array_equal(again.position, legs[0].positions)  # the same orders at every bar
    extra = cheap.buy_and_hold_equity - again.buy_and_hold_equity  # buy-and-hold pays more on its entry only
    assert extra[0] == 0.0 and extra[1] > 0.0 and np.allclose(extra[1:], extra[1], rtol=1e-12, atol=0)
    entries = np.isin(np.arange(len(paid)), [0, b - a])  # each fold's entry bar
    assert np.all(dearer["buy_and_hold"][entries] < paid["buy_and_hold"][entries])
    assert np.allclose(dearer["buy_and_hold"][~entries], paid["buy_and_hold"][~entries], rtol=0, atol=1e-15)
    assert dearer["ensemble"].sum() < paid["ensemble"].sum()

def test_turnover_is_the_value_traded_over_equity() -> None:
    data = walk(260, 7)
    env = dataclasses.replace(ENV, slippage_bps=0.0)
    lots = np.array([1, 1, -1, 0, 0, 1] * 10)[: WINDOWS[0][1] - WINDOWS[0][0]]
    legs = legs_of({"walk.csv": traded(data, lambda a, b: RulePolicy(env, lots), env)[:1]}, [data])
    free, paid = reprice(legs, env, 0.0), reprice(legs, env, 25.0)
    a = WINDOWS[0][0]
    # bar 0 buys one lot of initial cash / close[a - 1] units at the open: that value over the starting cash
    assert paid["turnover"][0] == pytest.approx(data.open[a] / data.close[a - 1], rel=1e-12)
    assert paid["turnover"][1] == 0.0 and paid["turnover"][2] > 1.9  # long to short: twice the equity
    assert free["ensemble"][0] - paid["ensemble"][0] == pytest.approx(paid["turnover"][0] * 25e-4, rel=1e-9)


def test_break_even_finds_the_crossing_or_says_where_it_lies() -> None:
    status, fee, tried = break_even(lambda f: 0.3 - f / 100.0, paid=1.0)
    assert status == "found" and abs(fee - 30.0) <= 0.1 and sorted(tried) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
    assert break_even(lambda f: -0.01, paid=1.0)[:2] == ("below_cost_paid", None)
    assert break_even(lambda f: 1.0, paid=1.0, cap=100.0)[:2] == ("above_cap", None)


def test_cost_sensitivity_of_a_timing_edge_and_of_a_fixed_exposure() -> None:
    data = walk(260, 8)
    oracle = np.where(data.close > data.open, 1, -1)  # knows each bar's move: a large alpha before costs
    summary, lines = cost_sensitivity({"walk.csv": traded(data, lambda a, b: RulePolicy(ENV, oracle[a:b]))},
                                      [data], ENV, 252.0)
    even = summary["break_even"]
    assert even["status"] == "found" and summary["fees"][0]["fee_bps"] == ENV.fee_bps
    legs = legs_of({"walk.csv": traded(data, lambda a, b: RulePolicy(ENV, oracle[a:b]))}, [data])
    for fee, above in ((even["fee_bps"] - 0.1, True), (even["fee_bps"] + 0.1, False)):
        series = reprice(legs, ENV, fee)
        assert (alpha_test(series["ensemble"], series["buy_and_hold"], 252.0).lower_annual > 0) == above
    assert summary["turnover"]["per_year"] == pytest.approx(252.0 * summary["turnover"]["per_bar"])
    assert lines[1] == "## Costs: turnover and break-even fee" and any(f"**{even['fee_bps']:.1f} bps**" in x
                                                                        for x in lines)
    held, _ = cost_sensitivity({"walk.csv": traded(data, lambda a, b: RulePolicy(ENV, np.ones(b - a, np.int64)))},
                               [data], ENV, 252.0)
    assert held["break_even"]["status"] == "below_cost_paid"  # buy-and-hold itself: alpha 0 at any cost


def test_several_instruments_are_priced_as_the_verdicts_basket() -> None:
    weekdays = walk(260, 9)
    days = pd.date_range(pd.Timestamp(weekdays.timestamps[0]), periods=364, freq="D")
    other = dataclasses.replace(walk(364, 10), source="other.csv", timestamps=np.asarray(days, dtype="datetime64[ns]"))
    trades = {"walk.csv": traded(weekdays, lambda a, b: agent(3)), "other.csv": traded(other, lambda a, b: agent(4))}
    legs = legs_of(trades, [weekdays, other])
    ours = reprice(legs, ENV, ENV.fee_bps)
    theirs = basket(capital_frame(oos_frame(trades, []), []), [])
    assert np.array_equal(ours["time"], theirs["time"])
    assert np.allclose(ours["ensemble"], theirs["ensemble"], rtol=0, atol=1e-15)
    assert np.allclose(ours["buy_and_hold"], theirs["buy_and_hold"], rtol=0, atol=1e-15)
    assert cost_sensitivity({"walk.csv": [(1, dataclasses.replace(trades["walk.csv"][0][1], ensemble_positions=None))]},
                            [weekdays], ENV, 252.0)[0] == {"available": False}
