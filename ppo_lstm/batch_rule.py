"""The batch rule: how the batch of one update, the rollout length and the default Adam
rates follow ``--num-envs`` and the worker count (docs/batch_scaling.md).

Every rank all-gathers its rollout, so the batch grows with the envs and the workers:
U = :data:`STEPS_PER_ENV` x envs x workers unless ``--update-interval`` sets it, and the
rates left to the rule are :data:`BASE_RATES` x min(sqrt(U / :data:`BASE_BATCH`), ``--rate-cap``)
(:data:`DEFAULT_RATE_CAP` unless given). The functions read a :class:`~ppo_lstm.config.TrainConfig`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .errors import UsageError

if TYPE_CHECKING:
    from .config import TrainConfig

STEPS_PER_ENV = 16  # rollout length T of every env per update when --update-interval is not given
BASE_BATCH = 128  # the batch the base learning rates were tuned at (8 envs x 16 steps, one worker)
BASE_RATES = (3e-4, 1e-3)  # (actor, critic) Adam rates at BASE_BATCH; x sqrt(U / BASE_BATCH) at batch U
DEFAULT_RATE_CAP = 4.0  # ... up to this scale (--rate-cap), reached at a batch of 2,048 (docs/batch_scaling.md)
SAVED_RATE_CAP = 8.0  # the cap of a checkpoint written before --rate-cap existed: it resumes at the rates it had


def update_batch(config: TrainConfig, world_size: int = 1) -> int:
    """U, the transitions of one update over all workers: ``--update-interval`` when given
    (a global batch, whatever the worker count), else :data:`STEPS_PER_ENV` steps of every
    env of every worker, so the batch grows with ``--num-envs`` and the worker count while
    each env's rollout keeps its length."""
    if config.update_interval is not None:
        return config.update_interval
    return STEPS_PER_ENV * config.num_envs * world_size


def batch_rate_scale(batch: int, cap: float = DEFAULT_RATE_CAP) -> float:
    """min(sqrt(batch / BASE_BATCH), cap): how the default learning rates grow with the batch.

    A batch k times larger gives k times fewer updates on the same env steps, each with
    a gradient of less noise; Adam's rates then scale by sqrt(k), up to the cap: x4 (a
    batch of 2,048) by default. At equal wall time on the CPU, x4 learned as well as or
    better than x8 at batches of 8,192 and 65,536, and x8 lost the signal market at 8,192;
    uncapped rates learned less on one GPU (evidence: docs/batch_scaling.md)."""
    return min(math.sqrt(batch / BASE_BATCH), cap)


def rate_scale(config: TrainConfig, world_size: int = 1) -> float:
    """:func:`batch_rate_scale` of the run's batch U (:func:`update_batch`), capped at ``--rate-cap``."""
    return batch_rate_scale(update_batch(config, world_size), config.rate_cap)


def learning_rates(config: TrainConfig, world_size: int = 1) -> tuple[float, float]:
    """The (actor, critic) Adam rates a run trains at, before annealing: each given rate as
    it is, each left out as :data:`BASE_RATES` x :func:`rate_scale`."""
    scale = rate_scale(config, world_size)
    actor, critic = config.learning_rate_actor, config.learning_rate_critic
    return (BASE_RATES[0] * scale if actor is None else actor,
            BASE_RATES[1] * scale if critic is None else critic)


def describe_batch(config: TrainConfig, world_size: int = 1) -> str:
    """The start-up line's account of the batch and the rates: its split, the rule or the
    flags that set each, so a user sees what ``--num-envs`` and the workers picked."""
    u, n, t = update_batch(config, world_size), config.num_envs, steps_per_env(config, world_size)
    rule = ("--update-interval" if config.update_interval is not None
            else f"default: {STEPS_PER_ENV} steps x envs x workers")
    actor, critic = learning_rates(config, world_size)
    scale = _scale_text(u, config.rate_cap)
    if config.learning_rate_actor is None and config.learning_rate_critic is None:
        how = f"{BASE_RATES[0]:g} / {BASE_RATES[1]:g} {scale}"
    elif config.learning_rate_actor is None:
        how = f"--learning-rate-critic as given, the other {BASE_RATES[0]:g} {scale}"
    elif config.learning_rate_critic is None:
        how = f"--learning-rate-actor as given, the other {BASE_RATES[1]:g} {scale}"
    else:
        how = "--learning-rate-actor and --learning-rate-critic as given"
    return (f"Batch: {u} transitions per update = {world_size} worker(s) x {n} envs x {t} steps ({rule}); "
            f"{config.minibatches} minibatches of {n * world_size // config.minibatches * t}, "
            f"{config.epochs} epochs; learning rates {actor:.3g} / {critic:.3g} ({how})")


def _scale_text(batch: int, cap: float) -> str:
    root = batch_rate_scale(batch, cap=math.inf)
    return (f"x sqrt({batch}/{BASE_BATCH}) = x{root:.3g}" if root <= cap
            else f"x{cap:g}, the cap (--rate-cap), as sqrt({batch}/{BASE_BATCH}) = {root:.3g} is more")


def steps_per_env(config: TrainConfig, world_size: int = 1) -> int:
    """Rollout length T: each of a worker's envs steps U / (world_size * num_envs) times."""
    u, n, w = update_batch(config, world_size), config.num_envs, world_size
    if u % (n * w):
        valid = [k * n * w for k in range(1, 9)]
        raise UsageError(
            f"--update-interval {u} does not divide into {w} worker(s) x {n} envs; "
            f"use a multiple of {n * w} (e.g. {', '.join(map(str, valid[:4]))}) or change --num-envs"
        )
    return u // (n * w)


def total_updates(config: TrainConfig, world_size: int = 1) -> int:
    """The updates a run of ``--episodes`` makes (at least 1), over which ``--anneal-lr`` runs."""
    return max(1, math.ceil(config.episodes * config.env.episode_length / update_batch(config, world_size)))
