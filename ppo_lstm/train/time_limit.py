"""``--time-limit DURATION``: a wall-clock budget for one training invocation.

The budget counts from the trainer's start (after start-up and any resume). When any rank's
clock passes it, every rank learns so in the iteration's one collective
(:mod:`ppo_lstm.train.agreement`) and the run ends at that update as it ends at its last one:
a hold-out backtest, a checkpoint and the summary, exit code 0. ``--resume`` goes on from there.

The cost warm-up and the rates' annealing follow ``--episodes``, so a limit that stops the
run well before them leaves an agent trained at part of the costs; :class:`LimitProjection`
warns of that early, from the run's speed, and the stop line says where they stopped.
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Optional

import pandas as pd

from ..errors import UsageError

if TYPE_CHECKING:
    from ..config import TrainConfig


def limit_seconds(text: Optional[str]) -> Optional[float]:
    """Seconds of ``text``: a number of seconds (``600``) or a duration pandas reads (``90s``,
    ``10min``, ``1h30m``, ``2 hours``); None for None. UsageError (one line) for anything else."""
    if text is None:
        return None
    words = str(text).strip()
    try:
        seconds = float(words)
    except ValueError:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pandas warns of some deprecated unit spellings
                seconds = pd.Timedelta(words).total_seconds()
        except (ValueError, TypeError):
            seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--time-limit takes a positive duration such as 90s, 10min or 1h30m (a bare number is "
                         f"seconds), got {text!r}")
    return seconds


def schedules_at(config: "TrainConfig", episodes: float) -> tuple[float, float]:
    """Where a run of ``config`` has its two schedules after ``episodes`` episodes: (the share of
    the costs its training envs charge, ``--cost-warmup``; the share of the learning rates it
    trains at, ``--anneal-lr``). Both follow ``--episodes``, not the clock."""
    costs = 1.0 if config.cost_warmup <= 0.0 else min(1.0, episodes / (config.cost_warmup * config.episodes))
    rates = max(0.0, 1.0 - episodes / config.episodes) if config.anneal_lr else 1.0
    return costs, rates


def _unfinished(config: "TrainConfig", episodes: float) -> Optional[str]:
    """``the training costs at 8 % ... and the learning rates at 96 % of their start`` where a run
    stopping after ``episodes`` leaves a schedule unfinished; None where both are done."""
    costs, rates = schedules_at(config, episodes)
    parts = []
    if costs < 1.0:
        parts.append(f"the training envs' costs at {costs:.0%} of --fee-bps/--slippage-bps (full from episode "
                     f"{math.ceil(config.cost_warmup * config.episodes):,})")
    if config.anneal_lr and rates > 0.05:
        parts.append(f"the learning rates at {rates:.0%} of their start (annealed to 0 at episode {config.episodes:,})")
    return " and ".join(parts) or None


def stop_note(config: "TrainConfig", episodes: int) -> str:
    """What the ``Time limit reached`` line adds about the schedules a stop after ``episodes`` left."""
    unfinished = _unfinished(config, episodes)
    return "" if unfinished is None else f" with {unfinished}"


class LimitProjection:
    """Rank 0's one early look, once a tenth of ``--time-limit`` has passed, at the episode the
    limit will stop the run near. Where that is before ``--episodes`` and leaves the cost
    warm-up or the rates' annealing unfinished, the agent at the limit has trained at part of
    the costs it will pay, and :meth:`check` returns a warning that says so and what to give."""

    LOOK_AT = 0.1  # the share of the limit after which the speed is measured

    def __init__(self, config: "TrainConfig", limit: float, episodes: int, env_steps: int, envs: int) -> None:
        self.config, self.limit, self.envs = config, limit, envs  # envs: every rank's, which end episodes together
        self.start_episodes, self.start_steps = episodes, env_steps
        self.looked = False

    def check(self, elapsed: float, env_steps: int) -> Optional[str]:
        """The warning, once, at the first call after a tenth of the limit with steps taken since
        the start (``env_steps``: every rank's, as the run counts them); None otherwise."""
        c = self.config
        if self.looked or elapsed < self.LOOK_AT * self.limit or env_steps <= self.start_steps:
            return None
        self.looked = True
        speed = (env_steps - self.start_steps) / elapsed  # env-steps/s, every rank's
        near = self.start_episodes + speed * self.limit / c.env.episode_length
        unfinished = _unfinished(c, near) if near < c.episodes else None
        if unfinished is None:
            return None
        fits = max(self.envs, int(near // self.envs) * self.envs)
        costs = " (trained at part of the costs it will trade at)" if schedules_at(c, near)[0] < 1.0 else ""
        return (f"warning: at {speed:,.0f} env-steps/s, --time-limit {c.time_limit} stops this run near episode "
                f"{near:,.0f} of {c.episodes:,}, with {unfinished}, so the agent at the limit is not a finished "
                f"one{costs}; for an agent finished within the limit, give --episodes {fits} or fewer (the "
                f"schedules follow --episodes)")
