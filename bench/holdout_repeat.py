"""What a run's second and later hold-out backtests cost on a long file, against its first.

A run backtests the same bars of ``--data`` at every checkpoint. The first backtest of a file
computes its observation columns over every bar before the hold-out's end (normalised returns,
the ``--features`` z-scores, the ``--ema-spans`` deviations); later ones read them back
(``envs.markets.file_columns``). This bench builds a file of ``--bars`` hourly bars with two
feature columns, backtests a fresh agent on its last ``--holdout`` bars ``--repeats`` times, and
prints each backtest's seconds: the first, and the median of the others. Prints a table and
one JSON line.

    python bench/holdout_repeat.py [--bars 1000000] [--holdout 2000] [--repeats 4]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.config import EnvConfig  # noqa: E402
from envs.data import MarketData  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history  # noqa: E402
from ppo_lstm.train.build import build_agent  # noqa: E402
from ppo_lstm.config.schema import TrainConfig


def long_file(bars: int) -> MarketData:
    """A random-walk hourly file of ``bars`` bars with two feature columns (AR(1) and noise)."""
    rng = np.random.default_rng(0)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, bars)))
    open_ = np.concatenate(([100.0], close[:-1]))
    stamps = (np.datetime64("2000-01-03T00:00") + np.arange(bars) * np.timedelta64(1, "h")).astype("datetime64[ns]")
    signal = np.zeros(bars)
    for t in range(1, bars):
        signal[t] = 0.9 * signal[t - 1] + rng.normal()
    features = np.stack([signal, rng.normal(size=bars)], axis=1)
    return MarketData(source="long.csv", timestamps=stamps, open=open_, high=np.maximum(open_, close) * 1.001,
                      low=np.minimum(open_, close) * 0.999, close=close, volume=np.ones(bars), bar_seconds=3600.0,
                      feature_names=("signal", "noise"), features=features)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bars", type=int, default=1_000_000)
    parser.add_argument("--holdout", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    data = long_file(args.bars)
    env = EnvConfig(features="signal,noise")
    agent = build_agent(TrainConfig(env=env))
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        backtest_history(agent, env, data, args.bars - args.holdout, args.bars, greedy=True)
        seconds.append(time.perf_counter() - start)
    later = statistics.median(seconds[1:])
    print(f"Hold-out backtests of the last {args.holdout:,} of {args.bars:,} bars, 2 feature columns, "
          f"--ema-spans {env.ema_spans}, default window")
    print("| backtest | seconds |")
    print("|---|---:|")
    print(f"| first | {seconds[0]:.3f} |")
    print(f"| later (median of {args.repeats - 1}) | {later:.3f} |")
    print(json.dumps({"bench": "holdout_repeat", "bars": args.bars, "holdout": args.holdout,
                      "seconds": [round(s, 4) for s in seconds], "first_s": round(seconds[0], 4),
                      "later_median_s": round(later, 4)}))


if __name__ == "__main__":
    main()
