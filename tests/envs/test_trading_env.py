"""TradingEnv: gymnasium API, hand-checked accounting, no look-ahead, no free edge, state."""
from __future__ import annotations

import copy
import pickle

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs import EnvConfig, TradingEnv
from envs.data import MarketData
from envs.ledger import Ledger


def market_data(open_, close) -> MarketData:
    """MarketData built by hand (daily bars; high/low bracket open and close)."""
    o, c = np.asarray(open_, float), np.asarray(close, float)
    return MarketData(
        source="test",
        timestamps=np.datetime64("2024-01-01") + np.arange(len(c)).astype("timedelta64[D]"),
        open=o, high=np.maximum(o, c) * 1.01, low=np.minimum(o, c) * 0.99, close=c,
        volume=np.full(len(c), 1000.0), bar_seconds=86400.0,
    )


def random_walk_data(bars: int, seed: int = 0, start: float = 1.05) -> MarketData:
    rng = np.random.default_rng(seed)
    close = start * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[start, close[:-1]] * np.exp(0.001 * rng.standard_normal(bars))
    return market_data(open_, close)


@pytest.mark.parametrize("kwargs", [{"market": "regime", "max_position": 2}, {"market": "mixed", "no_short": True}])
def test_check_env_simulated(kwargs) -> None:
    check_env(TradingEnv(**kwargs), skip_render_check=True)


def test_check_env_historical() -> None:
    check_env(TradingEnv(data=random_walk_data(400), window=16, episode_length=64), skip_render_check=True)


def test_spaces_and_obs() -> None:
    env = TradingEnv(EnvConfig(window=16, max_position=3), market="gbm")
    assert env.action_space == gymnasium.spaces.Discrete(7)
    assert env.observation_space.shape == (20,) and env.observation_space.dtype == np.float32  # 16 + 3 + EMA(500)
    obs, info = env.reset(seed=1)
    assert obs.dtype == np.float32 and obs.shape == (20,) and info == {}
    assert obs[16:19].tolist() == [0.0, 0.0, 0.0]  # flat, no PnL, no time in position; then the EMA deviation
    assert TradingEnv(no_short=True, max_position=2).action_space.n == 3


def test_data_too_short_raises_fix_it_message() -> None:
    with pytest.raises(ValueError, match="window \\+ episode_length \\+ 1 = 41"):
        TradingEnv(data=random_walk_data(40), window=8, episode_length=32)


# Hand-checked episode: K=2, W=2, L=5, units = 1000 / (2 * close[2]=100) = 5 per lot.
OPEN = [100, 100, 101, 101, 103, 104, 104.5, 100]
CLOSE = [100, 101, 100, 102, 104, 103, 101, 105]


def test_accounting_by_hand() -> None:
    cfg = EnvConfig(window=2, episode_length=5, max_position=2, fee_bps=10.0, slippage_bps=20.0,
                    initial_cash=1000.0, reward_scale=100.0)
    env = TradingEnv(cfg, data=market_data(OPEN, CLOSE))
    obs, _ = env.reset(seed=0)
    # targets +2, +1, -1, 0, -2 -> actions target + K
    rewards, infos = [], []
    # step 0: buy 2 lots at open[3]=101*1.002=101.202, fee 0.001*101.202*5=0.50601 each
    obs, r, term, trunc, info = env.step(4)
    rewards.append(r)
    assert obs[2] == pytest.approx(1.0)  # position / K
    assert obs[3] == pytest.approx((102 - 101.202) * 10 / 1000 * 10, rel=1e-5)  # unrealised PnL * 10 / cash
    assert obs[4] == pytest.approx(1 / 5)
    equity0 = 1000 - 2 * 5 * 101.202 - 2 * 0.50601 + 10 * 102
    assert r == pytest.approx((equity0 - 1000) / 1000 * 100)
    # step 1: sell 1 at 103*0.998=102.794: FIFO closes lot 1, PnL (102.794-101.202)*5 - 0.50601 - 0.51397 > 0
    # step 2: sell 2 at 104*0.998=103.792: closes lot 2 (win), opens 1 short at 103.792 (fee 0.51896)
    # step 3: buy 1 at 104.5*1.002=104.709: closes the short, PnL -(104.709-103.792)*5 - 0.51896 - 0.523545 < 0
    # step 4: sell 2 at 100*0.998=99.8 (fee 0.499 each): 2 short lots left open, marked at close 105
    for action in (3, 1, 2, 0):
        obs, r, term, trunc, info = env.step(action)
        rewards.append(r)
        infos.append(info)
    assert [bool(i) for i in infos] == [False, False, False, True] and not term and trunc
    trades = [
        (102.794 - 101.202) * 5 - 0.50601 - 0.51397,
        (103.792 - 101.202) * 5 - 0.50601 - 0.51896,
        -(104.709 - 103.792) * 5 - 0.51896 - 0.523545,
    ]
    dollar_return = sum(trades) - (105 - 99.8) * 10 - 2 * 0.499
    assert dollar_return == pytest.approx(-39.760455, abs=1e-9)
    ep = info["episode"]
    assert set(ep) == {"reward", "return", "closed_trades", "winning_trades", "open_lots", "steps"}
    assert ep["return"] == pytest.approx(dollar_return, abs=1e-9)
    assert (ep["closed_trades"], ep["winning_trades"], ep["open_lots"], ep["steps"]) == (3, 2, 2, 5)
    assert ep["reward"] == pytest.approx(sum(rewards), abs=1e-12)
    assert sum(rewards) * 1000.0 / 100.0 == pytest.approx(dollar_return, abs=1e-9)  # the identity
    assert obs[2] == pytest.approx(-1.0)
    assert obs[3] == pytest.approx(-(105 - 99.8) * 10 / 1000 * 10, rel=1e-5)
    assert obs[4] == pytest.approx(1 / 5)  # the position just changed size and sign
    with pytest.raises(RuntimeError, match="reset"):
        env.step(2)


def test_no_short_hold_and_partial_close() -> None:
    cfg = EnvConfig(window=2, episode_length=5, max_position=2, no_short=True, fee_bps=0.0, slippage_bps=0.0,
                    initial_cash=1000.0, reward_scale=1.0)
    env = TradingEnv(cfg, data=market_data(OPEN, CLOSE))
    env.reset(seed=0)
    for a in (1, 2, 2, 1, 0):  # targets 1, 2, 2, 1, 0: lot A @101, lot B @103, close A @104.5, close B @100
        *_, info = env.step(a)
    ep = info["episode"]
    assert ep["return"] == pytest.approx((104.5 - 101) * 5 + (100 - 103) * 5)
    assert (ep["closed_trades"], ep["winning_trades"], ep["open_lots"]) == (2, 1, 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_reward_sum_identity_random_policy(seed: int) -> None:
    env = TradingEnv(market="mixed", max_position=3, fee_bps=5.0, slippage_bps=3.0, reward_scale=7.0)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, info = env.step(int(rng.integers(7)))
            total += r
            done = term or trunc
        ep = info["episode"]
        assert total * env.config.initial_cash / 7.0 == pytest.approx(ep["return"], rel=1e-9, abs=1e-6)
        assert ep["steps"] == env.config.episode_length and 0 <= ep["winning_trades"] <= ep["closed_trades"]
        env.reset()


def test_no_look_ahead() -> None:
    W, L = 8, 20
    base = random_walk_data(W + L + 1, seed=3)  # exactly one episode: start is bar 0
    actions = np.random.default_rng(0).integers(0, 3, L)

    def rollout(data: MarketData):
        env = TradingEnv(data=data, window=W, episode_length=L)
        obs = [env.reset(seed=0)[0]]
        rewards = []
        for a in actions:
            o, r, *_ = env.step(int(a))
            obs.append(o)
            rewards.append(r)
        return np.array(obs), np.array(rewards)

    obs0, rew0 = rollout(base)
    rng = np.random.default_rng(1)
    for k in range(L):  # observation k is taken at bar W+k; change every later bar
        later = slice(W + k + 1, None)
        o, c = base.open.copy(), base.close.copy()
        o[later] *= np.exp(0.05 * rng.standard_normal(len(o[later])))
        c[later] = rng.permutation(c[later]) * 1.1
        obs, rew = rollout(market_data(o, c))
        np.testing.assert_array_equal(obs[: k + 1], obs0[: k + 1])
        np.testing.assert_array_equal(rew[:k], rew0[:k])  # rewards before step k end by bar W+k
        assert not np.array_equal(obs[k + 1 :], obs0[k + 1 :])


def test_scale_free_observation() -> None:
    a, b = random_walk_data(100, seed=5, start=1.05), random_walk_data(100, seed=5, start=1000.0)
    ea, eb = (TradingEnv(data=d, window=16, episode_length=32) for d in (a, b))
    oa, ob = ea.reset(seed=2)[0], eb.reset(seed=2)[0]
    np.testing.assert_allclose(oa, ob, atol=1e-4)
    for act in (2, 0, 1, 2):
        np.testing.assert_allclose(ea.step(act)[0], eb.step(act)[0], atol=1e-4)


def test_random_walk_has_no_free_edge() -> None:
    n, L = 512, 64
    cases = [("random", None), ("long", 2), ("short", 0), ("flip", -1)]
    for fee in (1.0, 0.0):
        venv = envs.VectorTradingEnv(n, market="gbm", episode_length=L, fee_bps=fee, slippage_bps=fee)
        for k, (name, fixed) in enumerate(cases):
            venv.reset(seed=1000 * k + int(fee))
            rng = np.random.default_rng(k)
            for t in range(L):
                if fixed is None:
                    a = rng.integers(0, 3, n)
                elif fixed == -1:
                    a = np.full(n, 2 * (t % 2))
                else:
                    a = np.full(n, fixed)
                *_, info = venv.step(a)
            ret = info["episode"]["return"]
            assert info["_episode"].all()
            mean, se = ret.mean(), ret.std() / np.sqrt(n)
            assert mean < 3 * se, (name, fee, mean, se)  # never a significant profit
            if fee == 0.0:
                assert abs(mean) < 4 * se, (name, mean, se)  # gross: zero mean
            elif name in ("random", "flip"):
                assert mean < 0.0, (name, mean)  # costs show


def test_regime_trend_following_has_an_edge() -> None:
    n, W = 256, 32
    venv = envs.VectorTradingEnv(n, market="regime", episode_length=128)
    obs, _ = venv.reset(seed=7)
    for _ in range(128):
        obs, *_, info = venv.step(1 + np.sign(obs[:, :W].sum(axis=1)).astype(int))
    ret = info["episode"]["return"]
    assert ret.mean() > 4 * ret.std() / np.sqrt(n)


def test_get_set_state_round_trip() -> None:
    env = TradingEnv(market="mixed", max_position=2, episode_length=16)
    env.reset(seed=3)
    acts = np.random.default_rng(0).integers(0, 5, 60)

    def run(e, actions):
        out = []
        for a in actions:
            o, r, te, tr, info = e.step(int(a))
            out.append((o, r, te, tr, info))
            if te or tr:
                out.append(e.reset()[0])
        return out

    run(env, acts[:10])
    state = pickle.loads(pickle.dumps(env.get_state()))
    want = run(env, acts[10:])
    other = TradingEnv(market="mixed", max_position=2, episode_length=16)
    other.set_state(copy.deepcopy(state))
    got = run(other, acts[10:])
    env.set_state(state)
    again = run(env, acts[10:])
    for a, b, c in zip(want, got, again):
        for x, y, z in zip(a, b, c) if isinstance(a, tuple) else [(a, b, c)]:
            if isinstance(x, np.ndarray):
                assert np.array_equal(x, y) and np.array_equal(x, z)
            else:
                assert x == y == z


def test_gymnasium_make() -> None:
    env = gymnasium.make("ppo_lstm_trader/Regime-v0", max_position=2)
    assert env.unwrapped.config.market == "regime" and env.action_space.n == 5
    obs, _ = env.reset(seed=0)
    assert obs in env.observation_space
    assert gymnasium.make(envs.ENV_ID).unwrapped.config.market == "mixed"
    check_env(gymnasium.make("ppo_lstm_trader/GBM-v0").unwrapped, skip_render_check=True)


def test_one_lot_step_matches_general_fifo_step() -> None:
    # K=1 has its own lean branch in the ledger; it must give the general FIFO path's results bit for bit
    cfg = EnvConfig(market="mixed", episode_length=40, fee_bps=5.0, slippage_bps=3.0)
    fast, general = TradingEnv(cfg), TradingEnv(cfg)
    general.core.ledger = Ledger(1, cfg, one_lot=False)  # force the any-K path
    rng = np.random.default_rng(5)
    for episode in range(4):
        a, _ = fast.reset(seed=episode)
        b, _ = general.reset(seed=episode)
        np.testing.assert_array_equal(a, b)
        done = False
        while not done:
            action = int(rng.integers(3))
            a, ra, ta, ua, ia = fast.step(action)
            b, rb, tb, ub, ib = general.step(action)
            np.testing.assert_array_equal(a, b)
            assert ra == rb and (ta, ua) == (tb, ub)
            done = ta or ua
        assert ia["episode"] == ib["episode"]


def test_reseed_restarts_the_variate_pool() -> None:
    # episodes come from per-env pools of pre-drawn variates: reset(seed=s) must start afresh
    env, fresh = TradingEnv(), TradingEnv()
    first, _ = env.reset(seed=12)
    for _ in range(3):
        env.reset()
    again, _ = env.reset(seed=12)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, fresh.reset(seed=12)[0])
    np.testing.assert_array_equal(env.reset()[0], fresh.reset()[0])


def test_state_without_pools_still_loads() -> None:
    # states saved before the variate pools (no "pools"/"z" keys) restore and keep stepping
    env = TradingEnv(market="garch", episode_length=16)
    env.reset(seed=4)
    env.step(2)
    state = env.get_state()
    obs = env.core.observe()[0]
    del state["pools"], state["z"]
    other = TradingEnv(market="garch", episode_length=16)
    other.set_state(state)
    np.testing.assert_allclose(other.core.observe()[0], obs, atol=1e-5)
    for _ in range(40):
        _, _, term, trunc, _ = other.step(1)
        if term or trunc:
            other.reset()


def test_history_normalises_once_over_the_file_causally() -> None:
    # on --data the RMS window runs over the file's preceding bars (the file's first W bars
    # share its first full window); permuting any later bar never changes an observation
    W, L, bars = 8, 12, 90
    base = random_walk_data(bars, seed=7)
    r = np.diff(np.log(base.close))
    rms = np.array([np.sqrt(np.mean(r[max(b, W) - W : max(b, W)] ** 2)) for b in range(1, bars)])
    want = np.clip((r / rms).astype(np.float32), -5, 5)  # want[b-1]: bar b
    env = TradingEnv(data=base, window=W, episode_length=L)
    actions = np.random.default_rng(2).integers(0, 3, L)
    starts = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        start = int(env.core.start[0])
        starts.append(start)
        for k, a in enumerate(actions):
            bar = start + W + k  # the observation's bar in the file
            np.testing.assert_allclose(obs[:W], want[bar - W : bar], rtol=2e-6, atol=1e-6)
            later = slice(bar + 1, None)
            o, c = base.open.copy(), base.close.copy()
            o[later] *= 1.3
            c[later] = np.random.default_rng(k).permutation(c[later]) * 0.7
            moved = TradingEnv(data=market_data(o, c), window=W, episode_length=L)
            got, _ = moved.reset(seed=seed)  # the same start: it depends on the seed and the length only
            for b in actions[:k]:
                got, *_ = moved.step(int(b))
            np.testing.assert_array_equal(got, obs)
            obs, *_ = env.step(int(a))
    assert max(starts) > W  # episodes whose first windows reach into the file's preceding bars
