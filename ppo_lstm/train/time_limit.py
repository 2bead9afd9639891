"""``--time-limit DURATION`` and ``--train-for DURATION``: a training invocation's wall clock.

``--time-limit`` is a budget for one invocation, a cut: the run keeps its ``--episodes``.
``--train-for`` makes the time the run's length (:class:`EpisodeFit`, below).

The budget counts from the trainer's start (after start-up and any resume). When any rank's
clock passes it, every rank learns so in the iteration's one collective
(:mod:`ppo_lstm.train.agreement`) and the run ends at that update as it ends at its last one:
a hold-out backtest, a checkpoint and the summary, exit code 0. ``--resume`` goes on from there.

The cost warm-up and the rates' annealing follow the run's progress through ``--episodes``
(:mod:`ppo_lstm.config.schedule`), so a limit that stops the
run well before them leaves an agent trained at part of the costs; :class:`LimitProjection`
warns of that early, from the run's speed, and the stop line says where they stopped.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

from ..config.schedule import schedules_at
from ..config.values import limit_seconds

if TYPE_CHECKING:
    from ..config.plan import BatchPlan
    from ..config.schema import TrainConfig


def _unfinished(config: "TrainConfig", plan: "BatchPlan", episodes: float, env_steps: float) -> Optional[str]:
    """``the training costs at 8 % ... and the learning rates at 96 % of their start`` where a run
    stopping after ``episodes`` and ``env_steps`` leaves a schedule unfinished; None where both are done."""
    costs, rates = schedules_at(config, plan, env_steps, episodes)
    parts = []
    if costs < 1.0:
        parts.append(f"the training envs' costs at {costs:.0%} of --fee-bps/--slippage-bps (full from episode "
                     f"{math.ceil(config.cost_warmup * config.episodes):,})")
    if config.anneal_lr and rates > 0.05:
        parts.append(f"the learning rates at {rates:.0%} of their start (annealed to 0 at episode {config.episodes:,})")
    return " and ".join(parts) or None


def stop_note(config: "TrainConfig", plan: "BatchPlan", episodes: int, env_steps: int) -> str:
    """What the ``Time limit reached`` line adds about the schedules a stop after ``episodes`` and
    ``env_steps`` left."""
    unfinished = _unfinished(config, plan, episodes, env_steps)
    return "" if unfinished is None else f" with {unfinished}"


class LimitProjection:
    """Rank 0's one early look, once a tenth of ``--time-limit`` has passed, at the episode the
    limit will stop the run near. Where that is before ``--episodes`` and leaves the cost
    warm-up or the rates' annealing unfinished, the agent at the limit has trained at part of
    the costs it will pay, and :meth:`check` returns a warning that says so and what to give."""

    LOOK_AT = 0.1  # the share of the limit after which the speed is measured

    def __init__(self, config: "TrainConfig", plan: "BatchPlan", limit: float, episodes: int, env_steps: int) -> None:
        self.config, self.plan, self.limit = config, plan, limit
        self.envs = config.num_envs * plan.world_size  # every rank's, which end episodes together
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
        near_steps = self.start_steps + speed * self.limit
        near = self.start_episodes + speed * self.limit / c.env.episode_length
        unfinished = _unfinished(c, self.plan, near, near_steps) if near < c.episodes else None
        if unfinished is None:
            return None
        fits = max(self.envs, int(near // self.envs) * self.envs)
        at_limit = schedules_at(c, self.plan, near_steps, near)
        costs = " (trained at part of the costs it will trade at)" if at_limit.costs < 1.0 else ""
        return (f"warning: at {speed:,.0f} env-steps/s, --time-limit {c.time_limit} stops this run near episode "
                f"{near:,.0f} of {c.episodes:,}, with {unfinished}, so the agent at the limit is not a finished "
                f"one{costs}; for an agent finished within the limit, give --episodes {fits} or fewer (the "
                f"schedules follow --episodes), or --train-for {c.time_limit} in place of --episodes")


UNFITTED_EPISODES = 2 ** 50  # a --train-for run's episodes until they are fitted: never reached, exact in float64
FIT_AT = (0.05, 0.25, 0.5)  # the shares of --train-for at which the episodes are fitted, then refitted


def resumed_fit(done: int, recorded: int, env_steps: int, seconds_so_far: float, seconds: float,
                episode_length: int, round_size: int) -> int:
    """The episodes a resumed ``--train-for`` run of ``seconds`` trains with until its first fit:
    the ``done`` episodes and what fits in the time at the speed its checkpoint records
    (``env_steps`` in ``seconds_so_far``), so its cost warm-up and annealing go on from where
    they were, rather than restart. Without a recorded speed, the run's ``recorded`` episodes.
    At least one round of the envs' episodes more than ``done``."""
    at_least = (done // round_size + 1) * round_size
    if seconds_so_far <= 0.0 or env_steps <= 0:
        return max(recorded, at_least)
    fits = done + env_steps / seconds_so_far * seconds / episode_length
    return max(at_least, int(fits // round_size) * round_size)


class EpisodeFit:
    """``--train-for``: the episodes that fit in the time, from the run's measured speed.

    Until a twentieth of the time has passed (and at least two iterations after the first,
    whose start-up is not measured), the run trains with :data:`UNFITTED_EPISODES`, so its
    cost warm-up has barely begun and its rates are at their start. Then rank 0 measures its
    env-steps/s since the first iteration and proposes the whole rounds of the envs' episodes
    (``round_size``: every rank's envs, which end their episodes together) that fit in the
    time left; every rank takes the proposal in the same collective (:meth:`settle`), and the
    run is from there a run of that many episodes, which its checkpoints record. At a quarter
    and at half of the time the count is fitted again from the speed so far, which by then
    includes the hold-out backtests and checkpoints the first second may not."""

    def __init__(self, text: str, episode_length: int, round_size: int) -> None:
        self.text, self.seconds = text, limit_seconds(text, "--train-for") or 0.0
        self.episode_length, self.round_size = episode_length, round_size
        self.first: Optional[tuple[float, int]] = None  # (seconds, env steps) at the end of the first iteration
        self.iterations = 0
        self.speed = 0.0  # rank 0's measured env-steps/s, every rank's steps
        self.proposal = 0  # rank 0's fitted episodes, for the next collective (0: none pending)
        self.fits = 0  # the fits every rank has taken

    @property
    def fitted(self) -> bool:
        return self.fits > 0

    def observe(self, elapsed: float, env_steps: int, episodes: int) -> None:
        """After an iteration (rank 0): ``elapsed`` seconds since the start, ``env_steps`` and
        ``episodes`` as the run counts them (every rank's). Sets :attr:`proposal` when a fit is due."""
        self.iterations += 1
        if self.first is None:
            self.first = (elapsed, env_steps)
            return
        due = self.fits < len(FIT_AT) and self.iterations >= 3 and elapsed >= FIT_AT[self.fits] * self.seconds
        if self.proposal or not due:
            return
        self.speed = (env_steps - self.first[1]) / max(elapsed - self.first[0], 1e-9)
        fits = episodes + self.speed * max(0.0, self.seconds - elapsed) / self.episode_length
        self.proposal = max(1, int(fits // self.round_size)) * self.round_size

    def settle(self, proposed: int, episodes: int) -> int:
        """The run's episodes, on every rank alike: the ``proposed`` ones, and at least one round
        more than the ``episodes`` counted so far (the proposal was made an iteration earlier)."""
        self.fits += 1
        self.proposal = 0
        return max(proposed, (episodes // self.round_size + 1) * self.round_size)

    def line(self, episodes: int, done: int) -> str:
        """Rank 0's log line on the fitted ``episodes``, ``done`` of them trained."""
        if self.fits > 1:
            return (f"--train-for {self.text}: at {self.speed:,.0f} env-steps/s so far, {episodes} episodes fit "
                    f"({episodes - done} more; fitted again at {FIT_AT[self.fits - 1]:.0%} of the time)")
        return (f"--train-for {self.text}: at {self.speed:,.0f} env-steps/s, {episodes} episodes fit in the time "
                f"({episodes - done} more); the cost warm-up and the rates' annealing follow them, and the run "
                f"ends at episode {episodes} or when the time is up, whichever comes first")


class TimeBudget:
    """What the training loop asks of the clock: whether the time is up (the shorter of
    ``--time-limit`` and ``--train-for``), rank 0's early warning of a ``--time-limit`` that
    cuts the schedules short, and ``--train-for``'s episode fit."""

    def __init__(self, config: "TrainConfig", plan: "BatchPlan", rank: int, episodes: int, env_steps: int) -> None:
        self.rank, round_size = rank, config.num_envs * plan.world_size
        self.fit = (None if config.train_for is None
                    else EpisodeFit(config.train_for, config.env.episode_length, round_size))
        limits = [x for x in (limit_seconds(config.time_limit), self.fit and self.fit.seconds) if x]
        self.seconds = min(limits) if limits else None
        self.projection = (LimitProjection(config, plan, self.seconds, episodes, env_steps)
                           if self.seconds is not None and self.fit is None and rank == 0 else None)

    @property
    def fitting(self) -> bool:
        """A ``--train-for`` run whose episodes are not fitted yet."""
        return self.fit is not None and not self.fit.fitted

    def time_up(self, elapsed: float) -> bool:
        return self.seconds is not None and elapsed >= self.seconds

    def proposal(self) -> int:
        """Rank 0's fitted episodes for this iteration's collective; 0 for none."""
        return self.fit.proposal if self.fit is not None and self.rank == 0 else 0

    def observe(self, elapsed: float, env_steps: int, episodes: int) -> Optional[str]:
        """After an iteration: feed the fit (rank 0); the warning to log, if one is due."""
        if self.fit is not None and self.rank == 0:
            self.fit.observe(elapsed, env_steps, episodes)
        return self.projection.check(elapsed, env_steps) if self.projection is not None else None


def time_up_line(config: "TrainConfig", plan: "BatchPlan", episodes: int, env_steps: int, unfitted: bool) -> str:
    """The line of a run the clock stopped at ``episodes`` and ``env_steps`` (``unfitted``: before
    ``--train-for`` fitted its episodes, so the run is recorded as one of the episodes it trained)."""
    if unfitted:
        return (f"Time is up (--train-for {config.train_for}) before the run had measured its speed: it trained "
                f"{episodes} episodes, which its checkpoint records as the run's --episodes")
    train_for = limit_seconds(config.train_for, "--train-for")
    if train_for is not None and train_for <= (limit_seconds(config.time_limit) or math.inf):
        return (f"Time is up (--train-for {config.train_for}): stopped at episode {episodes} of {config.episodes}"
                f"{stop_note(config, plan, episodes, env_steps)}, checkpoint saved")
    return (f"Time limit reached (--time-limit {config.time_limit}): stopped at episode {episodes} of "
            f"{config.episodes}{stop_note(config, plan, episodes, env_steps)}, checkpoint saved; --resume goes on")
