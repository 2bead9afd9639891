"""Ledger: fees and slippage by hand, and the K=1 branch bit for bit equal to the general FIFO path."""
from __future__ import annotations

import numpy as np
import pytest

from envs.config import EnvConfig
from envs.ledger import Ledger


def test_fill_fee_and_slippage_by_hand() -> None:
    # K=2, 1000 cash at ref 100: 5 units per lot; buy 2 at open 100 (+20 bps slip), fee 10 bps per lot
    cfg = EnvConfig(max_position=2, fee_bps=10.0, slippage_bps=20.0, initial_cash=1000.0, reward_scale=100.0)
    ledger = Ledger(1, cfg)
    ledger.open(slice(None), np.array([100.0]))
    reward = ledger.step(np.array([4]), np.array([100.0]), np.array([101.0]))  # target +2
    fill = 100.0 * 1.002
    fee = 0.001 * fill * 5
    assert ledger.cash[0] == pytest.approx(1000.0 - 2 * 5 * fill - 2 * fee, abs=1e-9)
    assert ledger.entry[0].tolist() == [fill, fill] and ledger.entry_fee[0] == pytest.approx([fee, fee])
    assert ledger.equity[0] == pytest.approx(ledger.cash[0] + 10 * 101.0)
    assert reward[0] == pytest.approx((ledger.equity[0] - 1000.0) / 1000.0 * 100.0)
    ledger.step(np.array([3]), np.array([102.0]), np.array([102.0]))  # sell 1 at 102 * 0.998: FIFO, a win
    assert (ledger.closed[0], ledger.wins[0], ledger.pos[0]) == (1.0, 1.0, 1.0)
    stats = ledger.episode_stats(slice(None))
    assert (stats["closed_trades"][0], stats["winning_trades"][0], stats["open_lots"][0]) == (1, 1, 1)


def test_one_lot_branch_needs_k1() -> None:
    with pytest.raises(ValueError, match="max_position 1"):
        Ledger(2, EnvConfig(max_position=2), one_lot=True)


@pytest.mark.parametrize("no_short", [False, True])
def test_one_lot_branch_equals_general_path_bitwise(no_short: bool) -> None:
    n = 64
    cfg = EnvConfig(max_position=1, no_short=no_short, fee_bps=5.0, slippage_bps=3.0, initial_cash=1000.0)
    fast, general = Ledger(n, cfg), Ledger(n, cfg, one_lot=False)
    assert fast.one_lot and not general.one_lot
    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(0.02 * rng.standard_normal((400, n)), axis=0))
    opens = close * np.exp(0.003 * rng.standard_normal((400, n)))
    for ledger in (fast, general):
        ledger.open(slice(None), close[0])
    for t in range(1, 400):
        if t % 50 == 0:  # some accounts start over mid-run
            rows = rng.choice(n, 9, replace=False)
            for ledger in (fast, general):
                ledger.open(rows, close[t - 1, rows])
        actions = rng.integers(0, cfg.num_actions, n)
        r_fast = fast.step(actions, opens[t], close[t])
        r_general = general.step(actions, opens[t], close[t])
        assert np.array_equal(r_fast, r_general)
        for name in ("cash", "equity", "pos", "held", "mark", "ep_reward", "closed", "wins"):
            assert np.array_equal(getattr(fast, name), getattr(general, name)), name
        rows = rng.choice(n, 5, replace=False)  # (a flat account's zero PnL may differ in sign: == holds)
        assert np.array_equal(fast.unrealised(np.empty(n)), general.unrealised(np.empty(n)))
        assert np.array_equal(fast.unrealised(np.empty(5), rows), general.unrealised(np.empty(5), rows))
    assert fast.wins.sum() > 0 and fast.closed.sum() > fast.wins.sum()
    a, b = fast.get_state(), general.get_state()
    held = a["pos"] != 0  # lot slots of flat accounts hold stale values in either path
    for name in a:
        if name in ("entry", "entry_fee"):
            assert np.array_equal(a[name][held], b[name][held]), name
        else:
            assert np.array_equal(a[name], b[name]), name


def test_state_round_trip() -> None:
    cfg = EnvConfig(max_position=3, fee_bps=2.0, slippage_bps=1.0)
    ledger = Ledger(4, cfg)
    ledger.open(slice(None), np.array([1.0, 10.0, 100.0, 1000.0]))
    rng = np.random.default_rng(1)
    for _ in range(7):
        ledger.step(rng.integers(0, 7, 4), rng.uniform(0.9, 1.1, 4) * [1, 10, 100, 1000], rng.uniform(0.9, 1.1, 4))
    state = ledger.get_state()
    assert state["pos"].dtype == np.int64 and state["closed"].dtype == np.int64
    other = Ledger(4, cfg)
    other.set_state(state)
    actions, o, c = rng.integers(0, 7, 4), rng.uniform(1, 2, 4), rng.uniform(1, 2, 4)
    assert np.array_equal(ledger.step(actions, o, c), other.step(actions, o, c))
    assert np.array_equal(ledger.cash, other.cash) and np.array_equal(ledger.entry, other.entry)
