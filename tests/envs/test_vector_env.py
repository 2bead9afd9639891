"""VectorTradingEnv: bitwise equal to N single envs (with auto-resets), state round trip, make_vec."""
from __future__ import annotations

import pickle

import gymnasium
import numpy as np
import pytest

import envs
from envs import EnvConfig, TradingEnv, VectorTradingEnv
from envs.data import MarketData

EPISODE_KEYS = ("reward", "return", "closed_trades", "winning_trades", "open_lots", "steps")


def market_data(close: np.ndarray, seed: int = 0) -> MarketData:
    rng = np.random.default_rng(seed)
    o = np.r_[close[0], close[:-1]] * np.exp(0.002 * rng.standard_normal(len(close)))
    return MarketData(
        source="test", timestamps=np.datetime64("2024-01-01") + np.arange(len(close)).astype("timedelta64[h]"),
        open=o, high=np.maximum(o, close) * 1.001, low=np.minimum(o, close) * 0.999, close=close,
        volume=np.ones(len(close)), bar_seconds=3600.0,
    )


def crashy_data(bars: int = 400) -> MarketData:
    """A random walk with a few x3 spikes and /3 crashes, so short and long positions can bust."""
    rng = np.random.default_rng(11)
    r = 0.01 * rng.standard_normal(bars)
    r[rng.choice(bars, 12, replace=False)] = np.log(3.0) * rng.choice([-1.0, 1.0], 12)
    return market_data(1000.0 * np.exp(np.cumsum(r)))


CASES = {
    "mixed-K1": (EnvConfig(window=8, episode_length=12), None),
    "regime-K2": (EnvConfig(market="regime", window=8, episode_length=10, max_position=2), None),
    "garch-K2-noshort": (EnvConfig(market="garch", window=6, episode_length=9, max_position=2, no_short=True), None),
    "hist-K2": (EnvConfig(window=8, episode_length=15, max_position=2), crashy_data()),
    "hist-K3-noshort": (EnvConfig(window=5, episode_length=7, max_position=3, no_short=True), crashy_data()),
}


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("case", list(CASES))
def test_vector_equals_single_bitwise(case: str) -> None:
    cfg, data = CASES[case]
    n, seed, steps = 5, 42, 4 * cfg.episode_length + 3
    venv = VectorTradingEnv(n, cfg, data)
    singles = [TradingEnv(cfg, data) for _ in range(n)]
    vobs, vinfo = venv.reset(seed=seed)
    assert vinfo == {} and vobs.shape == (n, cfg.obs_dim) and vobs.dtype == np.float32
    for i, env in enumerate(singles):
        assert _same(env.reset(seed=seed + i)[0], vobs[i])
    rng = np.random.default_rng(0)
    finished = 0
    for _ in range(steps):
        actions = rng.integers(0, cfg.num_actions, n)
        vobs, vrew, vterm, vtrunc, vinfo = venv.step(actions)
        assert vrew.dtype == np.float64 and vterm.dtype == bool and vtrunc.dtype == bool
        done = vterm | vtrunc
        assert ("episode" in vinfo) == bool(done.any())
        for i, env in enumerate(singles):
            obs, rew, term, trunc, info = env.step(int(actions[i]))
            assert _same(rew, vrew[i]) and term == vterm[i] and trunc == vtrunc[i]
            if term or trunc:
                finished += 1
                assert vinfo["_final_obs"][i] and vinfo["_episode"][i]
                assert _same(obs, vinfo["final_obs"][i])
                for key in EPISODE_KEYS:
                    assert _same(info["episode"][key], vinfo["episode"][key][i]), key
                obs, _ = env.reset()  # no seed: continues its RNG, like the autoreset
            else:
                assert info == {}
                if "episode" in vinfo:
                    assert not vinfo["_episode"][i] and not vinfo["_final_obs"][i]
            assert _same(obs, vobs[i])
    assert finished >= 3 * n


def test_bust_terminates_and_autoresets() -> None:
    # a x3 jump against a full short position loses 2x the cash: equity <= 0 -> terminated
    close = np.r_[np.full(10, 100.0), 300.0, np.full(10, 300.0)]
    data = market_data(close)
    cfg = EnvConfig(window=3, episode_length=17, fee_bps=0.0, slippage_bps=0.0)
    venv = VectorTradingEnv(2, cfg, data)
    venv.reset(seed=0)
    single = TradingEnv(cfg, data)
    single.reset(seed=0)
    busted = False
    for _ in range(17):
        obs, rew, term, trunc, info = venv.step(np.array([0, 0]))
        s_obs, s_rew, s_term, s_trunc, s_info = single.step(0)
        assert _same(s_rew, rew[0]) and s_term == term[0] and s_trunc == trunc[0]
        if term[0]:
            busted = True
            assert not trunc[0] and info["episode"]["return"][0] <= -cfg.initial_cash
            assert s_info["episode"]["return"] == info["episode"]["return"][0]
            single.reset()
            assert _same(single.step(1)[0], venv.step(np.array([1, 1]))[0][0])
            break
        if s_term or s_trunc:
            single.reset()
    assert busted


def test_reset_seed_conventions() -> None:
    venv = VectorTradingEnv(3, market="gbm")
    a, _ = venv.reset(seed=5)
    b, _ = venv.reset(seed=[5, 6, 7])
    assert _same(a, b)
    c, _ = venv.reset()  # continues every env's RNG
    assert not _same(a, c)
    single = TradingEnv(market="gbm")
    single.reset(seed=6)
    assert _same(single.reset()[0], c[1])
    with pytest.raises(ValueError, match="actions"):
        venv.step(np.array([0, 1, 3]))


def test_get_set_state_round_trip_vector() -> None:
    cfg = EnvConfig(market="mixed", window=8, episode_length=10, max_position=2)
    venv = VectorTradingEnv(6, cfg)
    venv.reset(seed=9)
    acts = np.random.default_rng(1).integers(0, 5, (40, 6))
    for a in acts[:7]:
        venv.step(a)
    state = pickle.loads(pickle.dumps(venv.get_state()))

    def run(env):
        out = []
        for a in acts[7:]:
            obs, rew, term, trunc, info = env.step(a)
            out.append((obs, rew, term, trunc, info.get("final_obs"), info.get("episode", {}).get("return")))
        return out

    want = run(venv)
    other = VectorTradingEnv(6, cfg)
    other.set_state(state)
    got = run(other)
    for a, b in zip(want, got):
        assert all(_same(x, y) for x, y in zip(a, b) if x is not None)
    with pytest.raises(ValueError, match="different"):
        VectorTradingEnv(5, cfg).set_state(state)


def test_spaces_and_metadata() -> None:
    venv = VectorTradingEnv(4, max_position=2, window=16)
    assert venv.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert venv.single_action_space == gymnasium.spaces.Discrete(5)
    assert venv.single_observation_space.shape == (20,)  # 16 returns + 3 + the default EMA(500) deviation
    assert venv.observation_space.shape == (4, 20)
    assert venv.action_space.shape == (4,)
    obs, _ = venv.reset(seed=0)
    assert obs in venv.observation_space
    obs, *_ = venv.step(venv.action_space.sample())
    assert obs in venv.observation_space


def test_make_vec() -> None:
    venv = gymnasium.make_vec("ppo_lstm_trader/Regime-v0", num_envs=8, vectorization_mode="vector_entry_point")
    assert isinstance(venv, VectorTradingEnv) and venv.num_envs == 8 and venv.config.market == "regime"
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (8, 36)
    venv = gymnasium.make_vec(envs.ENV_ID, num_envs=2, vectorization_mode="vector_entry_point", max_position=3)
    assert venv.single_action_space.n == 7


def test_prices_untouched_across_autoresets() -> None:
    # always long 1x, no costs: each episode returns initial_cash * (close[W+L] / close[W] - 1)
    cfg = EnvConfig(market="gbm", window=4, episode_length=6, fee_bps=0.0, slippage_bps=0.0)
    venv = VectorTradingEnv(3, cfg)
    venv.reset(seed=0)
    for _ in range(3):
        close = venv.core.close.copy()  # this episode's bars
        for _ in range(6):
            *_, info = venv.step(np.full(3, 2))
        want = cfg.initial_cash * (close[:, -1] / close[:, 4] - 1.0)
        np.testing.assert_allclose(info["episode"]["return"], want, rtol=1e-9)


def _compare_run(venv, singles, n, steps, num_actions, seed=0) -> int:
    rng = np.random.default_rng(seed)
    finished = 0
    for _ in range(steps):
        actions = rng.integers(0, num_actions, n)
        vobs, vrew, vterm, vtrunc, vinfo = venv.step(actions)
        for i, env in enumerate(singles):
            obs, rew, term, trunc, info = env.step(int(actions[i]))
            assert _same(rew, vrew[i]) and term == vterm[i] and trunc == vtrunc[i]
            if term or trunc:
                finished += 1
                assert _same(obs, vinfo["final_obs"][i])
                for key in EPISODE_KEYS:
                    assert _same(info["episode"][key], vinfo["episode"][key][i]), key
                obs, _ = env.reset()
            assert _same(obs, vobs[i])
    return finished


def _check_out_of_step(cfg: EnvConfig, data, seed: int, warmup: int, shifted: tuple[int, ...], episodes: int,
                       action_seed: int, min_finished: int) -> None:
    """Move some envs ahead (the core then gathers instead of reading rows) and check the
    vector env still matches single envs bit for bit, across auto-resets."""
    n = 4
    venv = VectorTradingEnv(n, cfg, data)
    singles = [TradingEnv(cfg, data) for _ in range(n)]
    venv.reset(seed=seed)
    for i, env in enumerate(singles):
        env.reset(seed=seed + i)
    assert _compare_run(venv, singles, n, warmup, cfg.num_actions) == 0
    vstate = venv.get_state()
    for i in shifted:  # move env i ahead by i steps
        vstate["t"][i] += i
        single = singles[i].get_state()
        single["t"][0] += i
        singles[i].set_state(single)
    venv.set_state(vstate)
    assert venv.core._t0 == -1
    finished = _compare_run(venv, singles, n, episodes * cfg.episode_length, cfg.num_actions, seed=action_seed)
    assert finished >= min_finished


@pytest.mark.parametrize("max_position", [1, 2])
def test_out_of_step_envs_equal_single_bitwise(max_position: int) -> None:
    # simulated: partial auto-resets refill only some envs' pools
    cfg = EnvConfig(market="mixed", window=6, episode_length=9, max_position=max_position)
    _check_out_of_step(cfg, None, seed=3, warmup=4, shifted=(1, 2), episodes=12, action_seed=1, min_finished=40)


def test_state_round_trip_k1_across_pool_refills() -> None:
    # K=1 (the one-lot step) with short episodes: the variate pools refill several times
    cfg = EnvConfig(market="mixed", window=4, episode_length=5)
    venv = VectorTradingEnv(5, cfg)
    venv.reset(seed=21)
    acts = np.random.default_rng(4).integers(0, 3, (140, 5))
    for a in acts[:23]:
        venv.step(a)
    state = pickle.loads(pickle.dumps(venv.get_state()))
    want = [venv.step(a) for a in acts[23:]]
    other = VectorTradingEnv(5, cfg)
    other.set_state(state)
    got = [other.step(a) for a in acts[23:]]
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(want, got):
        assert _same(o1, o2) and _same(r1, r2) and _same(te1, te2) and _same(tr1, tr2)
        assert i1.keys() == i2.keys()
        if "episode" in i1:
            assert _same(i1["final_obs"], i2["final_obs"])
            for key in EPISODE_KEYS:
                assert _same(i1["episode"][key], i2["episode"][key])


def test_out_of_step_envs_equal_single_bitwise_on_history() -> None:
    # historical episodes are start offsets into shared arrays: gathers out of step must match too
    cfg, data = CASES["hist-K2"]
    _check_out_of_step(cfg, data, seed=5, warmup=3, shifted=(1, 3), episodes=10, action_seed=2, min_finished=32)


def test_state_round_trip_on_history_and_other_data_refused() -> None:
    cfg, data = CASES["hist-K3-noshort"]
    venv = VectorTradingEnv(5, cfg, data)
    venv.reset(seed=2)
    acts = np.random.default_rng(6).integers(0, cfg.num_actions, (60, 5))
    for a in acts[:11]:
        venv.step(a)
    state = pickle.loads(pickle.dumps(venv.get_state()))
    assert "start" in state and "z" not in state  # offsets, not per-episode windows
    np.testing.assert_array_equal(state["close"], venv.core.close)
    want = [venv.step(a) for a in acts[11:]]
    for st in (state, {k: v for k, v in state.items() if k not in ("start", "data")}):  # old states: located
        other = VectorTradingEnv(5, cfg, data)
        other.set_state(pickle.loads(pickle.dumps(st)))
        got = [other.step(a) for a in acts[11:]]
        for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(want, got):
            assert _same(o1, o2) and _same(r1, r2) and _same(te1, te2) and _same(tr1, tr2)
            if "episode" in i1:
                assert _same(i1["final_obs"], i2["final_obs"])
                for key in EPISODE_KEYS:
                    assert _same(i1["episode"][key], i2["episode"][key])
    shifted = market_data(data.close * 1.5)
    with pytest.raises(ValueError, match="different data"):
        VectorTradingEnv(5, cfg, shifted).set_state(state)
    old = {k: v for k, v in state.items() if k not in ("start", "data")}
    with pytest.raises(ValueError, match="other data"):
        VectorTradingEnv(5, cfg, shifted).set_state(old)
    with pytest.raises(ValueError, match="historical"):
        VectorTradingEnv(5, cfg).set_state(state)


def test_history_starts_pool_refills_equal_single_and_round_trip() -> None:
    # episode starts come from per-env pools of uniforms: across refills, reseeds and a
    # state round trip the vector env still equals the single envs bit for bit
    cfg, data = EnvConfig(window=3, episode_length=2), crashy_data()
    n = 3
    venv = VectorTradingEnv(n, cfg, data)
    singles = [TradingEnv(cfg, data) for _ in range(n)]
    venv.reset(seed=8)
    for i, env in enumerate(singles):
        env.reset(seed=8 + i)
    assert _compare_run(venv, singles, n, 150, cfg.num_actions) == 75 * n  # > 64 starts each: refills
    state = pickle.loads(pickle.dumps(venv.get_state()))
    other = VectorTradingEnv(n, cfg, data)
    other.set_state(state)
    acts = np.random.default_rng(3).integers(0, cfg.num_actions, (90, n))
    for a in acts:
        for x, y in zip(venv.step(a)[:4], other.step(a)[:4]):
            assert _same(x, y)
    first, _ = venv.reset(seed=8)
    again, _ = VectorTradingEnv(n, cfg, data).reset(seed=8)
    assert _same(first, again)
