"""Evaluate a policy on fresh episodes (held-out seeds): no learning, no side effects."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from envs.config import EnvConfig
from envs.data import MarketData
from envs.vector import VectorTradingEnv

from .agent import RecurrentActorCritic
from .logger import EpisodeTotals, episode_records


@torch.no_grad()
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
