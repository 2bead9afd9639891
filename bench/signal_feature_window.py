"""How much of the signal market's edge the feature z-score keeps, by ``--feature-window``.

The known-model rule of ``bench/learning.py`` trades the file's expected next-bar return,
``SIGNAL_EDGE x signal``. A policy sees the column only as its causal rolling z-score
(``envs.data.features``): the column less its mean over the last N bars, over their std. For a
persistent column (an AR(1) with coefficient 0.9) the N-bar mean wanders, by about
sqrt((1 + phi) / ((1 - phi) N)) standard deviations (0.27 at N = 256), and the rule's threshold is
about 0.13 of them. This bench scores the same rule on ``SIGNAL_EDGE x z`` for several N, on the
held-out file, with the hysteresis threshold tuned on the training file, as ``bench/learning.py``
scores the rule on the raw column. No training; deterministic.

Prints a table (share of the known-model rule, threshold, turnover) and ONE JSON line.

    python bench/signal_feature_window.py
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from bench import learning_baselines as rules  # noqa: E402
from bench.learning_ceiling import THRESHOLDS_BPS, model_signal  # noqa: E402
from bench.learning_markets import EVAL_SEED, SIGNAL_EDGE, env_config, write_signal_csv  # noqa: E402
from bench.learning_paths import Paths, history_paths, trade  # noqa: E402
from envs.data.features import FEATURE_WINDOW, feature_zscores  # noqa: E402
from envs.data.loading import load_ohlcv  # noqa: E402

WINDOWS = (64, 128, FEATURE_WINDOW, 512, 1024, 2048, 4096)


def score(expected_test: np.ndarray, expected_tune: np.ndarray, test: Paths, tune: Paths) -> dict[str, float]:
    """The rule on the given expected returns [bars] of each file, at the threshold best on ``tune``."""
    test = dataclasses.replace(test, drift=expected_test[None, :])
    tune = dataclasses.replace(tune, drift=expected_tune[None, :])
    K, short = test.env.max_position, test.env.no_short
    grid = {t: trade(tune, rules.hysteresis(model_signal(tune, "signal"), t / 1e4, K, short))["bps_per_bar"]
            for t in THRESHOLDS_BPS}
    threshold = max(grid, key=grid.get)
    lots = rules.hysteresis(model_signal(test, "signal"), threshold / 1e4, K, short)
    return {**trade(test, lots), "threshold_bps": float(threshold)}


def main() -> None:
    start = time.perf_counter()
    env = env_config("signal-5bps")
    with tempfile.TemporaryDirectory() as tmp:
        train_csv, test_csv, train_expected, test_expected = write_signal_csv(Path(tmp), EVAL_SEED)
        train, test = (load_ohlcv(path, features=env.feature_names) for path in (train_csv, test_csv))
    tune_paths = history_paths(env, train, train_expected, additive=True)
    test_paths = history_paths(env, test, test_expected, additive=True)
    column = env.feature_names.index("signal")
    rows = {"the raw column (the known-model rule)": score(test_expected, train_expected, test_paths, tune_paths)}
    for window in WINDOWS:
        z_test = feature_zscores(test.features[:, column], window)[:, 0].astype(np.float64)
        z_train = feature_zscores(train.features[:, column], window)[:, 0].astype(np.float64)
        rows[f"z-score over {window} bars"] = score(SIGNAL_EDGE * z_test, SIGNAL_EDGE * z_train, test_paths,
                                                    tune_paths)
    reference = rows["the raw column (the known-model rule)"]["bps_per_bar"]
    print(f"signal-5bps: {len(test)} held-out bars; the rule on SIGNAL_EDGE x the column as the policy sees it")
    print(f"{'expected return from':40s} {'bps/bar':>8s} {'% rule':>7s} {'thr bps':>8s} {'turnover':>9s}")
    for name, row in rows.items():
        row["share"] = row["bps_per_bar"] / reference
        print(f"{name:40s} {row['bps_per_bar']:8.3f} {100 * row['share']:7.1f} {row['threshold_bps']:8.0f} "
              f"{row['turnover']:9.2f}")
    print(json.dumps({"bench": "signal_feature_window", "rows": rows, "wall_s": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
