"""Trading a test window (ppo_lstm.walkforward.trading, .policies): every bar of the window is
scored and none before it, the seed ensemble averages probabilities, the baselines trade
through the same engine, and stitched folds equal the folds' own backtests. In-process, fast."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

from envs.config import EnvConfig
from envs.data import MarketData
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.evaluation.backtest import backtest_history
from ppo_lstm.walkforward.folds import make_folds
from ppo_lstm.walkforward.policies import EnsemblePolicy, RulePolicy, flat_policy, ma_crossover_lots
from ppo_lstm.walkforward.trading import returns_of, trade, window_bars

ENV = EnvConfig(window=8, episode_length=16, fee_bps=10.0, slippage_bps=2.0)


def walk(bars: int, seed: int) -> MarketData:
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    o = np.r_[50.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(bars))
    return MarketData(source="walk.csv", timestamps=np.asarray(pd.bdate_range("2020-01-01", periods=bars),
                                                                dtype="datetime64[ns]"),
                      open=o, high=np.maximum(o, close), low=np.minimum(o, close), close=close,
                      volume=np.ones(bars), bar_seconds=86400.0)


def agent(seed: int) -> RecurrentActorCritic:
    torch.manual_seed(seed)
    a = RecurrentActorCritic(ENV.obs_dim, ENV.num_actions, 16, 16)
    with torch.no_grad():
        a.policy_head.weight.mul_(300.0)  # a sharp greedy policy that trades
    return a


def test_a_test_window_scores_exactly_its_bars_and_reads_only_earlier_ones() -> None:
    data = walk(200, 1)
    a, b = 150, 180
    result = trade(agent(0), ENV, data, a, b)
    assert result.bars == b - a and result.time[1] == data.timestamps[a] and result.time[-1] == data.timestamps[b - 1]
    later = dataclasses.replace(data, close=data.close.copy(), open=data.open.copy(), high=data.high.copy(),
                                low=data.low.copy())
    for name in ("open", "high", "low", "close"):
        getattr(later, name)[a:] *= 1.3  # the window's own bars change; the first decision cannot see them
    again = trade(agent(0), ENV, later, a, b)
    assert again.position[0] == result.position[0]
    assert np.array_equal(returns_of(result.equity), np.diff(result.equity) / result.equity[:-1])


def test_the_ensemble_of_one_is_the_agent_and_of_several_the_mean_probability() -> None:
    data = walk(200, 2)
    one = trade(agent(0), ENV, data, 150, 190)
    assert np.array_equal(trade(EnsemblePolicy([agent(0)]), ENV, data, 150, 190).position, one.position)
    agents = [agent(s) for s in range(3)]
    policy = EnsemblePolicy(agents)
    obs = torch.randn(4, ENV.obs_dim)
    starts = torch.zeros(4)
    logits, _, _ = policy.step(obs, policy.initial_state(4), starts)
    mean = torch.stack([a.step(obs, a.initial_state(4), starts)[0].softmax(-1) for a in agents]).mean(0)
    assert torch.allclose(logits.exp(), mean, atol=1e-6)


def test_baselines_trade_through_the_same_engine() -> None:
    data = walk(200, 3)
    a, b = 120, 180
    ens = trade(agent(0), ENV, data, a, b)
    flat = trade(flat_policy(ENV, b - a), ENV, data, a, b)
    assert np.all(returns_of(flat.equity) == 0.0) and np.all(flat.position == 0)
    lots = ma_crossover_lots(data.close, a - 1, b - a, ENV)
    fast = np.array([data.close[t - 9:t + 1].mean() for t in range(a - 1, b - 1)])
    slow = np.array([data.close[t - 39:t + 1].mean() for t in range(a - 1, b - 1)])
    assert np.array_equal(lots, np.where(fast > slow, 1, -1))
    ma = trade(RulePolicy(ENV, lots), ENV, data, a, b)
    assert np.array_equal(ma.position, lots)
    hold = trade(RulePolicy(ENV, np.ones(b - a, np.int64)), ENV, data, a, b)  # +K every bar: buy-and-hold
    assert np.allclose(hold.equity, ens.buy_and_hold_equity, rtol=0, atol=1e-9)


def test_stitched_folds_are_the_folds_backtests_end_to_end() -> None:
    data = walk(260, 4)
    folds = make_folds(data.timestamps, 3, 30, purge=0, train_size=None)
    pieces, times = [], []
    for fold in folds:
        a, b = window_bars(data, data.timestamps, fold)
        result = backtest_history(agent(1), ENV, data, a - 1, b)  # the first decision at the close before a
        pieces.append(returns_of(result.equity))
        times.append(result.time[1:])
    stitched = np.concatenate(times)
    assert np.array_equal(stitched, data.timestamps[170:260])  # every test bar once, in order
    assert len(np.concatenate(pieces)) == 90
