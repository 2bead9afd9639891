"""bench/rollout_parts.py times a copy of RolloutCollector.collect: it must stay the same rollout."""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.rollout_parts import PARTS, make_collector, measure, timed_collect  # noqa: E402
from ppo_lstm.config.schema import TrainConfig


def test_the_timed_copy_of_collect_is_bitwise_the_real_one():
    config = TrainConfig(progress=False)
    real, timed = make_collector(config), make_collector(config)
    ns = dict.fromkeys((*PARTS, "window"), 0)
    records = 0
    for update in range(9):  # past the end of the first episodes (128 steps = 8 rollouts of 16)
        expected, got = real.collect(update), timed_collect(timed, update, ns)
        np.testing.assert_array_equal(got, expected)
        records += len(got)
        a, b = real.finish(), timed.finish()
        for field in ("obs", "actions", "log_probs", "values", "rewards", "episode_starts", "advantages"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert records == config.num_envs  # the first episodes' records were compared
    assert all(ns[p] > 0 for p in PARTS) and ns["window"] >= sum(ns[p] for p in PARTS)


def test_measure_reports_every_row():
    result = measure(TrainConfig(progress=False), windows=2)
    assert set(result["parts"]) == {*PARTS, "rest", "timed window", "collect()"}
    assert set(result["alternation"]) == {"env step alone", "env step alternating", "torch work alone",
                                          "torch work alternating", "the floor's bare calls alone",
                                          "the floor's bare calls and the env step, one loop"}
    assert set(result["after an update"]) == {"collect() + finish() after a rollout",
                                              "collect() + finish() after an update's work"}
    controls = ("one torch op x60", "a 4 MiB NumPy sweep", "Python arithmetic")
    assert set(result["alternation controls"]) == {f"env step after {name}" for name in controls} | {
        f"{name}, its own time" for name in controls}
    assert all(v["min"] <= v["median"] for group in result.values() for v in group.values())
