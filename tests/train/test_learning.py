"""The agent learns: on the regime-switching market, the trained policy beats the
untrained one on held-out seeds. Deterministic (fixed seeds, one thread), ~15 s."""
import copy

import pytest
import torch

from envs.config import EnvConfig
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker
from ppo_lstm.evaluation.cli import evaluate
from ppo_lstm.train.shutdown import StopRequest
from ppo_lstm.train.trainer import Trainer

pytestmark = pytest.mark.learning

HELD_OUT_SEEDS = list(range(10_000, 10_064))  # training envs use SeedSequence-derived seeds


def test_trained_policy_beats_untrained_on_held_out_seeds(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = TrainConfig(episodes=300, num_envs=8, update_interval=128, seed=3, progress=False,
                             log_file=str(tmp_path / "train.log"), checkpoint_dir=str(tmp_path / "ck"),
                             checkpoint_interval=10**6, env=EnvConfig(market="regime", episode_length=64))
        trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
        untrained = copy.deepcopy(trainer.agent)
        assert trainer.run() == 0
        before = {g: evaluate(untrained, config.env, HELD_OUT_SEEDS, greedy=g).means()["mean_reward"]
                  for g in (True, False)}
        after = evaluate(trainer.agent, config.env, HELD_OUT_SEEDS, greedy=True).means()["mean_reward"]
    finally:
        torch.set_num_threads(threads)
    # Rewards are % of starting cash per episode, net of fees and slippage.
    assert after > 0.0, (before, after)
    assert after > max(before.values()) + 2.0, (before, after)
