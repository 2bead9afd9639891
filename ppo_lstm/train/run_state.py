"""The state of a run: its counters and episode quotas, the rules for resuming it (on the
same or another layout), and the checkpoint dict that carries it.

Every counter is equal on every rank, except ``rank_episodes`` and ``share`` (this rank's
episodes counted so far, and how many it must count).
"""
from __future__ import annotations

import datetime
import math
import random
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch

from ..rundir.checkpoint import from_safe, on_cpu, to_safe
from ..config.migrate import CHECKPOINT_FORMAT
from ..config.schema import TrainConfig
from ..errors import one_line
from ..distributed import episode_share, remaining_episode_shares
from ..algo.episodes import EpisodeTotals
from ..algo.rollout import RolloutCollector
from ..algo.value_norm import RunningMeanStd

# settings that decide what the envs trade and what is held out: a resume that changes one restarts the envs
MARKET_SETTINGS = ("env", "data", "data_start", "data_end", "holdout", "holdout_episodes")


def new_run_id() -> str:
    """A run's identity, kept across resumes: its start time and a random tag."""
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"


@dataclass
class RunState:
    """Counters of a run; see the module docstring."""

    share: int
    next_log_at: int
    next_checkpoint_at: int
    run_id: str = field(default_factory=new_run_id)
    update: int = 0
    global_episodes: int = 0
    rank_episodes: int = 0
    env_steps: int = 0
    interval_totals: EpisodeTotals = field(default_factory=EpisodeTotals)  # since the last log line
    checkpoint_totals: EpisodeTotals = field(default_factory=EpisodeTotals)  # since the last checkpoint
    best_score: float = -math.inf  # rank 0's: the score of best.pt (hold-out or training return)
    best_holdout: Optional[dict[str, Any]] = None  # rank 0's: best.pt's hold-out line and figures
    train_seconds: float = 0.0  # the run's training wall time, every invocation's, up to its last checkpoint
    value_norm: Optional[RunningMeanStd] = None  # --norm-value: the rollout's statistics, alike on every rank

    @classmethod
    def fresh(cls, config: TrainConfig, rank: int, world_size: int,
              value_norm: Optional[RunningMeanStd] = None) -> "RunState":
        return cls(episode_share(config.episodes, rank, world_size), config.log_interval, config.checkpoint_interval,
                   value_norm=value_norm)

    # ------------------------------------------------------------------ counting

    @property
    def rank_done(self) -> bool:
        return self.rank_episodes >= self.share

    def take_quota(self, records: np.ndarray) -> np.ndarray:
        """The records ``[k, 6]`` this rank counts: the first ones, up to its share."""
        counted = records[: max(0, self.share - self.rank_episodes)]
        self.rank_episodes += len(counted)
        return counted

    def count(self, records: list[list[float]], config: TrainConfig) -> tuple[list[tuple[int, EpisodeTotals]],
                                                                             EpisodeTotals]:
        """Count every rank's episodes of an update one by one. Returns the log lines due,
        as (episode number, totals since the previous line), and the update's totals."""
        lines = []
        for record in records:
            self.global_episodes += 1
            self.interval_totals.add(EpisodeTotals.of_records([record]))
            if self.global_episodes >= self.next_log_at or self.global_episodes == config.episodes:
                lines.append((self.global_episodes, self.interval_totals))
                self.interval_totals = EpisodeTotals()
                self.next_log_at = (self.global_episodes // config.log_interval + 1) * config.log_interval
        update_totals = EpisodeTotals.of_records(records)
        self.checkpoint_totals.add(update_totals)
        return lines, update_totals

    def close_checkpoint_period(self, checkpoint_interval: int) -> float:
        """The period's training score (mean dollar return of its episodes; -inf without
        any); starts the next period."""
        totals = self.checkpoint_totals
        score = totals.dollar_return / totals.episodes if totals.episodes else -math.inf
        self.checkpoint_totals = EpisodeTotals()
        self.next_checkpoint_at = (self.global_episodes // checkpoint_interval + 1) * checkpoint_interval
        return score

    def split_afresh(self, episodes: int, rank: int, world_size: int) -> None:
        """This rank's share of a run of ``episodes``: what it has counted, and its part of what is
        left, split over the ranks as at a fresh start (a resume onto another layout, a --train-for fit)."""
        self.share = self.rank_episodes + remaining_episode_shares(max(0, episodes - self.global_episodes), [],
                                                                   world_size)[rank]

    def offer_best(self, score: float) -> bool:
        """Whether ``score`` beats every earlier checkpoint's (then it is the best so far)."""
        is_best = score > self.best_score
        self.best_score = max(self.best_score, score)
        return is_best

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self, config: TrainConfig, world_size: int, agent: torch.nn.Module,
                   optimizer: torch.optim.Optimizer, permutation_generator: torch.Generator,
                   ranks: list[dict[str, Any]], score: float,
                   data: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
        """The checkpoint dict: weights, optimizer, config, counters, every rank's state and
        ``data``, the training data's fingerprint (``data_fingerprint``), every tensor on the CPU;
        with ``--norm-value`` also ``value_norm``, its statistics (without it, no such key)."""
        value_norm = {} if self.value_norm is None else {"value_norm": self.value_norm.state()}
        return on_cpu({
            "format": CHECKPOINT_FORMAT,
            "run_id": self.run_id,
            "model": agent.state_dict(),
            "optimizer": optimizer.state_dict(),
            "config": config.to_dict(),
            "world_size": world_size,
            "permutation_generator": permutation_generator.get_state(),
            "counters": {
                "update": self.update, "global_episodes": self.global_episodes, "env_steps": self.env_steps,
                "interval_totals": self.interval_totals.as_list(),
                "checkpoint_totals": self.checkpoint_totals.as_list(),
                "next_log_at": self.next_log_at, "next_checkpoint_at": self.next_checkpoint_at,
                "best_score": self.best_score, "score": score, "best_holdout": self.best_holdout,
                "train_seconds": self.train_seconds,
            },
            "ranks": ranks,
            "data": data,
            **value_norm,
        })

    def restore(self, state: dict[str, Any], config: TrainConfig, rank: int, world_size: int) -> Optional[str]:
        """Take the counters of checkpoint ``state``, and this rank's quota.

        Returns None when this rank continues its own saved stream (same world size,
        ``--num-envs`` and market), else the warning to print: then what is left is
        split afresh and the envs must restart. ``--norm-value``'s statistics are taken too,
        whatever the layout (a checkpoint without them: they start afresh).
        """
        counters = state["counters"]
        self.update, self.global_episodes = counters["update"], counters["global_episodes"]
        self.env_steps = counters["env_steps"]
        self.interval_totals = EpisodeTotals.from_list(counters["interval_totals"])
        self.checkpoint_totals = EpisodeTotals.from_list(counters["checkpoint_totals"])
        self.next_log_at, self.next_checkpoint_at = counters["next_log_at"], counters["next_checkpoint_at"]
        self.best_score = counters["best_score"]
        self.best_holdout = counters["best_holdout"]
        self.train_seconds = counters["train_seconds"]
        self.run_id = state["run_id"] or self.run_id  # the oldest checkpoints carry none
        if self.value_norm is not None and state.get("value_norm") is not None:
            self.value_norm.load(state["value_norm"])
        saved_world, saved_envs = state["world_size"], state["config"]["num_envs"]
        same_layout = (saved_world == world_size and len(state["ranks"]) == world_size
                       and saved_envs == config.num_envs)
        saved, now = state["config"], config.to_dict()
        same_market = all(saved.get(key) == now[key] for key in MARKET_SETTINGS)
        if not same_market:  # the hold-out (or training bars) changed: earlier scores do not compare
            self.best_score, self.best_holdout = -math.inf, None
        if same_layout and same_market:
            self.rank_episodes = state["ranks"][rank]["rank_episodes"]
            done = [r["rank_episodes"] for r in state["ranks"]]
            self.share = self.rank_episodes + remaining_episode_shares(config.episodes, done, world_size)[rank]
            return None
        self.rank_episodes = 0
        self.split_afresh(config.episodes, rank, world_size)
        why = (f"the checkpoint was written by {saved_world} worker(s) x {saved_envs} envs and this run has "
               f"{world_size} x {config.num_envs}" if not same_layout else "the environment settings changed")
        also = "" if same_market else "; best.pt is chosen afresh from here on"
        return (f"warning: {why}: weights, optimizer and counters restored; environments and per-rank RNG "
                f"streams restarted{also}")


def capture_rank_state(rank_episodes: int, rollout: RolloutCollector) -> dict[str, Any]:
    """Everything one rank needs to continue bit for bit: its count, the process-wide RNGs
    and its rollout state (in checkpoint-safe containers)."""
    return to_safe({
        "rank_episodes": rank_episodes,
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": np.random.get_state(),
        "python_rng": random.getstate(),
        **rollout.state(),
    })


def restore_rank_state(saved: dict[str, Any], rollout: RolloutCollector, generation: int) -> Optional[str]:
    """Inverse of :func:`capture_rank_state` (the count is restored by :meth:`RunState.restore`).

    Returns the note of :meth:`RolloutCollector.load_state` (a sampler re-seeded for
    ``generation`` because the state was written on another device type), else None.
    Raises when the state cannot be restored; the caller then restarts this rank's envs."""
    saved = from_safe(saved)
    note = rollout.load_state(saved, generation)
    torch.set_rng_state(saved["torch_rng"])
    np.random.set_state(saved["numpy_rng"])
    version, internal, gauss = saved["python_rng"]
    random.setstate((version, tuple(internal), gauss))  # setstate wants tuples all the way down
    return note


def restore_rank_or_restart(saved: dict[str, Any], rollout: RolloutCollector, generation: int,
                            rank: int) -> Optional[str]:
    """This rank's RNGs and rollout state (:func:`restore_rank_state`); None, or the warning to
    print. A state that cannot be restored, for whatever reason, restarts this rank's envs and
    sampler (a warning, never a traceback); one written on another device type keeps the envs
    and re-seeds only the sampler."""
    try:
        note = restore_rank_state(saved, rollout, generation)
    except Exception as err:  # noqa: BLE001 - any unreadable rank state: start this rank's streams afresh
        rollout.restart(generation)
        rollout.reseed_sampler(generation)
        warning = (f"warning: rank {rank}'s saved rollout state could not be restored ({one_line(err)}): "
                   f"its environments and action sampler restarted; weights, optimizer and counters restored")
        if rank != 0:  # rank 0's notes reach the console and the log; the others speak for themselves
            print(warning, file=sys.stderr, flush=True)
        return warning
    return None if note is None else f"warning: {note}; weights, optimizer, counters and environments restored"
