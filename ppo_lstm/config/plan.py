"""The batch rule: how the batch of one update, its minibatches, the rollout length and the
default Adam rates follow ``--num-envs`` and the worker count (docs/batch_scaling.md).

Every rank all-gathers its rollout, so the batch grows with the envs and the workers: a batch
is ``[T, S]``, U = T x S transitions of S env sequences (envs x workers), and a minibatch is
``[T, ~S / minibatches]``, whole sequences in near-equal shares (:func:`share`). T is
:data:`STEPS_PER_ENV` steps of each sequence, or :data:`SHORT_STEPS` from :data:`SHORT_FROM` to
:data:`FULL_FROM` - 1 sequences (:func:`rule_steps`), unless ``--rollout-steps`` sets T or
``--update-interval`` sets U. The S sequences split into :data:`MAX_MINIBATCHES` minibatches,
fewer where a minibatch would hold under :data:`MIN_SEQUENCES` sequences or
:data:`MIN_MINIBATCH` transitions (:func:`rule_minibatches`), unless ``--minibatches`` sets
them. The rates left to the rule are :data:`BASE_RATES` x min(sqrt(m / :data:`BASE_MINIBATCH`),
``--rate-cap``), m = U / minibatches the transitions of one gradient step
(:data:`DEFAULT_RATE_CAP` unless given); at 4 minibatches that is sqrt(U / :data:`BASE_BATCH`).
With ``--minibatches`` given, the rates follow the batch alone, sqrt(U / :data:`BASE_BATCH`).
:class:`BatchPlan` holds what the rule picks for one run and worker count; the functions read a
:class:`~ppo_lstm.config.schema.TrainConfig`.

The rule is versioned (:data:`RULES`, ``--batch-rule``; each version stays selectable), and a
resumed run keeps its version.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from ..errors import UsageError


class BatchSettings(Protocol):
    """The settings the rule reads, as a :class:`~ppo_lstm.config.TrainConfig` holds them (a protocol,
    so the rule imports nothing from the config module, which imports it)."""

    num_envs: int
    rollout_steps: Optional[int]
    update_interval: Optional[int]
    minibatches: Optional[int]
    rate_cap: float
    learning_rate_actor: Optional[float]
    learning_rate_critic: Optional[float]
    epochs: int
    episodes: int
    batch_rule: int
    env: Any  # an EnvConfig: its episode_length

STEPS_PER_ENV = 16  # rollout length T of every env per update, unless --rollout-steps or --update-interval set it
SHORT_STEPS = 8  # ... but this many from SHORT_FROM to FULL_FROM - 1 env sequences (rule_steps)
SHORT_FROM, FULL_FROM = 16, 32
BASE_BATCH = 128  # the batch the base learning rates were tuned at (8 envs x 16 steps, one worker)
BASE_RATES = (3e-4, 1e-3)  # (actor, critic) Adam rates at BASE_BATCH; x sqrt(U / BASE_BATCH) at batch U
MAX_MINIBATCHES = 4  # minibatches of an update when --minibatches is not given, where each holds enough:
MIN_SEQUENCES = 4  # ... at least this many env sequences
BASE_MINIBATCH = BASE_BATCH // MAX_MINIBATCHES  # transitions of one gradient step at the base rates
MIN_MINIBATCH = 64  # ... and at least this many transitions (4 sequences of 16 steps, 8 of 8)
DEFAULT_RATE_CAP = 4.0  # ... up to this scale (--rate-cap), reached at a batch of 2,048 (docs/batch_scaling.md)
SAVED_RATE_CAP = 8.0  # the cap of a checkpoint written before --rate-cap existed: it resumes at the rates it had
SHARD_FROM = 128  # --shard-update auto: shard where each rank's share of a minibatch holds this many transitions


def share(count: int, part: int, parts: int) -> slice:
    """Part ``part`` of ``parts`` contiguous, near-equal pieces of ``range(count)`` (the first
    ``count % parts`` pieces one longer; a piece may be empty)."""
    base, longer = divmod(count, parts)
    start = part * base + min(part, longer)
    return slice(start, start + base + (part < longer))


def shares(count: int, parts: int) -> list[slice]:
    """Every :func:`share` of ``range(count)`` in ``parts``, in order."""
    return [share(count, part, parts) for part in range(parts)]


@dataclass(frozen=True)
class BatchRule:
    """One version of the rule's choices: the rollout length from :data:`SHORT_FROM` to
    :data:`FULL_FROM` - 1 sequences, the fewest transitions a rule-picked minibatch holds, and
    whether minibatches may differ by one sequence (else the count divides the sequences)."""

    version: int
    short_steps: int
    min_minibatch: int
    unequal: bool


RULES = {1: BatchRule(1, STEPS_PER_ENV, 0, False), 2: BatchRule(2, SHORT_STEPS, MIN_MINIBATCH, False),
         3: BatchRule(3, SHORT_STEPS, MIN_MINIBATCH, True)}
LATEST_RULE = max(RULES)


def rule_steps(sequences: int, rule: int = LATEST_RULE) -> int:
    """The rollout length T the rule gives S env ``sequences``: :data:`STEPS_PER_ENV`, but the
    rule's ``short_steps`` from :data:`SHORT_FROM` to :data:`FULL_FROM` - 1 sequences, where 4
    minibatches of 16-step sequences would each hold fewer than 8 (docs/batch_scaling.md)."""
    return RULES[rule].short_steps if SHORT_FROM <= sequences < FULL_FROM else STEPS_PER_ENV


def rollout_steps(config: BatchSettings, world_size: int = 1) -> int:
    """T when ``--update-interval`` is not given: ``--rollout-steps``, else :func:`rule_steps`."""
    if config.rollout_steps is not None:
        return config.rollout_steps
    return rule_steps(config.num_envs * world_size, config.batch_rule)


def update_batch(config: BatchSettings, world_size: int = 1) -> int:
    """U, the transitions of one update over all workers: ``--update-interval`` when given
    (a global batch, whatever the worker count), else :func:`rollout_steps` steps of every
    env of every worker, so the batch grows with ``--num-envs`` and the worker count."""
    if config.update_interval is not None:
        return config.update_interval
    return rollout_steps(config, world_size) * config.num_envs * world_size


def batch_rate_scale(batch: int, cap: float = DEFAULT_RATE_CAP, base: int = BASE_BATCH) -> float:
    """min(sqrt(batch / base), cap): how the default learning rates grow with the batch
    (``base``: :data:`BASE_BATCH`; :data:`BASE_MINIBATCH` for the transitions of a minibatch).
    A batch k times larger gives k times fewer updates on the same env steps, each with a
    gradient of less noise; Adam's rates then scale by sqrt(k), up to the cap (docs/batch_scaling.md)."""
    return min(math.sqrt(batch / base), cap)


def least_sequences(steps: int, rule: int = LATEST_RULE) -> int:
    """The fewest env sequences of ``steps`` steps a rule-picked minibatch holds:
    :data:`MIN_SEQUENCES`, and enough for :data:`MIN_MINIBATCH` transitions (8 at 8 steps)."""
    return max(MIN_SEQUENCES, math.ceil(RULES[rule].min_minibatch / max(steps, 1)))


def rule_minibatches(sequences: int, steps: int = STEPS_PER_ENV, rule: int = LATEST_RULE) -> int:
    """The minibatches the rule splits S env ``sequences`` of ``steps`` steps into: the most,
    up to :data:`MAX_MINIBATCHES`, that leave each :func:`least_sequences` (and, before
    version 3, divide S); 1 where none does."""
    least, unequal = least_sequences(steps, rule), RULES[rule].unequal
    fits = [m for m in range(1, MAX_MINIBATCHES + 1) if (unequal or sequences % m == 0) and sequences // m >= least]
    return max(fits, default=1)


def minibatches(config: BatchSettings, world_size: int = 1) -> int:
    """The minibatches of one update: ``--minibatches`` when given, else :func:`rule_minibatches`
    of the batch's env sequences (envs x workers) and their steps."""
    if config.minibatches is not None:
        return config.minibatches
    sequences = config.num_envs * world_size
    return rule_minibatches(sequences, update_batch(config, world_size) // sequences, config.batch_rule)


def rate_basis(config: BatchSettings, world_size: int = 1) -> tuple[int, int]:
    """(transitions, base): the rates scale by sqrt(transitions / base). Where the rule picked
    fewer than :data:`MAX_MINIBATCHES` minibatches, the minibatch (U / :func:`minibatches`)
    against :data:`BASE_MINIBATCH`; else the batch U against :data:`BASE_BATCH` (with
    ``--minibatches`` given, or at 4 minibatches, where the two are the same number)."""
    u = update_batch(config, world_size)
    count = minibatches(config, world_size)
    if config.minibatches is not None or count == MAX_MINIBATCHES:
        return u, BASE_BATCH
    return u // count, BASE_MINIBATCH


def rate_scale(config: BatchSettings, world_size: int = 1) -> float:
    """min(sqrt(transitions / base), ``--rate-cap``) of :func:`rate_basis`."""
    transitions, base = rate_basis(config, world_size)
    return batch_rate_scale(transitions, config.rate_cap, base)


def learning_rates(config: BatchSettings, world_size: int = 1) -> tuple[float, float]:
    """The (actor, critic) Adam rates a run trains at, before annealing: each given rate as
    it is, each left out as :data:`BASE_RATES` x :func:`rate_scale`."""
    scale = rate_scale(config, world_size)
    actor, critic = config.learning_rate_actor, config.learning_rate_critic
    return (BASE_RATES[0] * scale if actor is None else actor,
            BASE_RATES[1] * scale if critic is None else critic)


def describe_batch(config: BatchSettings, world_size: int = 1) -> str:
    """The start-up line's account of the batch and the rates: its split, the rule or the
    flags that set each, so a user sees what ``--num-envs`` and the workers picked."""
    u, n, t = update_batch(config, world_size), config.num_envs, steps_per_env(config, world_size)
    if config.update_interval is not None:
        rule = "--update-interval"
    elif config.rollout_steps is not None:
        rule = "--rollout-steps"
    elif t == SHORT_STEPS:
        rule = f"default: {SHORT_STEPS} steps x envs x workers from {SHORT_FROM} to {FULL_FROM - 1} env sequences"
    else:
        rule = f"default: {STEPS_PER_ENV} steps x envs x workers"
    actor, critic = learning_rates(config, world_size)
    transitions, base = rate_basis(config, world_size)
    scale = _scale_text(transitions, base, config.rate_cap)
    if config.learning_rate_actor is None and config.learning_rate_critic is None:
        how = f"{BASE_RATES[0]:g} / {BASE_RATES[1]:g} {scale}"
    elif config.learning_rate_actor is None:
        how = f"--learning-rate-critic as given, the other {BASE_RATES[0]:g} {scale}"
    elif config.learning_rate_critic is None:
        how = f"--learning-rate-actor as given, the other {BASE_RATES[1]:g} {scale}"
    else:
        how = "--learning-rate-actor and --learning-rate-critic as given"
    count = minibatches(config, world_size)
    sizes = sorted({t * (share.stop - share.start) for share in shares(n * world_size, count)}, reverse=True)
    split = f"{count} minibatch{'es' if count > 1 else ''} of {' or '.join(map(str, sizes))}"
    if base == BASE_MINIBATCH:  # the rule took fewer than MAX_MINIBATCHES
        split += (f" (default: {MAX_MINIBATCHES}, fewer to keep at least {least_sequences(t, config.batch_rule)} of the "
                  f"{n * world_size} env sequences in each)")
    return (f"Batch: {u} transitions per update = {world_size} worker(s) x {n} envs x {t} steps ({rule}); "
            f"{split}, {config.epochs} epochs; learning rates {actor:.3g} / {critic:.3g} ({how})")


def _scale_text(transitions: int, base: int, cap: float) -> str:
    root = batch_rate_scale(transitions, math.inf, base)
    what = "" if base == BASE_BATCH else ", the minibatch's transitions"
    return (f"x sqrt({transitions}/{base}{what}) = x{root:.3g}" if root <= cap
            else f"x{cap:g}, the cap (--rate-cap), as sqrt({transitions}/{base}{what}) = {root:.3g} is more")


def steps_per_env(config: BatchSettings, world_size: int = 1) -> int:
    """Rollout length T: each of a worker's envs steps U / (world_size * num_envs) times."""
    u, n, w = update_batch(config, world_size), config.num_envs, world_size
    if u % (n * w):
        valid = [k * n * w for k in range(1, 9)]
        raise UsageError(
            f"--update-interval {u} does not divide into {w} worker(s) x {n} envs; "
            f"use a multiple of {n * w} (e.g. {', '.join(map(str, valid[:4]))}) or change --num-envs"
        )
    return u // (n * w)


@dataclass(frozen=True)
class BatchPlan:
    """What the rule (or the flags) pick for one run on ``world_size`` workers, derived once
    (:meth:`of`) and passed on: the rollout length T of every env, the batch U = T x N x W, its
    minibatches, the (actor, critic) Adam rates before annealing, and the start-up line."""

    world_size: int
    num_envs: int
    steps: int
    batch: int
    minibatches: int
    rates: tuple[float, float]
    description: str

    @classmethod
    def of(cls, config: BatchSettings, world_size: int = 1) -> "BatchPlan":
        """The plan of ``config`` on ``world_size`` workers; UsageError where U does not divide."""
        return cls(world_size, config.num_envs, steps_per_env(config, world_size), update_batch(config, world_size),
                   minibatches(config, world_size), learning_rates(config, world_size),
                   describe_batch(config, world_size))

    def shards_update(self, mode: str) -> bool:
        """Whether the workers shard the update (``--shard-update``): ``on``, ``off``, or ``auto``:
        on several workers where each rank's share of the smallest minibatch holds at least
        :data:`SHARD_FROM` transitions; below, the sum of every gradient step costs more than
        the share saves (docs/distributed.md)."""
        if self.world_size == 1 or mode == "off":
            return False
        return mode == "on" or self.share_transitions >= SHARD_FROM

    @property
    def share_transitions(self) -> int:
        """The transitions of one worker's share of the smallest minibatch."""
        return self.steps * (self.sequences // self.minibatches // self.world_size)

    @property
    def sequences(self) -> int:
        """S, the env sequences of one batch (envs x workers)."""
        return self.num_envs * self.world_size

    def updates_for(self, episodes: int, episode_length: int) -> int:
        """The updates a run of ``episodes`` episodes makes (at least 1)."""
        return max(1, math.ceil(episodes * episode_length / self.batch))
