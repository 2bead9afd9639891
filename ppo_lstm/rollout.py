"""Rollout collection: this worker's envs, their observations, the LSTM state carried
from one rollout to the next, the action sampler and the rollout buffer.

Shapes: T rollout steps per env, N envs on this worker, D obs size, A actions,
H LSTM size.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from envs.data import MarketData
from envs.vector import VectorTradingEnv

from .agent import LSTMState, RecurrentActorCritic
from .buffer import RolloutBatch, RolloutBuffer
from .config import TrainConfig
from .errors import TrainingError
from .logger import EPISODE_FIELDS, episode_records
from .seeding import derive_seed, env_seeds


class RolloutCollector:
    """Steps ``N`` envs ``T`` times per rollout with the shared agent; owns everything a
    rank needs to continue its rollouts bit for bit (:meth:`state`)."""

    def __init__(self, config: TrainConfig, agent: RecurrentActorCritic, rank: int, steps: int,
                 device: torch.device, data: Optional[MarketData], span: Optional[tuple[int, int]] = None) -> None:
        """``data``: history to trade (None: the simulated market); ``span``: the bars
        ``lo..hi-1`` of it that episodes lie within (default: all)."""
        self.config, self.agent, self.rank, self.steps, self.device = config, agent, rank, steps, device
        self.num_envs = config.num_envs
        self.sample_generator = torch.Generator(device).manual_seed(derive_seed(config.seed, rank, 11))
        self.env = VectorTradingEnv(config.num_envs, config.env, data=data, span=span)
        self.buffer = RolloutBuffer(steps, config.num_envs, config.env.obs_dim, config.lstm_size, device)
        self.obs: np.ndarray = self.env.reset(seed=env_seeds(config.seed, rank, config.num_envs))[0]  # [N, D]
        self.episode_start = np.ones(config.num_envs, dtype=bool)  # [N]
        self.lstm_state: LSTMState = agent.initial_state(config.num_envs, device)  # ([1, N, H], [1, N, H])

    def restart(self, generation: int) -> None:
        """New episodes in every env, from seeds of ``generation`` (a resume that changed the layout)."""
        self.obs = self.env.reset(seed=env_seeds(self.config.seed, self.rank, self.num_envs, generation))[0]

    def collect(self, update: int) -> np.ndarray:
        """Step the envs T times, filling the buffer. Returns the records ``[k, 6]``
        (:data:`EPISODE_FIELDS`) of every episode that finished, in step then env order.

        A time-limit truncation is bootstrapped by adding gamma * V(final obs) to that
        step's reward (the final obs is valued with the episode's own LSTM state).
        """
        records = []
        self.buffer.initial_h.copy_(self.lstm_state[0])
        self.buffer.initial_c.copy_(self.lstm_state[1])
        for t in range(self.steps):
            obs = torch.as_tensor(self.obs, device=self.device)  # [N, D]
            starts = torch.as_tensor(self.episode_start, device=self.device, dtype=torch.float32)  # [N]
            with torch.no_grad():
                logits, values, self.lstm_state = self.agent.step(obs, self.lstm_state, starts)  # [N, A], [N]
                try:  # multinomial itself rejects inf/nan probabilities: no extra check on the hot path
                    actions = torch.multinomial(logits.softmax(-1), 1, generator=self.sample_generator).squeeze(-1)
                except RuntimeError as err:
                    raise TrainingError(f"the policy gave non-finite outputs after update {update} ({err}); "
                                        f"lower --learning-rate-actor/--learning-rate-critic or --max-grad-norm, "
                                        f"or check --data") from None
                log_probs = logits.log_softmax(-1).gather(-1, actions[:, None])[:, 0]  # [N]
            self.obs, rewards, terminated, truncated, info = self.env.step(actions.cpu().numpy())
            rewards_t = torch.as_tensor(rewards, dtype=torch.float32, device=self.device)
            cut = truncated & ~terminated
            if cut.any():
                rewards_t += self.config.gamma * self._final_values(info["final_obs"], cut)
            self.buffer.add(t, obs, starts, actions.float(), log_probs, values, rewards_t)
            self.episode_start = terminated | truncated
            if "_episode" in info:
                records.append(episode_records(info["episode"], np.flatnonzero(info["_episode"])))
        return np.concatenate(records) if records else np.zeros((0, len(EPISODE_FIELDS)))

    def finish(self) -> RolloutBatch:
        """The rollout as a batch ``[T, N]`` with GAE advantages, bootstrapped from the value
        of the observation after it."""
        obs = torch.as_tensor(self.obs, device=self.device)
        starts = torch.as_tensor(self.episode_start, device=self.device, dtype=torch.float32)
        with torch.no_grad():
            _, values, _ = self.agent(obs[None], self.lstm_state, starts[None])
        return self.buffer.finish(values[0], starts, self.config.gamma, self.config.gae_lambda)

    def _final_values(self, final_obs: np.ndarray, cut: np.ndarray) -> Tensor:
        """``[N]`` values of the final observations ``[N, D]`` where ``cut`` ``[N]``, 0 elsewhere."""
        index = torch.as_tensor(np.flatnonzero(cut), device=self.device)
        obs = torch.as_tensor(final_obs[cut], device=self.device, dtype=torch.float32)
        h, c = self.lstm_state
        with torch.no_grad():
            _, values, _ = self.agent(obs[None], (h[:, index], c[:, index]), torch.zeros(1, len(index),
                                                                                         device=self.device))
        out = torch.zeros(self.num_envs, device=self.device)
        out[index] = values[0]
        return out

    def state(self) -> dict[str, Any]:
        """The sampler, env, observation, episode-start and LSTM state (numpy arrays and CPU tensors)."""
        return {
            "sample_generator": self.sample_generator.get_state().cpu(),
            "env": self.env.get_state(),
            "obs": self.obs.copy(),
            "episode_start": self.episode_start.copy(),
            "lstm_h": self.lstm_state[0].detach().cpu().clone(),
            "lstm_c": self.lstm_state[1].detach().cpu().clone(),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.sample_generator.set_state(state["sample_generator"].to("cpu"))
        self.env.set_state(state["env"])
        self.obs = state["obs"]
        self.episode_start = state["episode_start"]
        self.lstm_state = (state["lstm_h"].to(self.device), state["lstm_c"].to(self.device))
