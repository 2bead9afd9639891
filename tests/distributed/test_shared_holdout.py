"""A simulated hold-out shared by 2 real gloo workers: each plays its share of the episodes
(3 and 2 of 5), rank 0 chains them, and every figure is the same bits as one process playing
all 5 (``backtest_simulated``, which ``evaluate-ppo-lstm`` runs)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT
from envs.config import EnvConfig
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.evaluation.backtest import backtest_simulated
from ppo_lstm.train.build import build_agent

pytestmark = [pytest.mark.timeout(120), pytest.mark.e2e]

CONFIG = TrainConfig(hidden_size=16, lstm_size=16, holdout_episodes=5, seed=7,
                     env=EnvConfig(market="regime", episode_length=24, window=8, fee_bps=5.0))

SCRIPT = """
import dataclasses
import sys
import numpy as np
import torch
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch
from ppo_lstm.train.holdout import Holdout
from ppo_lstm.train.build import build_agent

def worker(config, w):
    run = TrainConfig.from_dict(torch.load("config.pt", weights_only=True))
    agent = build_agent(run)
    agent.load_state_dict(torch.load("weights.pt", weights_only=True))
    result = Holdout.of(run, None, None).run(agent, torch.device("cpu"), w.comm)
    if w.comm.rank == 0:
        np.savez("rank0.npz", equity=result.equity, bh=result.buy_and_hold_equity, position=result.position,
                 close=result.close, episodes=result.episode_returns_pct, agent=np.array(list(dataclasses.asdict(result.agent).values()),
                 dtype=float), bh_metrics=np.array(list(dataclasses.asdict(result.buy_and_hold).values()), dtype=float))
    else:
        assert result is None
    return 0

if __name__ == "__main__":
    sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
"""


def test_two_workers_share_a_simulated_holdout_to_the_bit(tmp_path):
    torch.manual_seed(3)
    agent = build_agent(CONFIG)
    torch.save(agent.state_dict(), tmp_path / "weights.pt")
    torch.save(CONFIG.to_dict(), tmp_path / "config.pt")
    (tmp_path / "shared.py").write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "shared.py"], capture_output=True, text=True, timeout=100, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr
    shared = np.load(tmp_path / "rank0.npz")
    whole = backtest_simulated(agent, CONFIG.env, 5, CONFIG.seed, greedy=True)
    as_floats = lambda metrics: np.array(list(dataclasses.asdict(metrics).values()), dtype=float)  # noqa: E731
    for name, expected in (("equity", whole.equity), ("bh", whole.buy_and_hold_equity), ("position", whole.position),
                           ("close", whole.close), ("episodes", whole.episode_returns_pct),
                           ("agent", as_floats(whole.agent)), ("bh_metrics", as_floats(whole.buy_and_hold))):
        assert np.array_equal(shared[name], expected, equal_nan=True), name
    assert whole.agent.trades > 0  # the agent traded, so the comparison covers its trades and fees
