"""One worker's training loop, read top to bottom in :meth:`Trainer.run`: collect a
rollout, gather it across ranks, update, agree, log, checkpoint.

Shapes: T rollout steps per env, N envs on this worker, W workers. Every rank runs
the identical update on the gathered ``[T, N*W]`` batch, so parameters stay equal
without a broadcast.
"""
from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from envs.data import DataError, MarketData, load_ohlcv

from .agreement import agree
from .build import build_agent, build_optimizer, check_model_matches
from .buffer import RolloutBatch
from .checkpoint import CheckpointDir
from .config import TrainConfig, steps_per_env
from .distributed import Worker, episode_share, parameters_in_sync, trades_history
from .errors import TrainingError, UsageError
from .logger import NullLogger, RunLogger, format_episode_line
from .ppo import PPOSettings, UpdateStats, ppo_update
from .rollout import RolloutCollector
from .run_state import RunState, capture_rank_state, restore_rank_state
from .seeding import derive_seed
from .shutdown import StopRequest

MAX_BAD_UPDATES = 3
# Debug/test hook: when set to a directory, every rank saves its final model and optimizer
# state there as rank<r>_final.pt after training finishes (to check ranks end bitwise equal).
DUMP_FINAL_VARIABLE = "PPO_LSTM_DUMP_FINAL_DIR"


class Trainer:
    """Trains the shared agent on this worker's envs; rank 0 logs and checkpoints."""

    def __init__(self, config: TrainConfig, worker: Worker, resume: Optional[tuple[Path, dict[str, Any]]],
                 stop: StopRequest, notes: tuple[str, ...] = ()) -> None:
        self.config, self.comm, self.device, self.stop = config, worker.comm, worker.device, stop
        self.notes = list(notes)  # start-up lines for rank 0's console and log
        self.rank, self.world_size = self.comm.rank, self.comm.world_size
        self.steps = steps_per_env(config, self.world_size)
        self.settings = PPOSettings(config.clip, config.epochs, config.minibatches, config.ent_coef, config.vf_coef,
                                    config.max_grad_norm, config.clip_vloss, config.norm_adv, config.target_kl)
        self.total_updates_estimate = max(1, math.ceil(config.episodes * config.env.episode_length
                                                       / config.update_interval))
        self.bad_updates = 0

        torch.manual_seed(config.seed)  # identical initial weights on every rank
        self.agent = build_agent(config).to(self.device)
        self.optimizer = build_optimizer(config, self.agent)
        self.permutation_generator = torch.Generator().manual_seed(derive_seed(config.seed, 7))  # shared by all ranks
        random.seed(derive_seed(config.seed, self.rank, 13))
        np.random.seed(derive_seed(config.seed, self.rank, 17))
        self.rollout = RolloutCollector(config, self.agent, self.rank, self.steps, self.device, self._market_data())
        self.state = RunState.fresh(config, self.rank, self.world_size)
        self.resumed_from: Optional[Path] = None
        if resume is not None:
            self._restore(*resume)

        self.checkpoints = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
        if self.rank == 0:
            self.checkpoints.remove_stale_temp_files()  # from a writer killed mid-save; the run lock is held
            self.checkpoints.adopt(self.state.run_id, self.resumed_from)
            run_dir = Path(config.checkpoint_dir)
            self.log: RunLogger | NullLogger = RunLogger(
                config.log_file, run_dir / "metrics.csv", config.episodes, self.state.global_episodes,
                config.progress, run_dir / "tb" if config.tensorboard else None)
        else:
            self.log = NullLogger()

    def _market_data(self) -> Optional[MarketData]:
        """Rank 0 (every rank with --data-all-ranks) trades --data; the others simulate."""
        c = self.config
        if not trades_history(c, self.rank):
            return None
        try:
            return load_ohlcv(c.data, c.date_format, min_rows=c.env.window + c.env.episode_length + 1)
        except DataError as err:
            raise UsageError(str(err)) from None

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        """Load weights, optimizer and counters; and, when this rank's layout and market are
        unchanged, its RNGs and rollout state (else its envs restart)."""
        check_model_matches(self.config, state, path)
        self.agent.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(self.optimizer.param_groups, (self.config.learning_rate_actor,
                                                            self.config.learning_rate_critic)):
            group["lr"] = lr  # the run's rates (a rate given on the command line wins)
        self.permutation_generator.set_state(state["permutation_generator"])
        warning = self.state.restore(state, self.config, self.rank, self.world_size)
        if warning is None:
            restore_rank_state(state["ranks"][self.rank], self.rollout)
        else:
            self.rollout.restart(generation=self.state.update)
            self.notes.append(warning)
        self.resumed_from = path

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Train until every rank has finished its share of episodes. Returns the exit code."""
        c, s = self.config, self.state
        self._announce()
        start = time.perf_counter()
        try:
            finished = s.global_episodes >= c.episodes
            while not finished:
                tic = time.perf_counter()
                self._ramp_costs()
                records = s.take_quota(self.rollout.collect(s.update))  # [k, 6] this rank counts
                s.env_steps += self.steps * c.num_envs * self.world_size
                batch = self.rollout.finish().map(lambda _, t: self.comm.gather(t, dim=1))  # [T, N*W]
                stats, skipped = self._update(batch)
                agreed = agree(self.comm, records, s.rank_done, self.stop.signum or 0, time.perf_counter() - tic,
                               self.steps * c.num_envs, self.device)
                finished = agreed.finished
                self._log_update(agreed.records, stats, skipped, agreed.rank_sps, time.perf_counter() - start)
                if finished or agreed.signum or s.global_episodes >= s.next_checkpoint_at:
                    self._checkpoint()
                if agreed.signum:
                    self.log.line(f"interrupted at episode {s.global_episodes}, checkpoint saved")
                    self.comm.barrier()  # nobody exits before rank 0 has written
                    return 128 + agreed.signum  # 130 for SIGINT, 143 for SIGTERM
                if s.update % c.sync_check_interval == 0:
                    parameters_in_sync(self.comm, self.agent, self.optimizer)
            self.log.line(f"Training finished: {s.global_episodes} episodes, {s.update} updates, "
                          f"{s.env_steps} env steps in {time.perf_counter() - start:.1f}s")
            if os.environ.get(DUMP_FINAL_VARIABLE):
                torch.save({"model": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()},
                           Path(os.environ[DUMP_FINAL_VARIABLE]) / f"rank{self.rank}_final.pt")
            self.comm.barrier()
            return 0
        finally:
            self.log.close()

    def _announce(self) -> None:
        """The log header and start-up lines: the batch split, where a resume started, the notes."""
        c, s = self.config, self.state
        self.log.header(c.to_dict(), self.world_size)
        shares = sorted({episode_share(c.episodes, r, self.world_size) for r in range(self.world_size)}, reverse=True)
        self.log.line(f"Batch: {c.update_interval} transitions per update = {self.world_size} worker(s) x "
                      f"{c.num_envs} envs x {self.steps} steps; episodes per worker: "
                      f"{' / '.join(map(str, shares))}")
        if self.resumed_from is not None:
            self.log.line(f"Resumed from {self.resumed_from} at episode {s.global_episodes}/{c.episodes} "
                          f"(update {s.update}); {max(0, c.episodes - s.global_episodes)} episodes left")
        for note in self.notes:
            self.log.line(note)

    def _ramp_costs(self) -> None:
        """--cost-warmup: this rollout's fee and slippage, a linear ramp over the run's first episodes."""
        c = self.config
        if c.cost_warmup <= 0.0:
            return
        frac = min(1.0, self.state.global_episodes / (c.cost_warmup * c.episodes))
        ledger = self.rollout.env.core.ledger
        ledger.fee = frac * c.env.fee_bps / 1e4
        ledger.slip = frac * c.env.slippage_bps / 1e4

    def _update(self, batch: RolloutBatch) -> tuple[UpdateStats, bool]:
        """One PPO update; a non-finite one is undone (weights and optimizer) and counted."""
        c = self.config
        if c.anneal_lr:
            frac = max(0.0, 1.0 - self.state.update / self.total_updates_estimate)
            for group, lr in zip(self.optimizer.param_groups, (c.learning_rate_actor, c.learning_rate_critic)):
                group["lr"] = frac * lr
        snapshot = _snapshot(self.agent, self.optimizer)
        stats = ppo_update(self.agent, self.optimizer, batch, self.settings, self.permutation_generator, self.comm)
        params_ok = all(bool(torch.isfinite(p).all()) for p in self.agent.parameters())
        if params_ok:  # huge but finite weights can still give inf/nan outputs (and crash the next rollout)
            with torch.no_grad():
                logits, values, _ = self.agent(batch.obs, (batch.initial_h, batch.initial_c), batch.episode_starts)
            params_ok = bool(torch.isfinite(logits).all()) and bool(torch.isfinite(values).all())
        ok = bool(self.comm.sum(torch.tensor([float(not (stats.finite and params_ok))], device=self.device)) == 0)
        self.state.update += 1
        if ok:
            self.bad_updates = 0
            return stats, False
        _restore_snapshot(self.agent, self.optimizer, snapshot)
        self.bad_updates += 1
        self.log.line(f"warning: update {self.state.update} gave non-finite losses or parameters; skipped "
                      f"({self.bad_updates} in a row)", to_log=True)
        if self.bad_updates >= MAX_BAD_UPDATES:
            raise TrainingError(f"{MAX_BAD_UPDATES} updates in a row were non-finite; lower "
                                f"--learning-rate-actor/--learning-rate-critic or --max-grad-norm, or check --data")
        return stats, True

    def _log_update(self, records: list[list[float]], stats: UpdateStats, skipped: bool, rank_sps: list[float],
                    wall: float) -> None:
        """The episode lines due (each covers exactly the episodes since the previous one),
        the progress bar and the update's metrics row."""
        c, s = self.config, self.state
        lines, update_totals = s.count(records, c)
        for episode, totals in lines:
            self.log.line(format_episode_line(episode, c.episodes, totals, self.world_size, self.device.type))
        self.log.progress(s.global_episodes)
        self.log.metrics({
            "update": s.update, "episodes": s.global_episodes, "env_steps": s.env_steps,
            "wall_time_s": round(wall, 3), "policy_loss": stats.policy_loss, "value_loss": stats.value_loss,
            "entropy": stats.entropy, "approx_kl": stats.approx_kl, "clip_fraction": stats.clip_fraction,
            "explained_variance": stats.explained_variance, "epochs_run": stats.epochs_run,
            "lr_actor": self.optimizer.param_groups[0]["lr"], "lr_critic": self.optimizer.param_groups[1]["lr"],
            "skipped": int(skipped), "sps_global": round(sum(rank_sps), 1),
            "sps_per_rank": ";".join(f"{x:.1f}" for x in rank_sps),
            "episodes_finished": len(records),
            **(update_totals.means() if records else {}),
        })

    def _checkpoint(self) -> None:
        """Gather every rank's state to all ranks; rank 0 writes the checkpoint atomically."""
        ranks = self.comm.gather_objects(capture_rank_state(self.state.rank_episodes, self.rollout))
        score, is_best = self.state.close_checkpoint_period(self.config.checkpoint_interval)
        if self.rank != 0:
            return
        checkpoint = self.state.checkpoint(self.config, self.world_size, self.agent, self.optimizer,
                                           self.permutation_generator, ranks, score)
        self.checkpoints.save(checkpoint, self.state.update, is_best)


def _snapshot(agent: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[list[Tensor], dict]:
    """Copies of the parameters and the optimizer's per-parameter tensors (cheaper than deepcopy)."""
    params = [p.detach().clone() for p in agent.parameters()]
    state = {p: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()} for p, s in optimizer.state.items()}
    return params, state


def _restore_snapshot(agent: torch.nn.Module, optimizer: torch.optim.Optimizer,
                      snapshot: tuple[list[Tensor], dict]) -> None:
    """Undo an update: parameters and optimizer state back to :func:`_snapshot`'s copies."""
    params, state = snapshot
    with torch.no_grad():
        for p, saved in zip(agent.parameters(), params):
            p.copy_(saved)
    optimizer.state.clear()
    optimizer.state.update(state)
