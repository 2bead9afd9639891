"""The backtest engine (ppo_lstm.evaluation.backtest): the env bar for bar, no look-ahead, the time
feature of long runs, buy-and-hold, trades, busts and the simulated chain. In-process, fast."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from envs.config import EnvConfig
from envs.core import TradingCore
from envs.data import MarketData
from envs.trading_env import TradingEnv
from envs.vector import VectorTradingEnv
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.evaluation.backtest import BacktestResult, backtest_history, backtest_simulated, evaluation_seeds
from ppo_lstm.evaluation.engine import PolicyStepper, closed_trades
from ppo_lstm.algo.seeding import env_seeds

CFG = EnvConfig(window=8, episode_length=16, fee_bps=2.0, slippage_bps=3.0)


def walk(bars: int, seed: int, drift: float = 0.0) -> MarketData:
    """A daily random walk of ``bars`` bars, opens off the previous close."""
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(drift + 0.01 * rng.standard_normal(bars)))
    o = np.r_[50.0, close[:-1]] * np.exp(0.002 * rng.standard_normal(bars))
    return MarketData(source="test", timestamps=np.datetime64("2024-01-01") + np.arange(bars).astype("timedelta64[D]"),
                      open=o, high=np.maximum(o, close), low=np.minimum(o, close), close=close,
                      volume=np.ones(bars), bar_seconds=86400.0)


def sharp_agent(config: EnvConfig, seed: int = 0, gain: float = 300.0) -> RecurrentActorCritic:
    """A random agent whose greedy action depends strongly on its input (the init's policy
    head is nearly flat, so argmax would hardly move)."""
    torch.manual_seed(seed)
    agent = RecurrentActorCritic(config.obs_dim, config.num_actions, 16, 16)
    with torch.no_grad():
        agent.policy_head.weight.mul_(gain)
    return agent


def actions_of(result: BacktestResult, config: EnvConfig) -> np.ndarray:
    """The agent's action indices [T] from its positions."""
    return result.position + (0 if config.no_short else config.max_position)


def test_continuous_backtest_equals_stepping_the_env_by_hand() -> None:
    data, lo, hi = walk(300, seed=1), 40, 250
    result = backtest_history(sharp_agent(CFG), CFG, data, lo, hi)
    W, T = CFG.window, hi - lo - 1  # the first decision at bar lo's close, its window the W bars before it
    assert result.bars == T and len(set(result.position.tolist())) == 3  # it trades both ways
    assert result.late_start is None
    # the public env on exactly the slice's bars and its window: one episode of T decisions, its only start is bar 0
    cut = dataclasses.replace(data, **{k: getattr(data, k)[lo - W:hi] for k in
                                       ("timestamps", "open", "high", "low", "close", "volume")})
    for actions, curve in ((actions_of(result, CFG), result.equity),
                           (np.full(T, CFG.num_actions - 1), result.buy_and_hold_equity)):
        env = TradingEnv(dataclasses.replace(CFG, episode_length=T), data=cut)
        env.reset(seed=123)
        equity = [env.core.ledger.equity[0]]
        for t, a in enumerate(actions):
            _, _, terminated, truncated, info = env.step(int(a))
            equity.append(env.core.ledger.equity[0])
            assert not terminated and truncated == (t == T - 1)
        assert np.array_equal(np.array(equity), curve)  # bit for bit
        stats = info["episode"]
        metrics = result.agent if curve is result.equity else result.buy_and_hold
        assert metrics.trades == stats["closed_trades"]
        wins = round(metrics.win_rate_pct * metrics.trades / 100) if metrics.trades else 0
        assert wins == stats["winning_trades"]
    assert np.array_equal(result.close, data.close[lo:hi])
    assert np.array_equal(result.time, data.timestamps[lo:hi])
    assert result.start == "2024-02-10T00:00:00" and result.end == "2024-09-06T00:00:00"  # bars lo, hi-1


def test_no_look_ahead_permuting_later_bars_keeps_earlier_actions() -> None:
    data, cut = walk(260, seed=2), 120  # decisions 0..cut are taken before bar W + cut + 1 opens
    agent = sharp_agent(CFG, seed=1)
    before = backtest_history(agent, CFG, data, greedy=False, seed=9)
    later = np.arange(CFG.window + cut + 1, len(data))
    order = np.r_[np.arange(later[0]), np.random.default_rng(0).permutation(later)]
    shuffled = dataclasses.replace(data, **{k: getattr(data, k)[order] for k in ("open", "high", "low", "close")})
    after = backtest_history(agent, CFG, shuffled, greedy=False, seed=9)
    assert np.array_equal(before.position[:cut + 1], after.position[:cut + 1])
    assert np.array_equal(before.equity[:cut + 1], after.equity[:cut + 1])
    assert not np.array_equal(before.position[cut + 1:], after.position[cut + 1:])  # the test can fail


def test_time_feature_of_a_long_backtest_is_trainings_clipped_at_one() -> None:
    L, W = CFG.episode_length, CFG.window
    data = walk(W + 8 * L, seed=3)
    T = len(data) - W - 1
    # hold long 2.5 L bars, flat 3, short L - 2, then long to the end
    K = CFG.max_position
    targets = np.r_[np.full(5 * L // 2, K), np.zeros(3), np.full(L - 2, -K), np.full(T, K)][:T].astype(np.int64)
    backtest = TradingCore(1, dataclasses.replace(CFG, episode_length=T), data, span=(0, len(data)), time_scale=L)
    training = TradingCore(1, CFG, data, span=(0, W + L + 1))  # a training episode on the first bars
    for core in (backtest, training):
        core.rngs = [np.random.default_rng(0)]
        core.reset_rows(core.rows)
    long_obs, train_obs = [backtest.observe()[0]], [training.observe()[0]]
    for t, target in enumerate(targets):
        backtest.step(np.array([target + K]))
        long_obs.append(backtest.observe()[0])
        if t < L:
            training.step(np.array([target + K]))
            train_obs.append(training.observe()[0])
    long_obs, train_obs = np.array(long_obs), np.array(train_obs)
    assert np.array_equal(long_obs[: L + 1], train_obs)  # the whole observation, bit for bit, age <= L
    feature = long_obs[:, W + 2]
    ages = np.zeros(T + 1)
    for t in range(1, T + 1):
        same = targets[t - 1] != 0 and (t > 1 and np.sign(targets[t - 2]) == np.sign(targets[t - 1]))
        ages[t] = ages[t - 1] + 1 if same else float(targets[t - 1] != 0)
    assert ages.max() > 3 * L  # a position held far longer than an episode
    assert feature.max() == 1.0
    assert np.array_equal(feature, np.minimum(ages * np.float64(1.0 / L), 1.0).astype(np.float32))
    assert np.all(feature[ages >= L] == 1.0) and np.all(feature[ages < L] < 1.0)


def test_buy_and_hold_is_k_lots_from_the_first_decision_marked_at_the_end() -> None:
    data = walk(120, seed=4, drift=0.002)
    for config in (CFG, dataclasses.replace(CFG, max_position=3), dataclasses.replace(CFG, no_short=True)):
        result = backtest_history(sharp_agent(config), config, data, 10, 110)
        W, fee, slip = config.window, config.fee_bps / 1e4, config.slippage_bps / 1e4
        ref, fill, last = data.close[10], data.open[11] * (1 + slip), data.close[109]  # decides at bar 10
        expected = 100.0 * (last - fill * (1 + fee)) / ref  # K lots = the cash at ref; entry costs only
        hold = result.buy_and_hold
        assert hold.total_return_pct == pytest.approx(expected, rel=1e-10)
        assert hold.trades == 0 and hold.exposure_pct == 100.0 and hold.win_rate_pct is None
        assert hold.fees_paid == pytest.approx(10_000.0 * (data.open[11] / ref) * (fee * (1 + slip) + slip))


def test_trades_rebuilt_from_positions_match_the_ledger_fifo() -> None:
    config = dataclasses.replace(CFG, max_position=3)
    data = walk(200, seed=5)
    T = len(data) - config.window - 1
    env = TradingEnv(dataclasses.replace(config, episode_length=T), data=data)
    env.reset(seed=0)
    actions = np.random.default_rng(1).integers(0, config.num_actions, T)
    for a in actions:
        _, _, _, _, info = env.step(int(a))
    position = actions - config.max_position
    opens = data.open[config.window + 1:]
    ledger = env.core.ledger
    pnls, fees = closed_trades(position.astype(float), opens, float(ledger.units[0]), config)
    assert len(pnls) == info["episode"]["closed_trades"] and (pnls > 0).sum() == info["episode"]["winning_trades"]
    # the accounts close: cash + open lots = start + closed PnLs + the open lots' PnL net of their entry fees
    entries = _open_lot_entries(position, opens, config)
    units, fee, mark = ledger.units[0], config.fee_bps / 1e4, data.close[-1]
    open_pnl = sum(np.sign(position[-1]) * (mark - e) * units - fee * e * units for e in entries)
    assert ledger.equity[0] == pytest.approx(10_000.0 + pnls.sum() + open_pnl, rel=1e-12)
    trade, slip = np.diff(np.r_[0, position]), config.slippage_bps / 1e4
    paid = np.abs(trade) * units * opens * ((1 + slip * np.sign(trade)) * fee + slip)  # fee at the fill + slippage
    assert fees == pytest.approx(float(paid.sum()), rel=1e-12)


def _open_lot_entries(position: np.ndarray, opens: np.ndarray, config: EnvConfig) -> list[float]:
    """Entry fills of the lots open at the end, by a FIFO walk written apart from the engine's."""
    slip, lots, prev = config.slippage_bps / 1e4, [], 0
    for p, o in zip(position.tolist(), opens.tolist()):
        fill = o * (1 + slip * np.sign(p - prev))
        if p * prev <= 0:
            lots = [fill] * abs(p)
        elif abs(p) < abs(prev):
            lots = lots[abs(prev) - abs(p):]
        else:
            lots = lots + [fill] * (abs(p) - abs(prev))
        prev = p
    return lots


def test_a_bust_account_is_flattened_and_stays_flat() -> None:
    bars = 60
    close = 50.0 * 1.08 ** np.arange(bars)  # +8 % a bar: a short of the whole cash is bust within ~10 bars
    data = MarketData("up", np.datetime64("2024-01-01") + np.arange(bars).astype("timedelta64[D]"),
                      np.r_[50.0, close[:-1]], close, np.r_[50.0, close[:-1]], close, np.ones(bars), 86400.0)
    agent = sharp_agent(CFG)
    with torch.no_grad():  # always short: action 0
        agent.policy_head.weight.zero_()
        agent.policy_head.bias.copy_(torch.tensor([10.0, 0.0, 0.0]))
    result = backtest_history(agent, CFG, data)
    bust = int(np.argmax(result.equity <= 0))
    assert 0 < bust < result.bars - 2
    assert np.all(result.position[:bust] == -1) and np.all(result.position[bust:] == 0)
    assert np.all(result.equity[bust + 1:] == result.equity[bust + 1])
    assert result.agent.sharpe is None and result.agent.total_return_pct < -100.0


def test_simulated_backtest_is_seeded_chained_and_disjoint_from_training_seeds() -> None:
    agent, N, L = sharp_agent(CFG, seed=2), 3, CFG.episode_length
    a, b = backtest_simulated(agent, CFG, N, seed=5), backtest_simulated(agent, CFG, N, seed=5)
    assert np.array_equal(a.equity, b.equity) and np.array_equal(a.position, b.position)
    assert a.bars == N * L and a.start is None and a.end is None and a.time.tolist() == list(range(N * L + 1))
    assert not np.array_equal(a.equity, backtest_simulated(agent, CFG, N, seed=6).equity)
    seeds = evaluation_seeds(5, N)
    assert min(seeds) >= 2 ** 64 and len(set(seeds)) == N
    assert not set(seeds) & set(env_seeds(5, 0, 64)) and max(env_seeds(5, 0, 64)) < 2 ** 32
    # by hand: the same seeded episodes in the public vector env, the LSTM reset at each start
    env = VectorTradingEnv(N, CFG)
    obs, _ = env.reset(seed=seeds)
    state, starts, equity, actions = agent.initial_state(N), torch.ones(1, N), [], []
    with torch.no_grad():
        for t in range(L):
            logits, _, state = agent(torch.as_tensor(obs)[None], state, starts)
            starts = torch.zeros(1, N)
            act = logits[0].argmax(-1).numpy()
            actions.append(act)
            obs, _, _, _, info = env.step(act)
            if t < L - 1:  # the last step auto-resets the accounts: its equity is in the episode info
                equity.append(env.core.ledger.equity.copy())
    equity.append(info["episode"]["return"] + 10_000.0)
    assert np.array_equal(np.array(actions).T.ravel() - 1, a.position)
    # the chain: episode k's curve, scaled by the chained equity at its start
    at_start = a.equity[0:-1:L]  # [N]
    assert at_start[0] == 10_000.0
    expected = (np.array(equity) / 10_000.0).T * at_start[:, None]  # [N, L]
    assert np.allclose(a.equity[1:].reshape(N, L), expected, rtol=1e-12, atol=0)


def test_simulated_per_episode_returns_are_the_episodes_own_against_numpy() -> None:
    """Each episode's return, read off the chained curves independently, and its spread by numpy."""
    agent, N, L = sharp_agent(CFG, seed=2), 40, CFG.episode_length
    result = backtest_simulated(agent, CFG, N, seed=5)
    assert result.episodes == N and result.episode_length == L
    for curve, returns, metrics, spread in zip(
            (result.equity, result.buy_and_hold_equity),
            (result.episode_returns_pct, result.buy_and_hold_episode_returns_pct),
            (result.agent, result.buy_and_hold), result.per_episode()):
        assert curve.min() > 0  # no bust: each episode's return is its end over its start
        by_hand = 100.0 * (curve[L::L] / curve[0:-1:L] - 1.0)  # [N]
        assert returns.shape == (N,) and np.allclose(returns, by_hand, rtol=0, atol=1e-9)
        assert len(set(np.round(by_hand, 9))) > N // 2  # a spread, not one figure repeated
        # the chained total is their compound, not their sum or mean
        assert metrics.total_return_pct == pytest.approx(100.0 * (np.prod(1.0 + by_hand / 100.0) - 1.0), rel=1e-9)
        assert spread.mean_return_pct == pytest.approx(np.mean(by_hand), abs=1e-9)
        assert spread.std_return_pct == pytest.approx(np.std(by_hand, ddof=1), abs=1e-9)
        assert spread.median_return_pct == pytest.approx(np.median(by_hand), abs=1e-9)
        assert spread.p5_return_pct == pytest.approx(np.percentile(by_hand, 5), abs=1e-9)
        assert spread.p95_return_pct == pytest.approx(np.percentile(by_hand, 95), abs=1e-9)
        assert spread.episodes_with_gain_pct == pytest.approx(100.0 * np.mean(by_hand > 0), abs=1e-12)
        assert spread.p5_return_pct <= spread.median_return_pct <= spread.p95_return_pct
    history = backtest_history(agent, CFG, walk(120, seed=7))
    assert history.episodes is None and history.per_episode() is None and history.episode_returns_pct is None


def test_a_bust_episode_counts_minus_100_and_ends_the_chain() -> None:
    config = dataclasses.replace(CFG, fee_bps=1000.0)  # 10 % a fill: episodes 1 and 2 of these go bust
    result = backtest_simulated(sharp_agent(config, seed=2), config, 6, seed=5)
    returns, L = result.episode_returns_pct, config.episode_length
    assert returns[0] > -100.0 and returns[1] == returns[2] == -100.0 and (returns[3:] > -100.0).all()
    assert result.equity[L] == pytest.approx(10_000.0 * (1.0 + returns[0] / 100.0), rel=1e-12)
    assert np.all(result.equity[2 * L:] <= 0.0) and result.agent.total_return_pct == -100.0
    assert result.per_episode()[0].mean_return_pct == pytest.approx(np.mean(returns), abs=1e-12)


def test_backtests_leave_the_global_generators_alone() -> None:
    """The trainer may call them between updates: its bitwise resume must not notice."""
    agent, data = sharp_agent(CFG), walk(120, seed=7)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    backtest_history(agent, CFG, data, greedy=False, seed=3)
    backtest_simulated(agent, CFG, 2, seed=3, greedy=False)
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert np.array_equal(after[1], numpy_state[1]) and after[2:] == numpy_state[2:]


def test_policy_stepper_matches_the_agents_forward() -> None:
    agent = sharp_agent(CFG, seed=3, gain=1.0)
    obs = torch.randn(40, 4, CFG.obs_dim)
    with torch.no_grad():
        starts = torch.zeros(40, 4)
        starts[0] = 1.0
        logits, _, _ = agent(obs, agent.initial_state(4), starts)
        stepper = PolicyStepper(agent, 4, "cpu")
        stepped = torch.stack([stepper(obs[t].numpy()) for t in range(40)])
    assert torch.allclose(stepped, logits, rtol=0, atol=1e-5)


def test_policy_stepper_gives_agent_steps_logits_bit_for_bit() -> None:
    """The stepper holds the weights and skips the reset of a state that needs none: the same bits."""
    agent = sharp_agent(CFG, seed=5, gain=1.0)
    obs = torch.randn(30, 3, CFG.obs_dim)
    with torch.no_grad():
        stepper, state, starts = PolicyStepper(agent, 3, "cpu"), agent.initial_state(3), torch.zeros(3)
        for t in range(30):
            expected, _, state = agent.step(obs[t], state, starts)
            assert torch.equal(stepper(obs[t].numpy()), expected)
