"""Market sources behind one interface (episode bars, z, fills), and the observer's features."""
from __future__ import annotations

import numpy as np
import pytest

from envs.config import EnvConfig
from envs.data import MarketData
from envs.ledger import Ledger
from envs.markets.base import Market
from envs.markets.historical import HistoricalMarket
from envs.markets.simulated import SimulatedMarket
from envs.observation import Observer, normalise_paths, normalised_returns, observation_space


def random_walk_data(bars: int, seed: int) -> MarketData:
    rng = np.random.default_rng(seed)
    close = 50.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    o = np.r_[50.0, close[:-1]] * np.exp(0.001 * rng.standard_normal(bars))
    return MarketData(source="test", timestamps=np.datetime64("2024-01-01") + np.arange(bars).astype("timedelta64[D]"),
                      open=o, high=np.maximum(o, close), low=np.minimum(o, close), close=close,
                      volume=np.ones(bars), bar_seconds=86400.0)


CFG = EnvConfig(window=6, episode_length=10, max_position=2, ema_spans="none")
N = 5


def _market(kind: str, z: np.ndarray) -> Market:
    if kind == "sim":
        return SimulatedMarket(N, CFG, z)
    return HistoricalMarket(N, CFG, z, random_walk_data(200, seed=4))


@pytest.mark.parametrize("kind", ["sim", "hist"])
def test_episodes_bars_returns_and_fills(kind: str) -> None:
    W, B = CFG.window, CFG.window + CFG.episode_length + 1
    z = np.zeros((N, B - 1), np.float32)
    market = _market(kind, z)
    rngs = [np.random.default_rng(i) for i in range(N)]
    ref = market.begin(np.arange(N), slice(None), rngs)
    close, open_ = market.close, market.open
    assert close.shape == open_.shape == (N, B) and np.array_equal(ref, close[:, W])
    for i in range(N):  # z: the normalised returns of the episode's own closes
        want = normalised_returns(close[i], W) if kind == "sim" else \
            normalised_returns(market.data_close, W)[market.start[i] : market.start[i] + B - 1]
        np.testing.assert_allclose(z[i], want, rtol=1e-5, atol=1e-6)
    t = np.array([0, 3, 3, 9, 1])
    o, c = (x.copy() for x in market.next_bar(-1, t))  # out of step: gathers
    assert np.array_equal(o, open_[np.arange(N), W + 1 + t]) and np.array_equal(c, close[np.arange(N), W + 1 + t])
    same = np.full(N, 4)
    assert all(np.array_equal(a, b) for a, b in zip(market.next_bar(4, same), (open_[:, W + 5], close[:, W + 5])))
    rows = np.array([1, 3])
    before = close.copy()
    market.begin(rows, rows, rngs)  # only these envs start over
    kept = np.array([0, 2, 4])
    assert np.array_equal(market.close[kept], before[kept]) and not np.array_equal(market.close[rows], before[rows])


def test_sim_and_history_normalisation_agree() -> None:
    # per-episode running sums (simulated) vs the file's sliding sums (history): equal to rounding
    close = random_walk_data(300, seed=1).close
    W = 16
    r = np.diff(np.log(close))[:, None]
    got = normalise_paths(r, W, np.empty((len(r) + 1, 1)), np.empty_like(r), np.empty(r.shape, np.float32))
    np.testing.assert_allclose(got[:, 0], normalised_returns(close, W), rtol=1e-5, atol=1e-6)


def test_observer_features_and_in_step_slice() -> None:
    cfg = EnvConfig(window=4, episode_length=8, max_position=2, initial_cash=1000.0, fee_bps=0.0, slippage_bps=0.0,
                    ema_spans="none")
    n = 3
    observer, ledger = Observer(n, cfg), Ledger(n, cfg)
    observer.z[...] = np.arange(n * 12, dtype=np.float32).reshape(n, 12) / 100
    ledger.open(slice(None), np.array([100.0, 100.0, 100.0]))  # 5 units per lot
    ledger.step(np.array([4, 1, 2]), np.full(n, 100.0), np.array([110.0, 90.0, 100.0]))  # +2, -1, flat
    t = np.ones(n, np.int64)
    obs = observer.observe(ledger, t, 1)
    assert obs.dtype == np.float32 and obs.shape == (n, 7)
    assert np.array_equal(obs[:, :4], observer.z[:, 1:5])
    np.testing.assert_allclose(obs[:, 4], [1.0, -0.5, 0.0])
    np.testing.assert_allclose(obs[:, 5], [2 * 5 * 10 / 1000 * 10, 5 * 10 / 1000 * 10, 0.0], rtol=1e-6)
    np.testing.assert_allclose(obs[:, 6], [1 / 8, 1 / 8, 0.0])
    assert np.array_equal(obs, observer.observe(ledger, t, -1))  # gathered windows = the slice
    assert np.array_equal(obs[[2, 0]], observer.observe(ledger, t, -1, np.array([2, 0])))
    assert all(o in observation_space(cfg) for o in obs)
