"""The baselines of bench/learning.py on tiny hand-checkable series, and the hidden regime drift."""
import math
import sys
from pathlib import Path

import numpy as np
from gymnasium.utils import seeding

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import learning_baselines as rules  # noqa: E402
from envs.config import EnvConfig  # noqa: E402
from envs.core import TradingCore  # noqa: E402
from envs.markets.processes import DEFAULTS, process_log_returns, regime_drift, REGIME  # noqa: E402


def test_forward_filter_posterior_on_a_known_sequence():
    # p_stay 0.9, drift 1, sigma 1: a return r has likelihood ratio up/down exp(2 (r + 0.5)).
    post = rules.forward_filter(np.array([[0.5, -0.5, -1.5]]), p_stay=0.9, drift=1.0, sigma=1.0)[0]
    p1 = math.exp(2) / (math.exp(2) + 1)  # prior 0.5, llr 2
    prior2 = 0.9 * p1 + 0.1 * (1 - p1)
    p2 = prior2  # llr 0: the prediction stands
    prior3 = 0.9 * p2 + 0.1 * (1 - p2)
    p3 = prior3 * math.exp(-2) / (prior3 * math.exp(-2) + 1 - prior3)
    np.testing.assert_allclose(post, [p1, p2, p3], rtol=1e-12)


def test_regime_filter_signal_is_the_expected_next_return():
    open_ = np.ones((1, 4))
    close = np.exp(np.array([[0.5, -0.5, -1.5, 0.0]]))  # bars open at 1: log(close/open) = the returns
    sig = rules.regime_filter(open_, close, window=1, length=2, p_stay=0.9, drift=1.0, sigma=1.0)[0]
    post = rules.forward_filter(np.log(close), 0.9, 1.0, 1.0)[0, 1:3]  # decisions after bars 1 and 2
    up = 0.9 * post + 0.1 * (1 - post)
    np.testing.assert_allclose(sig, (2 * up - 1) - 0.5, rtol=1e-12)


def test_hysteresis_holds_inside_the_band():
    s = np.array([[0.5, 2.0, 1.0, -1.0, -3.0, 0.0, 3.0]])
    np.testing.assert_array_equal(rules.hysteresis(s, 1.5)[0], [0, 1, 1, 1, -1, -1, 1])
    np.testing.assert_array_equal(rules.hysteresis(s, 1.5, no_short=True)[0], [0, 1, 1, 1, 0, 0, 1])
    np.testing.assert_array_equal(rules.hysteresis(s, 0.0)[0], [1, 1, 1, -1, -1, -1, 1])
    np.testing.assert_array_equal(rules.hysteresis(2 * s, 3.5, max_position=2)[0], [0, 2, 2, 2, -2, -2, 2])


def test_moving_averages_and_crossover_positions():
    close = np.array([[1.0, 2.0, 3.0, 2.0, 1.0, 1.0]])
    np.testing.assert_allclose(rules.moving_average(close, 3)[0], [1, 1.5, 2, 7 / 3, 2, 4 / 3])
    # W=2, L=3: decisions after bars 2, 3, 4; MA2 vs MA3 there: 2.5>2, 2.5>7/3, 1.5<2
    np.testing.assert_array_equal(rules.ma_crossover(close, 2, 3, fast=2, slow=3)[0], [1, 1, -1])
    np.testing.assert_array_equal(rules.ma_crossover(close, 2, 3, fast=2, slow=3, no_short=True)[0], [1, 1, 0])


def test_oracle_holds_the_sign_of_the_decision_bars_drift():
    drift = np.array([[0.002, 0.002, -0.002, -0.002, 0.002]])
    np.testing.assert_array_equal(rules.regime_oracle(drift, window=1, length=3)[0], [1, -1, -1])


def test_ou_signal_reverts_to_the_first_open():
    open_ = np.array([[100.0, 100.0, 110.0]])
    close = np.array([[100.0, 110.0, 90.0]])
    np.testing.assert_allclose(rules.ou_signal(open_, close, 1, 2, theta=0.05)[0],
                               [-0.05 * math.log(1.1), -0.05 * math.log(0.9)])


def test_regime_drift_is_the_state_term_of_the_log_returns():
    rng = np.random.default_rng(3)
    u, z, ext = rng.random((4, 8)), rng.standard_normal((4, 50)), rng.random((4, 50))
    d = regime_drift("regime", u, ext)
    sigma = DEFAULTS["regime"]["sigma"]
    np.testing.assert_allclose(process_log_returns("regime", REGIME, u, z, ext, None) - d,
                               sigma * z - 0.5 * sigma * sigma, atol=1e-15)
    assert set(np.unique(d)) <= {-0.002, 0.002}


def test_recording_the_drift_leaves_the_paths_alone():
    cfg = EnvConfig(market="regime", episode_length=16, window=4)
    cores = [TradingCore(3, cfg) for _ in range(2)]
    for core in cores:
        core.rngs = [seeding.np_random(s)[0] for s in (5, 6, 7)]
    cores[1].market.record_drift()
    for core in cores:
        core.reset_rows(core.rows)
    np.testing.assert_array_equal(cores[0].close, cores[1].close)
    drift = cores[1].market.drift
    assert drift.shape == cores[1].close.shape and set(np.unique(drift)) <= {-0.002, 0.002}
