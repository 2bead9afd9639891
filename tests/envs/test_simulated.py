"""Simulated markets: seeded, batch == separate calls, OHLC consistency, sensible dynamics."""
from __future__ import annotations

import numpy as np
import pytest

from envs.markets.processes import FIELDS, PROCESSES, simulate

MARKETS = PROCESSES + ("mixed",)


def _rngs(seeds) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in seeds]


@pytest.mark.parametrize("market", MARKETS)
def test_reproducible_from_seed(market: str) -> None:
    a = simulate(market, _rngs(range(8)), 200)
    b = simulate(market, _rngs(range(8)), 200)
    c = simulate(market, _rngs(range(100, 108)), 200)
    assert set(a) == set(FIELDS)
    for f in FIELDS:
        assert a[f].shape == (8, 200) and a[f].dtype == np.float64
        np.testing.assert_array_equal(a[f], b[f])
    assert not np.array_equal(a["close"], c["close"])


@pytest.mark.parametrize("market", MARKETS)
def test_batch_equals_separate_calls(market: str) -> None:
    seeds = range(40)
    batch = simulate(market, _rngs(seeds), 150)
    for i, s in enumerate(seeds):
        one = simulate(market, _rngs([s]), 150)
        for f in FIELDS:
            assert np.array_equal(batch[f][i], one[f][0]), (market, f, i)


@pytest.mark.parametrize("market", MARKETS)
def test_ohlc_consistent_and_positive(market: str) -> None:
    p = simulate(market, _rngs(range(64)), 300)
    assert all(np.all(np.isfinite(p[f])) and np.all(p[f] > 0) for f in FIELDS)
    assert np.all(p["high"] >= np.maximum(p["open"], p["close"]))
    assert np.all(p["low"] <= np.minimum(p["open"], p["close"]))
    np.testing.assert_array_equal(p["open"][:, 1:], p["close"][:, :-1])  # bars open at the previous close
    vol = np.diff(np.log(p["close"]), axis=1).std(axis=1)
    assert 0.003 < np.median(vol) < 0.03  # per-bar vol ~0.5-2 %


def test_ohlcv_false_gives_same_open_close() -> None:
    full = simulate("mixed", _rngs(range(16)), 100)
    lean = simulate("mixed", _rngs(range(16)), 100, ohlcv=False)
    assert set(lean) == {"open", "close"}
    np.testing.assert_array_equal(full["close"], lean["close"])
    np.testing.assert_array_equal(full["open"], lean["open"])


def test_mixed_covers_price_scales() -> None:
    start = simulate("mixed", _rngs(range(300)), 2)["close"][:, 0]
    assert start.min() < 2.0 and start.max() > 500.0


def _block_autocorr(market: str, block: int = 16) -> float:
    close = simulate(market, _rngs(range(400)), 513)["close"]
    r = np.diff(np.log(close), axis=1)  # [400, 512]
    blocks = r.reshape(len(r), -1, block).sum(axis=2)
    x, y = blocks[:, :-1].ravel(), blocks[:, 1:].ravel()
    return float(np.corrcoef(x, y)[0, 1])


def test_regime_trends_persist_and_gbm_does_not() -> None:
    # 0.2 %/bar drift kept with prob 0.98 per bar: consecutive 16-bar returns are correlated
    assert _block_autocorr("regime") > 0.15
    assert abs(_block_autocorr("gbm")) < 0.06


def test_gbm_is_a_martingale() -> None:
    close = simulate("gbm", _rngs(range(2000)), 101)["close"]
    growth = close[:, -1] / close[:, 0] - 1.0
    assert abs(growth.mean()) < 4 * growth.std() / np.sqrt(len(growth))


def test_unknown_market_raises() -> None:
    with pytest.raises(ValueError, match="unknown market"):
        simulate("brownian", _rngs([0]), 10)


@pytest.mark.parametrize("length", [7, 161, 600])
def test_ou_and_garch_closed_forms_match_their_recursions(length: int) -> None:
    # the OU/GARCH recursions are solved along time in closed form (blocks of _BLOCK bars)
    from envs.markets import processes as sim

    rng = np.random.default_rng(length)
    m = 30
    z, u = rng.standard_normal((m, length)), rng.random((8, m))
    p = sim._params(sim.GARCH, u, True)
    r, vol = sim._log_returns(sim.GARCH, p, z, None, None)
    omega = (1.0 - p["alpha"] - p["beta"]) * p["sigma"] ** 2
    var, eps = np.empty((length, m)), np.empty((length, m))
    var[0] = p["sigma"] ** 2
    eps[0] = np.sqrt(var[0]) * z[:, 0]
    for t in range(1, length):
        var[t] = omega + p["alpha"] * eps[t - 1] ** 2 + p["beta"] * var[t - 1]
        eps[t] = np.sqrt(var[t]) * z[:, t]
    np.testing.assert_allclose(vol, np.sqrt(var).T, rtol=1e-12)
    np.testing.assert_allclose(r, (eps - 0.5 * var).T, rtol=1e-10, atol=1e-15)
    p = sim._params(sim.OU, u, True)
    r, _ = sim._log_returns(sim.OU, p, z, None, None)
    dev = np.zeros((length + 1, m))
    for t in range(length):
        dev[t + 1] = (1.0 - p["theta"]) * dev[t] + p["sigma"] * z[:, t]
    np.testing.assert_allclose(r, np.diff(dev, axis=0).T, rtol=1e-9, atol=1e-15)
