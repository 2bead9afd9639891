"""Policies that trade a test window through the same engine as a trained agent
(:func:`ppo_lstm.evaluation.backtest.backtest_history`), so fills, fees, slippage and lot
size are identical: the seed ensemble, flat (cash) and the MA 10/40 crossover.

Each is agent-like: ``initial_state(n, device)`` and ``step(obs [n, D], state, starts) ->
(logits [n, A], values [n], state)``, which is all the backtest's policy stepper calls,
once per decision bar, in order. Backtests act greedily (the most likely action).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from envs.config import EnvConfig

from ..algo.agent import RecurrentActorCritic

_NEVER = -1e9  # the logit of an action a rule never takes


def action_index(env: EnvConfig, lots: int) -> int:
    """The action that targets ``lots`` (0..K with --no-short, else -K..K)."""
    return lots if env.no_short else lots + env.max_position


class EnsemblePolicy:
    """S agents, each with its own LSTM state; the policy is the mean of their action
    probabilities at every bar. ``step`` returns its log (so argmax and softmax act on the mean).

    It is not a vote: the most likely action of the mean can be one that no seed or only a
    minority of the seeds would take (``agreement.py`` counts how often it matches each seed)."""

    def __init__(self, agents: Sequence[RecurrentActorCritic]) -> None:
        self.agents = list(agents)

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> list[Any]:
        return [agent.initial_state(n, device) for agent in self.agents]

    def step(self, obs: torch.Tensor, state: list[Any], starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                                        list[Any]]:
        probs, states = [], []
        for agent, one in zip(self.agents, state):
            logits, _, new = agent.step(obs, one, starts)
            probs.append(logits.softmax(-1))
            states.append(new)
        mean = torch.stack(probs).mean(0)  # [n, A]
        return mean.log(), torch.zeros(obs.shape[0], device=obs.device), states


class RulePolicy:
    """A rule that targets ``lots [T]`` at the backtest's T decisions, in order."""

    def __init__(self, env: EnvConfig, lots: np.ndarray) -> None:
        self.env, self.lots, self.t = env, np.asarray(lots, dtype=np.int64), 0

    def initial_state(self, n: int, device: torch.device | str = "cpu") -> None:
        self.t = 0
        return None

    def step(self, obs: torch.Tensor, state: None, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        logits = torch.full((obs.shape[0], self.env.num_actions), _NEVER, device=obs.device)
        logits[:, action_index(self.env, int(self.lots[min(self.t, len(self.lots) - 1)]))] = 0.0
        self.t += 1
        return logits, torch.zeros(obs.shape[0], device=obs.device), None


def flat_policy(env: EnvConfig, decisions: int) -> RulePolicy:
    """Cash: 0 lots at every decision."""
    return RulePolicy(env, np.zeros(decisions, np.int64))


def ma_crossover_lots(close: np.ndarray, first: int, decisions: int, env: EnvConfig, fast: int = 10,
                      slow: int = 40) -> np.ndarray:
    """MA crossover targets ``[decisions]`` for decision bars ``first..first+decisions-1`` of ``close``:
    +K while the mean close of the last ``fast`` bars (the decision bar included) is above that of
    the last ``slow``, else -K (0 with --no-short). Before ``slow`` bars exist, the bars there are."""
    sums = np.concatenate(([0.0], np.cumsum(np.asarray(close, dtype=np.float64))))
    bars = np.arange(first, first + decisions)

    def mean(n: int) -> np.ndarray:
        lo = np.maximum(bars + 1 - n, 0)
        return (sums[bars + 1] - sums[lo]) / (bars + 1 - lo)

    down = 0 if env.no_short else -env.max_position
    return np.where(mean(fast) > mean(slow), env.max_position, down).astype(np.int64)
