"""Fixed-shape rollout storage ``[T, N]`` and generalised advantage estimation.

Fixed shapes matter: the distributed trainer all_gathers these tensors along the
env dimension, and gloo needs equal sizes on every rank.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

import numpy as np
import torch
from torch import Tensor


@dataclass
class RolloutBatch:
    """One rollout of T steps of N envs (or, after gathering, of N * world_size envs).

    obs ``[T, N, D]``; actions, log_probs, values, rewards, episode_starts, advantages,
    returns ``[T, N]``; initial_h and initial_c ``[1, N, H]``: the LSTM state before
    ``obs[0]``, so each env sequence can be replayed from its start.
    ``episode_starts[t]`` is 1.0 where ``obs[t]`` begins an episode.
    """

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    values: Tensor
    rewards: Tensor
    episode_starts: Tensor
    advantages: Tensor
    returns: Tensor
    initial_h: Tensor
    initial_c: Tensor

    def map(self, fn: Callable[[str, Tensor], Tensor]) -> "RolloutBatch":
        """A new batch with ``fn(name, tensor)`` applied to every field."""
        return RolloutBatch(**{f.name: fn(f.name, getattr(self, f.name)) for f in fields(self)})

    def packed(self) -> Tensor:
        """Each env's sequence as one row: ``[N, F]`` with ``F = T * (D + 7) + 2H`` (its
        observations, the seven ``[T]`` fields and its initial ``h`` and ``c``)."""
        envs = self.actions.shape[1]
        return torch.cat([getattr(self, f.name).transpose(0, 1).reshape(envs, -1) for f in fields(self)], dim=1)

    def unpacked(self, rows: Tensor) -> "RolloutBatch":
        """The batch that :meth:`packed` rows ``[N', F]`` stand for (this batch's T, D and H),
        ``[T, N']``: the inverse of :meth:`packed`, for any number of rows."""
        widths = [getattr(self, f.name)[:, :1].numel() for f in fields(self)]  # each field's width per env
        out = {}
        for f, part in zip(fields(self), rows.split(widths, dim=1)):
            shape = getattr(self, f.name).shape  # [T or 1, N, ...]
            out[f.name] = part.reshape(part.shape[0], shape[0], *shape[2:]).transpose(0, 1).contiguous()
        return RolloutBatch(**out)

    def select_envs(self, env_index: Tensor) -> "RolloutBatch":
        """The sequences of the envs in ``env_index`` ``[B]`` (env dim is 1 for every field)."""
        return self.map(lambda _, t: t[:, env_index])

    @property
    def num_envs(self) -> int:
        return self.actions.shape[1]


class RolloutBuffer:
    """Preallocated ``[T, N]`` storage filled step by step during a rollout."""

    def __init__(self, steps: int, num_envs: int, obs_dim: int, lstm_size: int, device: torch.device) -> None:
        self.steps, self.num_envs = steps, num_envs
        shape = (steps, num_envs)
        self.obs = torch.zeros(*shape, obs_dim, device=device)
        self.actions = torch.zeros(shape, device=device)
        self.log_probs = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.episode_starts = torch.zeros(shape, device=device)
        self.initial_h = torch.zeros(1, num_envs, lstm_size, device=device)
        self.initial_c = torch.zeros(1, num_envs, lstm_size, device=device)

    def add(self, t: int, obs: Tensor, episode_starts: Tensor, actions: Tensor, log_probs: Tensor,
            values: Tensor) -> None:
        """Store step ``t``: obs ``[N, D]``, the rest ``[N]`` (the actions as int64 or float; stored
        as float). The step's rewards are known
        only after the env stepped: the rollout writes them into :attr:`rewards` ``[T, N]``."""
        self.obs[t] = obs
        self.episode_starts[t] = episode_starts
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.values[t] = values

    def finish(self, next_value: Tensor, next_episode_start: Tensor, gamma: float, gae_lambda: float) -> RolloutBatch:
        """Compute GAE and returns, and hand the rollout over as a :class:`RolloutBatch`.

        Args:
            next_value: ``[N]`` value of the observation after the last step.
            next_episode_start: ``[N]`` 1.0 where that observation begins a new episode
                (then nothing is bootstrapped across the boundary).
        """
        advantages = compute_gae(self.rewards, self.values, self.episode_starts, next_value,
                                 next_episode_start, gamma, gae_lambda)
        return RolloutBatch(
            obs=self.obs.clone(), actions=self.actions.clone(), log_probs=self.log_probs.clone(),
            values=self.values.clone(), rewards=self.rewards.clone(),
            episode_starts=self.episode_starts.clone(), advantages=advantages,
            returns=advantages + self.values, initial_h=self.initial_h.clone(), initial_c=self.initial_c.clone(),
        )


def compute_gae(rewards: Tensor, values: Tensor, episode_starts: Tensor, next_value: Tensor,
                next_episode_start: Tensor, gamma: float, gae_lambda: float) -> Tensor:
    """Generalised advantage estimates ``[T, N]``.

    ``rewards``, ``values``, ``episode_starts`` are ``[T, N]``; ``next_value`` and
    ``next_episode_start`` ``[N]`` describe the step after the rollout. An episode
    that ended at step t has ``episode_starts[t + 1] == 1``, which stops the
    recursion there. Truncated (time-limit) episodes are bootstrapped by the
    trainer, which adds ``gamma * V(final_obs)`` to that step's reward.
    """
    not_done = 1.0 - torch.cat([episode_starts[1:], next_episode_start[None]])  # [T, N]: step t+1 continues t
    following = torch.cat([values[1:], next_value[None]])  # [T, N]: the value of step t+1
    deltas = rewards + gamma * following * not_done - values  # [T, N]
    decay = gamma * gae_lambda * not_done  # [T, N]
    advantages = torch.empty_like(rewards)
    if advantages.device.type == "cpu" and deltas.dtype == decay.dtype == next_value.dtype == rewards.dtype \
            and not (deltas.requires_grad or decay.requires_grad):
        _recursion_numpy(deltas.numpy(), decay.numpy(), advantages.numpy())
        return advantages
    last = torch.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):  # the same operations, in the same order, per element
        last = deltas[t] + decay[t] * last
        advantages[t] = last
    return advantages


def _recursion_numpy(deltas: np.ndarray, decay: np.ndarray, out: np.ndarray) -> None:
    """GAE's backward recursion over ``[T, N]`` arrays, into ``out``: the torch loop's operations
    (one multiplication, then one addition, each rounded to the arrays' dtype) in the same
    order, so bit for bit its result, at NumPy's much smaller cost per operation on the CPU."""
    last = np.zeros_like(deltas[0])
    scratch = np.empty_like(last)
    for t in range(deltas.shape[0] - 1, -1, -1):
        np.multiply(decay[t], last, out=scratch)
        np.add(deltas[t], scratch, out=out[t])
        last = out[t]
