"""How much of the ``ou`` market's edge needs memory beyond the observation window.

The known-model rule of ``bench/learning.py`` trades the OU's expected next-bar return,
``-theta x (log close_t - log open_0)``: it knows the level the price reverts to, the path's
first open. A policy sees that level only by adding up every return since the episode's
first bar; its observation holds the last ``--window`` (32) of them. This bench scores
the same rule with the deviation estimated from less history, on the held-out paths and
with the hysteresis threshold tuned on the training paths, exactly as ``bench/learning.py``
scores the full rule:

* ``last k returns``: ``log close_t - log close_{t-k}``, for k up to the window: what a
  policy without memory can know;
* ``decayed sum, a``: ``sum_s a^(t-s) r_s`` over every return since the path's start (an
  exponentially fading memory, the simplest recurrent estimate);
* ``every return since the start`` (a = 1): the known-model rule itself, 100 %.

Prints a table (share of the known-model rule, its threshold, turnover) and ONE JSON line.

    python bench/ou_memory.py
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import learning_baselines as rules  # noqa: E402
from bench.learning_ceiling import THRESHOLDS_BPS  # noqa: E402
from bench.learning_markets import EVAL_SEED, TUNE_EPISODES, env_config  # noqa: E402
from bench.learning_paths import Paths, simulated_paths, trade  # noqa: E402
from envs.markets.processes import DEFAULTS  # noqa: E402
from ppo_lstm.algo.seeding import env_seeds  # noqa: E402
from ppo_lstm.evaluation.backtest import evaluation_seeds  # noqa: E402

THETA = DEFAULTS["ou"]["theta"]
Signal = Callable[[Paths], np.ndarray]


def log_prices(paths: Paths) -> np.ndarray:
    """``[m, B+1]``: log of the first open, then of every close."""
    return np.log(np.concatenate([paths.open[:, :1], paths.close], axis=1))


def last_returns(k: int) -> Signal:
    """Expected return from the deviation over the last ``k`` bars only, ``[m, L]``."""
    def signal(paths: Paths) -> np.ndarray:
        env, lp = paths.env, log_prices(paths)
        bars = rules.decision_bars(env.window, env.episode_length) + 1  # close of bar t is lp[:, t + 1]
        return -THETA * (lp[:, bars] - lp[:, bars - k])
    return signal


def decayed_sum(decay: float) -> Signal:
    """Expected return from ``sum_s decay^(t-s) r_s`` over every bar since the path's start, ``[m, L]``."""
    def signal(paths: Paths) -> np.ndarray:
        env, returns = paths.env, np.diff(log_prices(paths), axis=1)  # [m, B]: return s is bar s's
        memory, out = np.zeros(returns.shape[0]), np.empty_like(returns)
        for s in range(returns.shape[1]):
            memory = decay * memory + returns[:, s]
            out[:, s] = memory
        return -THETA * out[:, rules.decision_bars(env.window, env.episode_length)]
    return signal


def score(signal: Signal, test: Paths, tune: Paths) -> dict[str, float]:
    """The rule's held-out score at the threshold that scores best on ``tune``."""
    tuned = signal(tune)
    grid = {t: trade(tune, rules.hysteresis(tuned, t / 1e4))["bps_per_bar"] for t in THRESHOLDS_BPS}
    threshold = max(grid, key=grid.get)
    return {**trade(test, rules.hysteresis(signal(test), threshold / 1e4)), "threshold_bps": float(threshold)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000, help="held-out episodes (bench/learning.py's)")
    args = parser.parse_args()
    start = time.perf_counter()
    env = env_config("ou-10bps")
    test = simulated_paths(env, evaluation_seeds(EVAL_SEED, args.episodes))
    tune = simulated_paths(env, env_seeds(1, 0, 8), TUNE_EPISODES)
    rows: dict[str, dict[str, float]] = {}
    for k in (4, 8, 16, 32):
        rows[f"last {k} returns"] = score(last_returns(k), test, tune)
    for decay in (0.9, 0.95, 0.97, 0.99):
        rows[f"decayed sum, a = {decay}"] = score(decayed_sum(decay), test, tune)
    rows["every return since the start"] = score(decayed_sum(1.0), test, tune)
    reference = rows["every return since the start"]["bps_per_bar"]
    print(f"ou at 10 bps, {args.episodes} held-out episodes of {env.episode_length} decisions; "
          f"the observation holds the last {env.window} returns")
    print(f"{'deviation from':34s} {'bps/bar':>8s} {'% rule':>7s} {'thr bps':>8s} {'turnover':>9s}")
    for name, row in rows.items():
        row["share"] = row["bps_per_bar"] / reference
        print(f"{name:34s} {row['bps_per_bar']:8.3f} {100 * row['share']:7.1f} {row['threshold_bps']:8.0f} "
              f"{row['turnover']:9.2f}")
    print(json.dumps({"bench": "ou_memory", "episodes": args.episodes, "window": env.window, "rows": rows,
                      "wall_s": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
