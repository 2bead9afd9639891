"""The run's two schedules, ``--cost-warmup`` and ``--anneal-lr``, on one clock.

The clock is the run's progress: the larger of its env steps and its finished episodes,
each as a share of what ``--episodes`` makes (``--episodes`` x ``--episode-length`` env
steps). Both are counts over every worker, so a resume onto another batch or worker count
goes on where the run was. The env steps keep the schedules smooth between the waves in
which envs end their episodes; the episodes carry them to their end by the run's last
episode where episodes end early.

:func:`schedules_at` gives both as floats in [0, 1] (:class:`Schedules`).
``--schedule-rule 1`` (the rates annealed over the plan's updates, the costs on finished
episodes) stays selectable, and a resumed run keeps its rule.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from .plan import BatchPlan

SCHEDULE_RULES = (1, 2)
LATEST_SCHEDULE_RULE = SCHEDULE_RULES[-1]


class ScheduleSettings(Protocol):
    """The settings the schedules read, as a :class:`~ppo_lstm.config.TrainConfig` holds them (a
    protocol, so this module imports nothing from the schema, which imports it)."""

    episodes: int
    cost_warmup: float
    anneal_lr: bool
    schedule_rule: int
    env: Any  # an EnvConfig: its episode_length


class Schedules(NamedTuple):
    """Where a run's schedules are: the share of ``--fee-bps``/``--slippage-bps`` its training
    envs charge, and the share of its learning rates it trains at."""
    costs: float
    rates: float


def run_progress(config: ScheduleSettings, env_steps: float, episodes: float) -> float:
    """The run's progress in [0, 1] after ``env_steps`` env steps and ``episodes`` finished episodes."""
    planned = config.episodes * config.env.episode_length
    return min(1.0, max(env_steps / planned, episodes / config.episodes))


def schedules_at(config: ScheduleSettings, plan: "BatchPlan", env_steps: float, episodes: float) -> Schedules:
    """The schedules of an iteration that starts after ``env_steps`` env steps and ``episodes``
    finished episodes (both every worker's); rule 1's rates count in ``plan``'s updates."""
    if config.schedule_rule == 1:
        planned = plan.updates_for(config.episodes, config.env.episode_length) * plan.batch
        costs = 1.0 if config.cost_warmup <= 0.0 else min(1.0, episodes / (config.cost_warmup * config.episodes))
        rates = max(0.0, 1.0 - env_steps / planned)
    else:
        progress = run_progress(config, env_steps, episodes)
        costs = 1.0 if config.cost_warmup <= 0.0 else min(1.0, progress / config.cost_warmup)
        rates = 1.0 - progress
    return Schedules(costs, rates if config.anneal_lr else 1.0)
