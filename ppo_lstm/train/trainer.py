"""One worker's training loop, read top to bottom in :meth:`Trainer.run`: collect a
rollout, exchange it (with what the ranks must agree on) across ranks, update, log,
checkpoint.

Shapes: T rollout steps per env, N envs on this worker, W workers. Every rank holds
the gathered ``[T, N*W]`` batch and draws the same minibatches; each computes the
gradient of its share of every minibatch, and one sum per gradient step gives every
rank the same gradient, so parameters stay equal without a broadcast. The check of a
non-finite update is shared the same way, so every rank reaches the same verdict; the
sync check every ``--sync-check-interval`` updates repairs any drift from rank 0.
"""
from __future__ import annotations

import dataclasses
import math
import os
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch

from .agreement import Agreement, RankReport, exchange
from .build import build_agent, build_optimizer, check_model_matches
from ..algo.buffer import RolloutBatch
from ..rundir.checkpoint import RUN_LOG_NAME, CheckpointDir
from ..config.plan import BatchPlan
from ..config.values import limit_seconds
from ..config.schema import TrainConfig
from ..distributed import Worker, parameters_in_sync, trades_history
from ..distributed.cuda import require_bf16
from .data_fingerprint import check_resume_data, data_fingerprint
from .guard import UpdateGuard, outputs_finite
from ..data_split import DataSplit, load_training_data
from .holdout import Holdout, HoldoutResult, holdout_columns, holdout_line, holdout_score
from .messages import metrics_row, phase_lines, startup_lines, summary_lines
from ..algo.episodes import EpisodeTotals
from ..rundir.logger import NullLogger, RunLogger, format_episode_line
from ..algo.ppo import PPOSettings, UpdateStats, ppo_update
from ..algo.rollout import RolloutCollector
from .run_state import RunState, capture_rank_state, restore_rank_or_restart
from ..algo.seeding import derive_seed
from .shutdown import StopRequest
from ..config.schedule import Schedules, schedules_at
from .time_limit import UNFITTED_EPISODES, TimeBudget, resumed_fit, time_up_line
from .timing import PhaseClock, peak_rss_mb

if TYPE_CHECKING:
    from envs.data import MarketData

def market_data(config: TrainConfig, rank: int) -> tuple[Optional[list[MarketData]], Optional[list[DataSplit]]]:
    """Rank 0 (every rank with --data-all-ranks or --features) trades --data's training bars, of
    every instrument, and their splits; the others simulate (None, None)."""
    if not trades_history(config, rank):
        return None, None
    return load_training_data(config)


def traded(data: Optional[list[MarketData]], split: Optional[list[DataSplit]]) -> tuple[Any, Any]:
    """What the rollout's envs trade: (None, None) to simulate; one instrument and its training span;
    or every instrument and their spans."""
    if data is None or split is None:
        return None, None
    if len(data) == 1:
        return data[0], split[0].train_span
    return data, [s.train_span for s in split]


def open_log(config: TrainConfig, rank: int, state: RunState, holdout: Optional[Holdout],
             resumed: bool) -> RunLogger | NullLogger:
    """Rank 0's log (training.log, metrics.csv, TensorBoard); the others' log nothing."""
    if rank != 0:
        return NullLogger()
    run_dir = Path(config.checkpoint_dir)
    return RunLogger(config.log_file, run_dir / "metrics.csv", None if config.train_for else config.episodes,
                     state.global_episodes, config.progress, run_dir / "tb" if config.tensorboard else None,
                     extra_columns=holdout.extra_columns() if holdout is not None else (),
                     run_log=run_dir / RUN_LOG_NAME, resumed_at_update=state.update if resumed else None)


# Debug/test hook: when set to a directory, every rank saves its final model and optimizer
# state there as rank<r>_final.pt after training finishes (to check ranks end bitwise equal).
DUMP_FINAL_VARIABLE = "PPO_LSTM_DUMP_FINAL_DIR"


class Trainer:
    """Trains the shared agent on this worker's envs; rank 0 logs and checkpoints."""

    def __init__(self, config: TrainConfig, worker: Worker, resume: Optional[tuple[Path, dict[str, Any]]],
                 stop: StopRequest, notes: tuple[str, ...] = (), plan: Optional[BatchPlan] = None) -> None:
        """``plan``: the run's :class:`BatchPlan` on this worker count, as resolved (default: ``config``'s)."""
        self.asked = config  # as given: the log header's
        if config.train_for is not None:  # its episodes are fitted to the time once the speed is known
            config = dataclasses.replace(config, episodes=UNFITTED_EPISODES)
        self.config, self.comm, self.device, self.stop = config, worker.comm, worker.device, stop
        self.notes = list(notes)  # start-up lines for rank 0's console and log
        self.rank, self.world_size = self.comm.rank, self.comm.world_size
        self.plan = plan or BatchPlan.of(config, self.world_size)
        assert self.plan.world_size == self.world_size, "a plan for another worker count"
        self.steps, self.batch_size = self.plan.steps, self.plan.batch  # T, and U = T x N x W
        self.settings = PPOSettings(config.clip, config.epochs, self.plan.minibatches, config.ent_coef, config.vf_coef,
                                    config.max_grad_norm, config.clip_vloss, config.norm_adv, config.target_kl,
                                    config.autocast == "bf16", config.micro_batches,
                                    self.plan.shards_update(config.shard_update))
        if config.autocast == "bf16":
            require_bf16(self.device)
        self.clock = PhaseClock()

        torch.manual_seed(config.seed)  # identical initial weights on every rank
        self.agent = build_agent(config).to(self.device)
        self.learning_rates = self.plan.rates  # (actor, critic), before annealing
        self.optimizer = build_optimizer(self.agent, self.learning_rates)
        self.permutation_generator = torch.Generator().manual_seed(derive_seed(config.seed, 7))  # shared by all ranks
        random.seed(derive_seed(config.seed, self.rank, 13))
        np.random.seed(derive_seed(config.seed, self.rank, 17))
        data, split = market_data(config, self.rank)
        self.rollout = RolloutCollector(config, self.agent, self.rank, self.steps, self.device, *traded(data, split))
        self.holdout = Holdout.of(config, data, split, self.rank, self.device)  # rank 0's, or its share of it
        self.data_fingerprint = data_fingerprint(data, split)  # None where this rank simulates
        self.state = RunState.fresh(config, self.rank, self.world_size, self.rollout.value_norm)
        self.resumed_from: Optional[Path] = None
        self.holdout_at = -1  # the episode count of rank 0's last hold-out line
        if resume is not None:
            self._restore(*resume)
            if config.train_for is not None:  # go on from the run's schedules, not from their start
                self._refit(resumed_fit(self.state.global_episodes, self.asked.episodes, self.state.env_steps,
                                        self.state.train_seconds, limit_seconds(config.train_for) or 0.0,
                                        config.env.episode_length, config.num_envs * self.world_size))
        self.seconds_before = self.state.train_seconds  # this run's training seconds before this invocation

        self.checkpoints = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
        if self.rank == 0:
            self.checkpoints.remove_stale_temp_files()  # from a writer killed mid-save; the run lock is held
            self.checkpoints.adopt(self.state.run_id, self.resumed_from)
        self.log = open_log(config, self.rank, self.state, self.holdout, self.resumed_from is not None)
        self.guard = UpdateGuard(self.agent, self.optimizer, self.world_size, self.log)  # undoes non-finite updates
        self.budget = TimeBudget(config, self.plan, self.rank, self.state.global_episodes, self.state.env_steps)

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        """Load weights, optimizer and counters; and, when this rank's layout and market are
        unchanged, its RNGs and rollout state (else its envs restart)."""
        check_model_matches(self.config, state, path)
        self.agent.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(self.optimizer.param_groups, self.learning_rates):
            group["lr"] = lr  # the run's rates (a rate given on the command line wins)
        self.permutation_generator.set_state(state["permutation_generator"])
        data_note, data_changed = check_resume_data(self.config, state, self.data_fingerprint, str(path))
        warning = self.state.restore(state, self.config, self.rank, self.world_size)
        if warning is None and not data_changed:
            warning = restore_rank_or_restart(state["ranks"][self.rank], self.rollout, self.state.update, self.rank)
        else:
            self.rollout.restart(generation=self.state.update)
        if data_changed:  # --allow-data-change: the old hold-out's scores do not compare
            self.state.best_score, self.state.best_holdout = -math.inf, None
        if self.rank == 0:
            self.notes += [line for line in (data_note, warning) if line is not None]
        self.resumed_from = path

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Train until every rank has finished its share of episodes. Returns the exit code."""
        c, s, clock = self.config, self.state, self.clock
        self._announce()
        start = self.started = time.perf_counter()
        try:
            finished = s.global_episodes >= c.episodes
            seconds = None  # this rank's previous rollout, gather and update, for its env-steps/s
            while not finished:
                tic = time.perf_counter()
                with clock("rollout"):
                    schedules = self._set_schedules()
                    records = s.take_quota(self.rollout.collect(s.update))  # [k, 6] the episodes this rank counts
                    s.env_steps += self.batch_size
                    next_value, next_start = self.rollout.bootstrap()  # [N]: V of the observation after the rollout
                    local = self.rollout.buffer.finish(next_value, next_start, c.gamma, c.gae_lambda)  # [T, N], GAE
                with clock("gather"):  # the iteration's one collective: every rank's rollout and report
                    batch, agreed = exchange(self.comm, local, self._report(records, seconds, tic))  # [T, N*W]
                with clock("update"):
                    if self.world_size > 1:
                        self.guard.agree(s.update, agreed.bad_update_ranks)
                    stats, skipped = self._update(batch, schedules)
                seconds = time.perf_counter() - tic
                finished = agreed.finished or agreed.time_up
                code = self._after_update(agreed, stats, skipped, finished)
                if code is not None:
                    return code
            return self._finish(start)
        finally:
            self.log.close()

    def _report(self, records: np.ndarray, seconds: Optional[float], tic: float) -> RankReport:
        """What this rank tells the others in this iteration's collective (``seconds``: its previous
        iteration's; the first time, this one's so far, since ``tic``)."""
        now = time.perf_counter()
        return RankReport(records, self.steps * self.config.num_envs, self.state.rank_done, self.stop.signum or 0,
                          seconds or now - tic, self.guard.last_update_bad, self.budget.time_up(now - self.started),
                          self.budget.proposal())

    def _after_update(self, agreed: Agreement, stats: UpdateStats, skipped: bool, finished: bool) -> Optional[int]:
        """An iteration's bookkeeping: episode lines, a --train-for fit, the metrics row, and where due the
        hold-out, a checkpoint and the sync check. Returns a signalled run's exit code, else None."""
        s, clock, elapsed = self.state, self.clock, lambda: time.perf_counter() - self.started
        with clock("logging"):
            update_totals = self._log_episodes(agreed.records)
            if agreed.fitted_episodes:
                self._fit_episodes(agreed.fitted_episodes)
            warning = self.budget.observe(elapsed(), s.env_steps, s.global_episodes)
            if warning:
                self.log.line(warning)
        due = finished or bool(agreed.signum) or s.global_episodes >= s.next_checkpoint_at
        with clock("hold-out"):
            holdout = self._run_holdout() if due and not agreed.signum else None  # rank 0's result
        with clock("logging"):
            self.log.metrics(metrics_row(s, stats, skipped, self.optimizer, agreed.rank_sps, elapsed(),
                                         update_totals, holdout))
        if due:
            with clock("checkpoints"):
                self._checkpoint(holdout)
        if agreed.signum:
            self.log.line(f"interrupted at episode {s.global_episodes}, checkpoint saved")
            self.comm.barrier()  # nobody exits before rank 0 has written
            return 128 + agreed.signum  # 130 for SIGINT, 143 for SIGTERM
        if s.update % self.config.sync_check_interval == 0 and self.world_size > 1:
            with clock("sync check"):
                parameters_in_sync(self.comm, self.agent, self.optimizer)
        return None

    def _finish(self, start: float) -> int:
        """The end of a run: its last lines, every rank's phases and peak memory, the summary."""
        c, s, clock = self.config, self.state, self.clock
        if s.global_episodes < c.episodes:  # --time-limit or --train-for ended it
            self.log.line(time_up_line(c, self.plan, s.global_episodes, s.env_steps, self.budget.fitting))
        self.log.line(f"Training finished: {s.global_episodes} episodes, {s.update} updates, "
                      f"{s.env_steps} env steps in {time.perf_counter() - start:.1f}s")
        if os.environ.get(DUMP_FINAL_VARIABLE):
            torch.save({"model": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()},
                       Path(os.environ[DUMP_FINAL_VARIABLE]) / f"rank{self.rank}_final.pt")
        # every rank's phases and peak memory; also the barrier: nobody leaves before the rest
        ranks = self.comm.gather_objects((clock.shares() if clock.seconds else "no update run", peak_rss_mb()))
        for line in phase_lines(ranks) + summary_lines(c, self.checkpoints.latest(), self.holdout, s.best_holdout):
            self.log.line(line)  # rank 0's log; the others' log nothing
        return 0

    def _announce(self) -> None:
        """The log header and start-up lines: the batch split, where a resume started, the notes."""
        self.log.header(self.asked.to_dict(), self.world_size)
        for line in startup_lines(self.config, self.plan, self.rank, self.state, self.resumed_from,
                                  self.holdout, self.notes):
            self.log.line(line)

    def _fit_episodes(self, proposed: int) -> TrainConfig:
        """--train-for: every rank takes rank 0's ``proposed`` episodes in the same iteration; from
        here the run is one of that many episodes. Returns the run's config."""
        fit = self.budget.fit
        assert fit is not None
        episodes = fit.settle(proposed, self.state.global_episodes)
        self._refit(episodes)
        self.log.set_total(episodes)
        self.log.line(fit.line(episodes, self.state.global_episodes))
        return self.config

    def _refit(self, episodes: int) -> None:
        """From here the run is one of ``episodes`` episodes, split afresh over the ranks."""
        self.config = dataclasses.replace(self.config, episodes=episodes)
        self.state.split_afresh(episodes, self.rank, self.world_size)

    def _set_schedules(self) -> Schedules:
        """This iteration's schedules, on the run's env steps and episodes before it: the rollout's fee
        and slippage are set to their --cost-warmup share here, and the rates are returned for the update."""
        c, s = self.config, self.state
        schedules = schedules_at(c, self.plan, s.env_steps, s.global_episodes)
        if c.cost_warmup > 0.0:
            self.rollout.env.scale_costs(schedules.costs)
        return schedules

    def _update(self, batch: RolloutBatch, schedules: Schedules) -> tuple[UpdateStats, bool]:
        """One PPO update on the combined ``batch`` ``[T, N*W]`` at the iteration's annealed rates;
        one that gives non-finite losses, weights or outputs is undone at once (:class:`UpdateGuard`).
        The statistics and this verdict reach the host in one copy. Returns them and whether it was skipped."""
        if self.config.anneal_lr:
            for group, lr in zip(self.optimizer.param_groups, self.learning_rates):
                group["lr"] = schedules.rates * lr
        snapshot = self.guard.snapshot()
        starts_on_host = batch.episode_starts.cpu()  # [T, N*W]: the update's one device -> host copy before the end
        pending = ppo_update(self.agent, self.optimizer, batch, self.settings, self.permutation_generator, self.comm,
                             starts_on_host, self.rollout.value_norm)
        outputs_ok = outputs_finite(self.agent, batch, starts_on_host, self.comm, self.settings.shard)
        row = torch.cat([pending.row, outputs_ok.float().view(1)]).tolist()  # stats and verdict in one copy
        stats = UpdateStats.from_row(row[:-1], pending.epochs_run)
        self.state.update += 1
        return stats, self.guard.judge(self.state.update, stats.finite and bool(row[-1]), snapshot)

    def _log_episodes(self, records: list[list[float]]) -> EpisodeTotals:
        """Count every rank's episodes of this update; print the episode lines due (each
        covers exactly the episodes since the previous one) and move the progress bar.
        Returns the update's totals."""
        c, s = self.config, self.state
        lines, update_totals = s.count(records, c)
        total = None if self.budget.fitting else c.episodes  # not known before a --train-for fit
        for episode, totals in lines:
            self.log.line(format_episode_line(episode, total, totals, self.world_size, self.device.type))
        self.log.progress(s.global_episodes)
        return update_totals

    def _run_holdout(self) -> Optional[HoldoutResult]:
        """Backtest the current weights on the hold-out (each rank its share, where shared); rank 0 logs it."""
        result = self.holdout.run(self.agent, self.device, self.comm) if self.holdout is not None else None
        if result is None:  # no hold-out, or a share of it on a rank other than 0
            return None
        s = self.state
        again = s.global_episodes == self.holdout_at  # a stop between rounds: later weights, the same count
        self.log.line(holdout_line(s.global_episodes, result) + (f" (update {s.update}, after the line above at "
                                                                 f"this episode count)" if again else ""))
        self.holdout_at = s.global_episodes
        return result

    def _checkpoint(self, holdout: Optional[HoldoutResult]) -> None:
        """Gather every rank's state to all ranks; rank 0 writes the checkpoint atomically.

        best.pt: with a hold-out, the best hold-out return (a checkpoint written on a
        signal, without a hold-out backtest, is never best); without one, the best mean
        training return of a checkpoint period."""
        s = self.state
        s.train_seconds = self.seconds_before + time.perf_counter() - self.started
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
        config = self.config  # a --train-for run stopped before its fit is recorded as a run of what it trained
        if self.budget.fitting:
            config = dataclasses.replace(config, episodes=max(1, s.global_episodes))
        checkpoint = s.checkpoint(config, self.world_size, self.agent, self.optimizer,
                                  self.permutation_generator, ranks, score, self.data_fingerprint)
        self.checkpoints.save(checkpoint, s.update, is_best)
