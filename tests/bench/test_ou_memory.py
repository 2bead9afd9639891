"""bench/ou_memory.py's deviation estimates against the known-model rule's own signal."""
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import learning_baselines as rules  # noqa: E402
from bench.learning_markets import env_config  # noqa: E402
from bench.learning_paths import simulated_paths  # noqa: E402
from bench.ou_memory import THETA, decayed_sum, last_returns  # noqa: E402


def test_every_return_since_the_start_is_the_known_model_rule_and_the_window_sees_only_its_last_bars():
    env = env_config("ou-10bps")
    paths = simulated_paths(env, [11, 12, 13])
    W, L = env.window, env.episode_length
    full = rules.ou_signal(paths.open, paths.close, W, L, THETA)  # [3, L]
    np.testing.assert_allclose(decayed_sum(1.0)(paths), full, rtol=1e-9, atol=1e-15)
    t = rules.decision_bars(W, L)
    close = np.log(paths.close)
    np.testing.assert_allclose(last_returns(W)(paths), -THETA * (close[:, t] - close[:, t - W]), rtol=1e-9)
    faded = decayed_sum(0.5)(paths)  # a fading memory differs from the rule, and from the window
    assert not np.allclose(faded, full) and not np.allclose(faded, last_returns(W)(paths))
