"""The agent learns: on the regime-switching market, the trained policy beats the
untrained one on held-out seeds. Deterministic (fixed seeds, one thread), ~15 s."""
import copy
from typing import Optional

import numpy as np
import pytest
import torch

from envs.config import EnvConfig
from envs.data import MarketData
from envs.vector import VectorTradingEnv
from ppo_lstm.algo.agent import RecurrentActorCritic
from ppo_lstm.algo.episodes import EpisodeTotals, episode_records
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker
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


def evaluate(agent: RecurrentActorCritic, env_config: EnvConfig, seeds: list[int], greedy: bool = True,
             data: Optional[MarketData] = None, device: torch.device | str = "cpu") -> EpisodeTotals:
    """Play one episode per seed (all in parallel) and return the episode sums.

    ``greedy`` takes the most likely action; otherwise actions are sampled from a
    generator seeded by ``seeds[0]``, so the result is reproducible either way.
    """
    env = VectorTradingEnv(len(seeds), env_config, data=data)
    obs, _ = env.reset(seed=list(seeds))  # [N, D]
    state = agent.initial_state(len(seeds), device)
    starts = torch.ones(len(seeds), device=device)
    done = torch.zeros(len(seeds), dtype=torch.bool)
    generator = torch.Generator(device).manual_seed(seeds[0])
    totals = EpisodeTotals()
    while not bool(done.all()):
        logits, _, state = agent(torch.as_tensor(obs, device=device)[None], state, starts[None])
        if greedy:
            actions = logits[0].argmax(-1)
        else:
            actions = torch.multinomial(logits[0].softmax(-1), 1, generator=generator).squeeze(-1)
        obs, _, terminated, truncated, info = env.step(actions.cpu().numpy())
        finished = torch.as_tensor(terminated | truncated)
        if "_episode" in info:
            first = np.flatnonzero((finished & ~done).numpy())  # count each env's first episode only
            totals.add(EpisodeTotals.of_records(episode_records(info["episode"], first).tolist()))
        done |= finished
        starts = finished.float().to(device)
    return totals


# ----------------------------------------------------------------------------- the command line
