"""The ceiling of ``bench/learning.py``: the known-model rule (the Bayes filter on the regime
market, the OU's expected return on ``ou``, the file's signal on ``signal-5bps``) with the
hysteresis threshold tuned on TRAINING paths, beside the simple baselines (buy-and-hold,
MA crossover, random, the regime oracle). The rules themselves: ``bench/learning_baselines.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import learning_baselines as rules  # noqa: E402
from bench.learning_markets import MARKETS  # noqa: E402
from bench.learning_paths import Paths, trade  # noqa: E402
from envs.markets.processes import DEFAULTS  # noqa: E402

THRESHOLDS_BPS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 25, 30)


def model_signal(paths: Paths, market: str) -> np.ndarray:
    env = paths.env
    W, L = env.window, env.episode_length
    if market == "signal":  # the file's expected next-bar log return, EDGE x signal, known at each decision bar
        return paths.drift[:, rules.decision_bars(W, L)]
    if market == "regime":
        d = DEFAULTS["regime"]
        return rules.regime_filter(paths.open, paths.close, W, L, d["persistence"], d["drift"], d["sigma"])
    if market == "ou":
        return rules.ou_signal(paths.open, paths.close, W, L, DEFAULTS["ou"]["theta"])
    raise ValueError(f"no model rule for {market}")


def best_threshold(paths: Paths, market: str) -> tuple[float, dict[str, float]]:
    """The hysteresis threshold (bps of expected return) that scores best on ``paths``."""
    signal = model_signal(paths, market)
    K, short = paths.env.max_position, paths.env.no_short
    scores = {thr: trade(paths, rules.hysteresis(signal, thr / 1e4, K, short))["bps_per_bar"]
              for thr in THRESHOLDS_BPS}
    best = max(scores, key=scores.get)
    return float(best), {str(k): round(v, 3) for k, v in scores.items()}


def baselines(name: str, test: Paths, tune: Paths, seed: int = 0) -> dict[str, dict[str, float]]:
    env = test.env
    market = MARKETS[name].get("model", env.market)
    W, L, K, short = env.window, env.episode_length, env.max_position, env.no_short
    m = test.close.shape[0]
    out = {
        "buy-and-hold": trade(test, rules.buy_and_hold(m, L, K)),
        "MA 10/40": trade(test, rules.ma_crossover(test.close, W, L, 10, 40, K, short)),
        "random": trade(test, rules.random_positions(m, L, np.random.default_rng(seed), K, short)),
    }
    threshold, grid = best_threshold(tune, market)
    label = "Bayes filter" if market == "regime" else "known-model rule"
    out[label] = trade(test, rules.hysteresis(model_signal(test, market), threshold / 1e4, K, short))
    out[label]["threshold_bps"] = threshold
    out[label]["tuning_grid"] = grid  # type: ignore[assignment]
    if market == "regime" and test.drift is not None and name != "signal-5bps":
        out["regime oracle"] = trade(test, rules.regime_oracle(test.drift, W, L, K))
    return out
