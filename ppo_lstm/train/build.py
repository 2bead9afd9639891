"""The agent and its optimizer, built from a :class:`TrainConfig`; and the check that a
checkpoint's model has the sizes a config asks for."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..algo.agent import RecurrentActorCritic
from ..config.schema import TrainConfig
from ..errors import UsageError
from .eager_adam import EagerAdam


def build_agent(config: TrainConfig) -> RecurrentActorCritic:
    """The recurrent actor-critic of ``config``'s sizes (obs ``[window + 3]``, ``2K+1`` actions)."""
    return RecurrentActorCritic(config.env.obs_dim, config.env.num_actions, config.hidden_size, config.lstm_size)


def build_optimizer(agent: RecurrentActorCritic, rates: tuple[float, float]) -> torch.optim.Adam:
    """Adam with two parameter groups: actor (encoder, LSTM, policy) and critic (value head),
    at the (actor, critic) ``rates`` (a run's :attr:`~ppo_lstm.config.plan.BatchPlan.rates`).

    The fused kernel: one call per group for every parameter, where ``foreach`` takes
    several (docs/benchmarks.md, "Training throughput"). :class:`EagerAdam` is torch's Adam
    without the seconds of importing ``torch._dynamo``."""
    actor, critic = rates
    return EagerAdam([
        {"params": agent.actor_parameters(), "lr": actor, "name": "actor"},
        {"params": agent.critic_parameters(), "lr": critic, "name": "critic"},
    ], eps=1e-5, fused=True)


def check_model_matches(config: TrainConfig, saved: dict[str, Any], path: Path) -> None:
    """UsageError naming both sizes when the checkpoint's model differs from the flags'."""
    ours = {k: tuple(v.shape) for k, v in build_agent(config).state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in saved["model"].items()}
    if ours == theirs:
        return
    old = TrainConfig.from_dict(saved.get("config", {}))
    raise UsageError(f"checkpoint {path} holds a model built with {model_flags(old)}, but this run asks for "
                     f"{model_flags(config)}; use the checkpoint's sizes or another --checkpoint-dir")


def model_flags(c: TrainConfig) -> str:
    """The flags that set the model's shapes (its input size among them), as a command line gives them."""
    return (f"--hidden-size {c.hidden_size} --lstm-size {c.lstm_size} --window {c.env.window} "
            f"--max-position {c.env.max_position}{' --no-short' if c.env.no_short else ''}"
            f"{f' --features {c.env.features}' if c.env.features else ''}"
            f" --ema-spans {c.env.ema_spans or 'none'}")
