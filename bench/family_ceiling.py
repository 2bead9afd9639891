"""The ceiling of each variant of ``bench/market_family.py``: the known-model rule, tuned on
the variant's training file and scored on its disjoint test file, out of sample.

The rule's signal is the expected next-bar log return at each bar's close, from the file's
bars and the variant's true parameters (``bench/learning_baselines.py``): on ``regime`` the
Bayes filter (``regime_filter``: the HMM forward filter with the true persistence, drift and
sigma, from a 50/50 prior at the file's first bar); on ``ou`` the process's expected return,
``-theta x`` the log price's deviation from the path's known mean (``ou_signal``); on
``signal`` ``edge x`` the file's ``signal`` column. Positions: ``hysteresis`` (long above
+b, short below -b, else held). The band b is the one of ``threshold_grid`` that scores best
on the training file's episodes; the test score is that b's on the test file's.

Both files are scored as consecutive ``CHUNK``-bar episodes (``family_draw.chunk_bounds``),
each starting flat with a lot of the cash at its first decision, as the trainer's episodes
and the agent's scored backtests are: a continuous backtest would keep its units for
20,000 bars, over which a trending path's price, and so the exposure, can move by a factor
of hundreds. Score: net log return per bar, bps, after the fee, through the env's own
``TradingCore`` (``learning_paths.trade``).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import math  # noqa: E402
from typing import Any, Sequence  # noqa: E402

import numpy as np  # noqa: E402

from bench import learning_baselines as rules  # noqa: E402
from bench.family_draw import CHUNK, START_PRICE, TEST_WARMUP, TRAIN_BARS, Variant, chunk_bounds  # noqa: E402
from bench.learning_ceiling import THRESHOLDS_BPS  # noqa: E402
from bench.learning_paths import history_paths, trade  # noqa: E402
from envs.config import EnvConfig  # noqa: E402
from envs.data import MarketData  # noqa: E402

QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # of |signal| on the training file, as bands too
TRAIN_CHUNKS = (TRAIN_BARS - TEST_WARMUP - 1) // CHUNK  # the training file's episodes after the same warm-up


def rule_env(variant: Variant) -> EnvConfig:
    """The env the rule trades: the variant's fee, no slippage, no columns (the rule reads them itself)."""
    return EnvConfig(fee_bps=variant.fee_bps, slippage_bps=0.0)


def model_expected(variant: Variant, data: MarketData) -> np.ndarray:
    """The known model's expected next-bar log return [bars] at the close of every bar of ``data``."""
    p = variant.process_params()
    open_ = np.asarray(data.open, np.float64)[None, :]
    close = np.asarray(data.close, np.float64)[None, :]
    bars = open_.shape[1]
    if variant.kind == "regime":
        return rules.regime_filter(open_, close, 0, bars, p["persistence"], p["drift"], p["sigma"])[0]
    if variant.kind == "ou":
        return rules.ou_signal(open_, close, 0, bars, p["theta"], log_mean=math.log(START_PRICE))[0]
    column = np.asarray(data.features, np.float64)[:, 0]  # "signal", the first of FEATURES
    return p["edge"] * column


def threshold_grid(expected: np.ndarray) -> list[float]:
    """Bands, bps of expected return: ``THRESHOLDS_BPS`` and quantiles of |signal| (any scale)."""
    quantiles = np.quantile(np.abs(expected), QUANTILES) * 1e4
    return sorted({float(t) for t in THRESHOLDS_BPS} | {round(float(q), 3) for q in quantiles})


def score_bands(env: EnvConfig, data: MarketData, expected: np.ndarray, bands_bps: list[float],
                bounds: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """Score [bands] and turnover [bands] of the hysteresis rule at each band, over the
    episodes ``bounds`` of ``data``, every band trading the same bars in one pass."""
    k = len(bands_bps)
    episodes, turnover = [], np.zeros(k)
    for start, end in bounds:
        paths = history_paths(env, data, expected, start=start, end=end, copies=k)
        decisions = expected[start:end - 1]  # the decision bars start..end-2
        lots = np.concatenate([rules.hysteresis(decisions[None, :], b / 1e4, env.max_position, env.no_short)
                               for b in bands_bps])
        scored = trade(paths, lots, per_row=True)
        episodes.append(scored["bps_per_bar"])
        turnover += scored["turnover"]
    per_episode = np.stack(episodes, axis=1)  # [bands, episodes]
    return {"bps_per_bar": per_episode.mean(axis=1), "turnover": turnover / len(bounds), "episodes": per_episode}


def ceiling(variant: Variant, train: MarketData, test: MarketData,
            extra: Sequence[MarketData] = ()) -> dict[str, Any]:
    """The rule tuned on ``train``'s episodes and scored on ``test``'s (and ``extra``'s, more test
    files, their episodes after ``test``'s): its test score (bps per bar), turnover, band, the
    training grid, and under ``episode_bps`` its score on each test episode [episodes]."""
    env = rule_env(variant)
    train_expected = model_expected(variant, train)
    bands = threshold_grid(train_expected)
    tuned = score_bands(env, train, train_expected, bands, chunk_bounds(count=TRAIN_CHUNKS))
    best = int(np.argmax(tuned["bps_per_bar"]))
    scored = [score_bands(env, data, model_expected(variant, data), [bands[best]], chunk_bounds())
              for data in (test, *extra)]
    episode_bps = np.concatenate([s["episodes"][0] for s in scored])
    return {"bps_per_bar": float(episode_bps.mean()),
            "turnover": float(np.mean([s["turnover"][0] for s in scored])),
            "threshold_bps": bands[best], "train_bps_per_bar": float(tuned["bps_per_bar"][best]),
            "tuning_grid": {f"{b:g}": round(float(s), 3) for b, s in zip(bands, tuned["bps_per_bar"])},
            "episode_bps": episode_bps}
