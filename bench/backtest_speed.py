"""Backtest speed: seconds per bar of one continuous hold-out-style backtest (``backtest_history``).

The hold-out backtests the last ``--holdout`` of a ``--data`` file at every checkpoint, one bar at
a time, so on a long file it can take most of a run (``Time by phase`` in the trainer's summary).
This times ``PolicyStepper`` as the backtests use it (the weights held, no reset of a state that
needs none) against the plain ``agent.step`` call, on the same agent and bars, alternating
``--repeats`` times; the logits are the same bits (tests/evaluation/test_backtest.py).

    python bench/backtest_speed.py                     # 20,000 bars of bench/learning.py's signal market
    python bench/backtest_speed.py --repeats 5

Prints a table, then ONE JSON line.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.learning_markets import EVAL_SEED, env_config, write_signal_csv  # noqa: E402
from envs.data import load_ohlcv  # noqa: E402
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.evaluation import engine  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history  # noqa: E402
from ppo_lstm.train.build import build_agent  # noqa: E402


class PlainStepper(engine.PolicyStepper):
    """The stepper as a plain ``agent.step`` call: weights fetched and the state reset every bar."""

    def __call__(self, obs: np.ndarray) -> torch.Tensor:
        logits, _, self.state = self.agent.step(torch.from_numpy(obs).to(self.device), self.state, self.starts)
        return logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        _, test_csv, _, _ = write_signal_csv(Path(tmp), EVAL_SEED)
        env = env_config("signal-5bps")
        data = load_ohlcv(str(test_csv), features=env.feature_names)
    torch.manual_seed(1)  # one untrained agent, the same every run: the time per bar does not depend on the weights
    agent = build_agent(TrainConfig(env=env)).eval()
    times: dict[str, list[float]] = {"PolicyStepper": [], "plain agent.step": []}
    equity: dict[str, float] = {}
    for _ in range(args.repeats):
        for name in times:
            plain = name != "PolicyStepper"
            with mock.patch.object(engine, "PolicyStepper", PlainStepper) if plain else contextlib.nullcontext():
                start = time.perf_counter()
                result = backtest_history(agent, env, data)
                times[name].append(time.perf_counter() - start)
            equity[name] = float(result.agent.total_return_pct)
    bars = len(data)
    best = {name: min(t) for name, t in times.items()}
    print(f"{bars} bars, one continuous backtest, best of {args.repeats} (1 torch thread)")
    print(f"{'stepper':<20}{'s':>8}{'us/bar':>10}{'return %':>12}")
    for name, t in best.items():
        print(f"{name:<20}{t:>8.2f}{t / bars * 1e6:>10.1f}{equity[name]:>12.4f}")
    ratio = best["plain agent.step"] / best["PolicyStepper"]
    print(f"PolicyStepper is {ratio:.2f}x the plain call; the same return: {equity['PolicyStepper'] == equity['plain agent.step']}")
    print(json.dumps({"bench": "backtest_speed", "bars": bars, "repeats": args.repeats, "best_s": best,
                      "all_s": times, "speedup": ratio, "same_return": equity["PolicyStepper"] == equity["plain agent.step"]}))


if __name__ == "__main__":
    main()
