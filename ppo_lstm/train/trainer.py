"""One worker's training loop, read top to bottom in :meth:`Trainer.run`: collect a
rollout, exchange it (with what the ranks must agree on) across ranks, update, log,
checkpoint.

Shapes: T rollout steps per env, N envs on this worker, W workers. Every rank runs
the identical update on the gathered ``[T, N*W]`` batch, so parameters stay equal
without a broadcast, and every rank reaches the same verdict on a non-finite update
without asking the others; the sync check every ``--sync-check-interval`` updates
repairs any drift from rank 0.
"""
from __future__ import annotations

import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from envs.data import MarketData

from .agreement import exchange
from .build import build_agent, build_optimizer, check_model_matches
from ..algo.buffer import RolloutBatch
from ..rundir.checkpoint import BEST_NAME, CheckpointDir
from ..config import TrainConfig, describe_batch, learning_rates, steps_per_env, update_batch
from ..distributed import Worker, episode_share, parameters_in_sync, trades_history
from ..distributed.cuda import require_bf16
from ..errors import TrainingError, one_line
from .holdout import DataSplit, Holdout, HoldoutResult, holdout_columns, holdout_line, holdout_score, load_training_data
from ..algo.episodes import EpisodeTotals
from ..rundir.logger import NullLogger, RunLogger, format_episode_line
from ..algo.agent import sequence_boundaries
from ..algo.ppo import PPOSettings, UpdateStats, ppo_update
from ..algo.rollout import NON_FINITE_ADVICE, RolloutCollector
from .run_state import RunState, capture_rank_state, restore_rank_state
from ..algo.seeding import derive_seed
from .shutdown import StopRequest
from .timing import PhaseClock, peak_rss_mb

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
                                    config.max_grad_norm, config.clip_vloss, config.norm_adv, config.target_kl,
                                    config.autocast == "bf16")
        if config.autocast == "bf16":
            require_bf16(self.device)
        self.total_updates_estimate = max(1, math.ceil(config.episodes * config.env.episode_length
                                                       / update_batch(config, self.world_size)))
        self.bad_updates = 0
        self.last_update_bad = False  # this rank judged its last update non-finite (told at the next exchange)
        self.undo: Optional[tuple[list[Tensor], dict]] = None  # the weights before an update not yet agreed on
        self.clock = PhaseClock()

        torch.manual_seed(config.seed)  # identical initial weights on every rank
        self.agent = build_agent(config).to(self.device)
        self.learning_rates = learning_rates(config, self.world_size)  # (actor, critic), before annealing
        self.optimizer = build_optimizer(config, self.agent, self.world_size)
        self.permutation_generator = torch.Generator().manual_seed(derive_seed(config.seed, 7))  # shared by all ranks
        random.seed(derive_seed(config.seed, self.rank, 13))
        np.random.seed(derive_seed(config.seed, self.rank, 17))
        data, split = self._market_data()
        if data is None or split is None:
            traded, spans = None, None
        elif len(data) == 1:  # one instrument
            traded, spans = data[0], split[0].train_span
        else:
            traded, spans = data, [s.train_span for s in split]
        self.rollout = RolloutCollector(config, self.agent, self.rank, self.steps, self.device, traded, spans)
        self.holdout = Holdout.of(config, data, split) if self.rank == 0 else None  # rank 0 backtests it
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
                config.progress, run_dir / "tb" if config.tensorboard else None,
                extra_columns=self.holdout.extra_columns() if self.holdout is not None else ())
        else:
            self.log = NullLogger()

    def _market_data(self) -> tuple[Optional[list[MarketData]], Optional[list[DataSplit]]]:
        """Rank 0 (every rank with --data-all-ranks or --features) trades --data's training bars,
        of every instrument; the others simulate."""
        if not trades_history(self.config, self.rank):
            return None, None
        return load_training_data(self.config)

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        """Load weights, optimizer and counters; and, when this rank's layout and market are
        unchanged, its RNGs and rollout state (else its envs restart)."""
        check_model_matches(self.config, state, path)
        self.agent.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(self.optimizer.param_groups, self.learning_rates):
            group["lr"] = lr  # the run's rates (a rate given on the command line wins)
        self.permutation_generator.set_state(state["permutation_generator"])
        warning = self.state.restore(state, self.config, self.rank, self.world_size)
        if warning is None:
            warning = self._restore_rank(state["ranks"][self.rank])
        else:
            self.rollout.restart(generation=self.state.update)
        if warning is not None and self.rank == 0:
            self.notes.append(warning)
        self.resumed_from = path

    def _restore_rank(self, saved: dict[str, Any]) -> Optional[str]:
        """This rank's RNGs and rollout state; None, or the warning to print. A state that
        cannot be restored, for whatever reason, restarts this rank's envs and sampler
        (a warning, never a traceback); one written on another device type keeps the envs
        and re-seeds only the sampler."""
        generation = self.state.update
        try:
            note = restore_rank_state(saved, self.rollout, generation)
        except Exception as err:  # noqa: BLE001 - any unreadable rank state: start this rank's streams afresh
            self.rollout.restart(generation)
            self.rollout.reseed_sampler(generation)
            warning = (f"warning: rank {self.rank}'s saved rollout state could not be restored ({one_line(err)}): "
                       f"its environments and action sampler restarted; weights, optimizer and counters restored")
            if self.rank != 0:  # rank 0's notes reach the console and the log; the others speak for themselves
                print(warning, file=sys.stderr, flush=True)
            return warning
        return None if note is None else f"warning: {note}; weights, optimizer, counters and environments restored"

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Train until every rank has finished its share of episodes. Returns the exit code."""
        c, s = self.config, self.state
        self._announce()
        start = time.perf_counter()
        try:
            finished = s.global_episodes >= c.episodes
            clock = self.clock
            capacity = self.steps * c.num_envs  # transitions (so at most episodes) per rank and rollout
            seconds = None  # this rank's previous rollout, gather and update, for its env-steps/s
            while not finished:
                tic = time.perf_counter()
                with clock("rollout"):
                    self._ramp_costs()
                    records = s.take_quota(self.rollout.collect(s.update))  # [k, 6] this rank counts
                    s.env_steps += self.steps * c.num_envs * self.world_size
                    local = self.rollout.finish()  # [T, N]
                with clock("gather"):  # the iteration's one collective
                    batch, agreed = exchange(self.comm, local, records, s.rank_done, self.stop.signum or 0,
                                             seconds or time.perf_counter() - tic, capacity,
                                             self.last_update_bad)  # [T, N*W]
                with clock("update"):
                    if self.world_size > 1:
                        self._agree_on_previous_update(agreed.bad_update_ranks)
                    stats, skipped = self._update(batch)
                seconds = time.perf_counter() - tic
                finished = agreed.finished
                with clock("logging"):
                    update_totals = self._log_episodes(agreed.records)
                due = finished or bool(agreed.signum) or s.global_episodes >= s.next_checkpoint_at
                with clock("hold-out"):
                    holdout = self._run_holdout() if due and not agreed.signum else None  # rank 0's only
                with clock("logging"):
                    self._log_metrics(update_totals, stats, skipped, agreed.rank_sps, time.perf_counter() - start,
                                      holdout)
                if due:
                    with clock("checkpoints"):
                        self._checkpoint(holdout)
                if agreed.signum:
                    self.log.line(f"interrupted at episode {s.global_episodes}, checkpoint saved")
                    self.comm.barrier()  # nobody exits before rank 0 has written
                    return 128 + agreed.signum  # 130 for SIGINT, 143 for SIGTERM
                if s.update % c.sync_check_interval == 0 and self.world_size > 1:
                    with clock("sync check"):
                        parameters_in_sync(self.comm, self.agent, self.optimizer)
            self.log.line(f"Training finished: {s.global_episodes} episodes, {s.update} updates, "
                          f"{s.env_steps} env steps in {time.perf_counter() - start:.1f}s")
            if os.environ.get(DUMP_FINAL_VARIABLE):
                torch.save({"model": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()},
                           Path(os.environ[DUMP_FINAL_VARIABLE]) / f"rank{self.rank}_final.pt")
            peaks = self.comm.gather_objects(peak_rss_mb())  # also the barrier: nobody leaves before the rest
            if self.rank == 0:
                self.log.line(f"Time by phase (rank 0): {clock.shares() if clock.seconds else 'no update run'}")
                self.log.line(f"Peak memory per worker: {' / '.join(f'{p:.0f}' for p in peaks)} MiB")
                for line in self._summary():
                    self.log.line(line)
            return 0
        finally:
            self.log.close()

    def _announce(self) -> None:
        """The log header and start-up lines: the batch split, where a resume started, the notes."""
        c, s = self.config, self.state
        self.log.header(c.to_dict(), self.world_size)
        shares = sorted({episode_share(c.episodes, r, self.world_size) for r in range(self.world_size)}, reverse=True)
        self.log.line(f"{describe_batch(c, self.world_size)}; episodes per worker: {' / '.join(map(str, shares))}")
        if self.resumed_from is not None:
            self.log.line(f"Resumed from {self.resumed_from} at episode {s.global_episodes}/{c.episodes} "
                          f"(update {s.update}); {max(0, c.episodes - s.global_episodes)} episodes left")
        if c.cost_warmup > 0 and (c.env.fee_bps or c.env.slippage_bps):
            self.log.line(f"Costs: fee {c.env.fee_bps:g} bps and slippage {c.env.slippage_bps:g} bps, ramped up "
                          f"from 0 over the first {math.ceil(c.cost_warmup * c.episodes)} episodes (--cost-warmup "
                          f"{c.cost_warmup:g}), so earlier episode lines are at lower costs; the hold-out always "
                          f"pays full costs")
        if c.env.features and c.data is not None and self.world_size > 1 and not c.data_all_ranks:
            self.log.line(f"Markets: every worker trades --data, since --features {c.env.features} reads its columns "
                          f"and a simulated market has none")
        if self.holdout is not None:
            self.log.line(self.holdout.describe())
        elif self.rank == 0:
            self.log.line("Hold-out: none (--holdout 0 or --holdout-episodes 0); best.pt is the checkpoint whose "
                          "period had the best mean training return")
        for note in self.notes:
            self.log.line(note)

    def _ramp_costs(self) -> None:
        """--cost-warmup: this rollout's fee and slippage, a linear ramp over the run's first episodes."""
        c = self.config
        if c.cost_warmup <= 0.0:
            return
        self.rollout.env.scale_costs(min(1.0, self.state.global_episodes / (c.cost_warmup * c.episodes)))

    def _update(self, batch: RolloutBatch) -> tuple[UpdateStats, bool]:
        """One PPO update on the combined ``batch`` ``[T, N*W]``; one that gives non-finite
        losses, weights or outputs is undone here at once (weights and optimizer).

        The statistics and this verdict reach the host in one copy. On one worker the
        verdict is final: it is counted at once. On several, ranks that are not bitwise
        equal (GPU kernels) could judge differently, so the verdict travels with the next
        exchange and :meth:`_agree_on_previous_update` makes every rank act on it alike."""
        c = self.config
        if c.anneal_lr:
            frac = max(0.0, 1.0 - self.state.update / self.total_updates_estimate)
            for group, lr in zip(self.optimizer.param_groups, self.learning_rates):
                group["lr"] = frac * lr
        snapshot = _snapshot(self.agent, self.optimizer)
        starts_on_host = batch.episode_starts.cpu()  # [T, N*W]: the update's one device -> host copy before the end
        pending = ppo_update(self.agent, self.optimizer, batch, self.settings, self.permutation_generator, self.comm,
                             starts_on_host)
        with torch.no_grad():  # huge but finite weights can still give inf/nan outputs (and crash the next rollout)
            params = torch.cat([p.detach().reshape(-1) for p in self.agent.parameters()])
            logits, values, _ = self.agent(batch.obs, (batch.initial_h, batch.initial_c), batch.episode_starts,
                                           sequence_boundaries(starts_on_host))
            outputs_ok = torch.isfinite(params).all() & torch.isfinite(logits).all() & torch.isfinite(values).all()
        row = torch.cat([pending.row, outputs_ok.float().view(1)]).tolist()  # stats and verdict in one copy
        stats = UpdateStats.from_row(row[:-1], pending.epochs_run)
        ok = stats.finite and bool(row[-1])
        self.state.update += 1
        self.undo = None
        self.last_update_bad = not ok
        if ok:
            if self.world_size == 1:
                self.bad_updates = 0
            else:
                self.undo = snapshot  # kept until every rank has agreed on this update
            return stats, False
        _restore_snapshot(self.agent, self.optimizer, snapshot)
        if self.world_size == 1:
            self._count_bad_update(self.state.update, "")
        return stats, True

    def _agree_on_previous_update(self, bad_ranks: list[int]) -> None:
        """Act alike on every rank on the verdicts about the previous update that the exchange
        brought: if any rank found it non-finite, the ranks that kept it undo it too, and
        every rank counts it (several in a row end the job on every rank)."""
        if not bad_ranks:
            self.bad_updates = 0
        else:
            if self.undo is not None:
                _restore_snapshot(self.agent, self.optimizer, self.undo)
            self._count_bad_update(self.state.update, f" on rank{'s' if len(bad_ranks) > 1 else ''} "
                                                      f"{', '.join(map(str, bad_ranks))}")
        self.undo = None
        self.last_update_bad = False

    def _count_bad_update(self, update: int, where: str) -> None:
        """Warn about non-finite update ``update`` (found ``where``), undone on every rank; end training after
        :data:`MAX_BAD_UPDATES` in a row."""
        self.bad_updates += 1
        self.log.line(f"warning: update {update} gave non-finite losses or parameters{where}; skipped "
                      f"({self.bad_updates} in a row)", to_log=True)
        if self.bad_updates >= MAX_BAD_UPDATES:
            raise TrainingError(f"{MAX_BAD_UPDATES} updates in a row were non-finite; {NON_FINITE_ADVICE}")

    def _log_episodes(self, records: list[list[float]]) -> EpisodeTotals:
        """Count every rank's episodes of this update; print the episode lines due (each
        covers exactly the episodes since the previous one) and move the progress bar.
        Returns the update's totals."""
        c, s = self.config, self.state
        lines, update_totals = s.count(records, c)
        for episode, totals in lines:
            self.log.line(format_episode_line(episode, c.episodes, totals, self.world_size, self.device.type))
        self.log.progress(s.global_episodes)
        return update_totals

    def _run_holdout(self) -> Optional[HoldoutResult]:
        """Rank 0 backtests the current weights on the hold-out and logs the line; None without one."""
        if self.holdout is None:
            return None
        result = self.holdout.run(self.agent, self.device)
        self.log.line(holdout_line(self.state.global_episodes, result))
        return result

    def _log_metrics(self, update_totals: EpisodeTotals, stats: UpdateStats, skipped: bool, rank_sps: list[float],
                     wall: float, holdout: Optional[HoldoutResult]) -> None:
        """The update's metrics.csv row, with the hold-out's figures on a checkpoint's row."""
        s = self.state
        self.log.metrics({
            "update": s.update, "episodes": s.global_episodes, "env_steps": s.env_steps,
            "wall_time_s": round(wall, 3), "policy_loss": stats.policy_loss, "value_loss": stats.value_loss,
            "entropy": stats.entropy, "approx_kl": stats.approx_kl, "clip_fraction": stats.clip_fraction,
            "explained_variance": stats.explained_variance, "epochs_run": stats.epochs_run,
            "lr_actor": self.optimizer.param_groups[0]["lr"], "lr_critic": self.optimizer.param_groups[1]["lr"],
            "skipped": int(skipped), "sps_global": round(sum(rank_sps), 1),
            "sps_per_rank": ";".join(f"{x:.1f}" for x in rank_sps),
            "episodes_finished": int(update_totals.episodes),
            **(update_totals.means() if update_totals.episodes else {}),
            **(holdout_columns(holdout) if holdout is not None else {}),
        })

    def _checkpoint(self, holdout: Optional[HoldoutResult]) -> None:
        """Gather every rank's state to all ranks; rank 0 writes the checkpoint atomically.

        best.pt: with a hold-out, the best hold-out return (a checkpoint written on a
        signal, without a hold-out backtest, is never best); without one, the best mean
        training return of a checkpoint period."""
        s = self.state
        ranks = self.comm.gather_objects(capture_rank_state(s.rank_episodes, self.rollout))
        score = s.close_checkpoint_period(self.config.checkpoint_interval)
        if self.rank != 0:
            return
        if self.holdout is None:
            is_best = s.offer_best(score)
        else:
            is_best = holdout is not None and s.offer_best(holdout_score(holdout))
            if is_best:
                assert holdout is not None
                s.best_holdout = {"episode": s.global_episodes, "line": holdout_line(s.global_episodes, holdout),
                                  **holdout_columns(holdout)}
        checkpoint = s.checkpoint(self.config, self.world_size, self.agent, self.optimizer,
                                  self.permutation_generator, ranks, score)
        self.checkpoints.save(checkpoint, s.update, is_best)

    def _summary(self) -> list[str]:
        """Rank 0's end-of-run lines: where best.pt and the last checkpoint are, the best
        hold-out figures and the evaluate command that reproduces them."""
        run_dir = Path(self.config.checkpoint_dir)
        best, last = run_dir / BEST_NAME, self.checkpoints.latest()
        lines = [f"Last checkpoint: {last}"]
        if not best.is_file():
            return lines + ["No best.pt: no checkpoint period finished an episode"]
        if self.holdout is None:
            data = f" --data {self.config.data}" if self.config.data else ""
            return lines + [f"Best checkpoint: {best} (best mean training return of a checkpoint period; no "
                            f"hold-out, so this is in-sample)",
                            f"Evaluate it: evaluate-ppo-lstm --checkpoint {best}{data}"]
        held = self.state.best_holdout
        figures = f": {held['line']}" if held else ""
        commands = self.holdout.evaluate_commands(str(best))
        if len(commands) == 1:
            return lines + [f"Best checkpoint: {best} (best hold-out return){figures}",
                            f"Reproduce it: {commands[0]}"]
        return lines + [f"Best checkpoint: {best} (best mean hold-out return){figures}",
                        *(f"Reproduce instrument {i + 1}: {c}" for i, c in enumerate(commands))]


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
