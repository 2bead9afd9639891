"""One worker's training loop: collect a rollout, gather it across ranks, update, log, checkpoint.

Shapes: T rollout steps per env, N envs on this worker, W workers, D obs size,
H LSTM size. Every rank runs the identical update on the gathered ``[T, N*W]``
batch, so parameters stay equal without a broadcast.
"""
from __future__ import annotations

import datetime
import math
import os
import random
import secrets
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from envs.data import DataError, MarketData, load_ohlcv
from envs.vector import VectorTradingEnv

from .agent import LSTMState, RecurrentActorCritic
from .buffer import RolloutBatch, RolloutBuffer
from .checkpoint import CheckpointDir, CheckpointError, RunLock, from_safe, to_safe
from .config import TrainConfig, resumed_config, steps_per_env, validate
from .distributed import (Worker, WorkerFailed, episode_share, parameters_in_sync, remaining_episode_shares,
                          trades_history)
from .errors import EXIT_USAGE, UsageError
from .logger import EPISODE_FIELDS, EpisodeTotals, NullLogger, RunLogger, episode_records, format_episode_line
from .ppo import PPOSettings, UpdateStats, ppo_update
from .shutdown import StopRequest

CHECKPOINT_FORMAT = 1
MAX_BAD_UPDATES = 3
LOCK_HELD_VARIABLE = "PPO_LSTM_LOCK_HELD"  # set by a launcher that holds the run lock itself
# Debug/test hook: when set to a directory, every rank saves its final model and optimizer
# state there as rank<r>_final.pt after training finishes (to check ranks end bitwise equal).
DUMP_FINAL_VARIABLE = "PPO_LSTM_DUMP_FINAL_DIR"


class TrainingError(Exception):
    """Training cannot go on (e.g. repeated non-finite updates); exit code 1."""


def derive_seed(*parts: int) -> int:
    """A 32-bit seed from several integers (seed, rank, purpose...)."""
    return int(np.random.SeedSequence([p & 0xFFFFFFFF for p in parts]).generate_state(1)[0])


def env_seeds(seed: int, rank: int, num_envs: int, generation: int = 0) -> list[int]:
    """Distinct, reproducible seeds for the ``num_envs`` envs of ``rank``."""
    return [int(s) for s in np.random.SeedSequence([seed, rank, generation]).generate_state(num_envs)]


def build_agent(config: TrainConfig) -> RecurrentActorCritic:
    return RecurrentActorCritic(config.env.obs_dim, config.env.num_actions, config.hidden_size, config.lstm_size)


def build_optimizer(config: TrainConfig, agent: RecurrentActorCritic) -> torch.optim.Adam:
    """Adam with two parameter groups: actor (encoder, LSTM, policy) and critic (value head)."""
    return torch.optim.Adam([
        {"params": agent.actor_parameters(), "lr": config.learning_rate_actor, "name": "actor"},
        {"params": agent.critic_parameters(), "lr": config.learning_rate_critic, "name": "critic"},
    ], eps=1e-5, foreach=True)


def check_model_matches(config: TrainConfig, saved: dict[str, Any], path: Path) -> None:
    """UsageError naming both sizes when the checkpoint's model differs from the flags'."""
    ours = {k: tuple(v.shape) for k, v in build_agent(config).state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in saved["model"].items()}
    if ours == theirs:
        return
    old = TrainConfig.from_dict(saved.get("config", {}))

    def sizes(c: TrainConfig) -> str:
        return (f"--hidden-size {c.hidden_size} --lstm-size {c.lstm_size} --window {c.env.window} "
                f"--max-position {c.env.max_position}{' --no-short' if c.env.no_short else ''}")
    raise UsageError(f"checkpoint {path} holds a model built with {sizes(old)}, but this run asks for "
                     f"{sizes(config)}; use the checkpoint's sizes or another --checkpoint-dir")


class Trainer:
    """Trains the shared agent on this worker's envs; rank 0 logs and checkpoints."""

    def __init__(self, config: TrainConfig, worker: Worker, resume: Optional[tuple[Path, dict[str, Any]]],
                 stop: StopRequest, notes: tuple[str, ...] = ()) -> None:
        self.config, self.comm, self.device, self.stop = config, worker.comm, worker.device, stop
        self.notes = list(notes)  # start-up lines for rank 0's console and log
        comm = self.comm
        self.rank, self.world_size = comm.rank, comm.world_size
        self.steps = steps_per_env(config, self.world_size)
        self.share = episode_share(config.episodes, self.rank, self.world_size)
        self.settings = PPOSettings(config.clip, config.epochs, config.minibatches, config.ent_coef, config.vf_coef,
                                    config.max_grad_norm, config.clip_vloss, config.norm_adv, config.target_kl)

        torch.manual_seed(config.seed)  # identical initial weights on every rank
        self.agent = build_agent(config).to(self.device)
        self.optimizer = build_optimizer(config, self.agent)
        self.permutation_generator = torch.Generator().manual_seed(derive_seed(config.seed, 7))  # shared by all ranks
        self.sample_generator = torch.Generator(self.device).manual_seed(derive_seed(config.seed, self.rank, 11))
        random.seed(derive_seed(config.seed, self.rank, 13))
        np.random.seed(derive_seed(config.seed, self.rank, 17))

        self.env = VectorTradingEnv(config.num_envs, config.env, data=self._market_data())
        self.buffer = RolloutBuffer(self.steps, config.num_envs, config.env.obs_dim, config.lstm_size, self.device)
        self.total_updates_estimate = max(1, math.ceil(config.episodes * config.env.episode_length
                                                       / config.update_interval))
        # counters (identical on every rank, except rank_episodes)
        self.update = 0
        self.global_episodes = 0
        self.rank_episodes = 0
        self.env_steps = 0
        self.interval_totals = EpisodeTotals()
        self.checkpoint_totals = EpisodeTotals()
        self.next_log_at = config.log_interval
        self.next_checkpoint_at = config.checkpoint_interval
        self.best_score = -math.inf
        self.bad_updates = 0

        obs, _ = self.env.reset(seed=env_seeds(config.seed, self.rank, config.num_envs))
        self.obs: np.ndarray = obs  # [N, D]
        self.episode_start = np.ones(config.num_envs, dtype=bool)  # [N]
        self.lstm_state: LSTMState = self.agent.initial_state(config.num_envs, self.device)
        self.run_id = new_run_id()
        self.resumed_from: Optional[Path] = None
        if resume is not None:
            self._restore(*resume)

        self.checkpoints = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
        if self.rank == 0:
            self.checkpoints.remove_stale_temp_files()  # from a writer killed mid-save; the run lock is held
            self.checkpoints.adopt(self.run_id, self.resumed_from)
            run_dir = Path(config.checkpoint_dir)
            self.log: RunLogger | NullLogger = RunLogger(
                config.log_file, run_dir / "metrics.csv", config.episodes, self.global_episodes, config.progress,
                run_dir / "tb" if config.tensorboard else None)
        else:
            self.log = NullLogger()

    # ------------------------------------------------------------------ setup helpers

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
        """Load weights, optimizer, counters and (at the same world size) every rank's RNG and env state."""
        check_model_matches(self.config, state, path)
        self.agent.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for group, lr in zip(self.optimizer.param_groups, (self.config.learning_rate_actor,
                                                            self.config.learning_rate_critic)):
            group["lr"] = lr  # the flags of this run win over the saved rates
        self.permutation_generator.set_state(state["permutation_generator"])
        counters = state["counters"]
        self.update = counters["update"]
        self.global_episodes = counters["global_episodes"]
        self.env_steps = counters["env_steps"]
        self.interval_totals = EpisodeTotals.from_list(counters["interval_totals"])
        self.checkpoint_totals = EpisodeTotals.from_list(counters["checkpoint_totals"])
        self.next_log_at = counters["next_log_at"]
        self.next_checkpoint_at = counters["next_checkpoint_at"]
        self.best_score = counters["best_score"]
        self.run_id = state.get("run_id") or self.run_id  # a checkpoint of an older format carries none
        saved_world, saved_envs = state["world_size"], state["config"]["num_envs"]
        same_layout = (saved_world == self.world_size and len(state["ranks"]) == self.world_size
                       and saved_envs == self.config.num_envs)
        same_market = (state["config"]["env"] == self.config.to_dict()["env"]
                       and state["config"]["data"] == self.config.data)
        if same_layout and same_market:
            rank_state = state["ranks"][self.rank]
            self.rank_episodes = rank_state["rank_episodes"]
            done = [r["rank_episodes"] for r in state["ranks"]]
            self.share = self.rank_episodes + remaining_episode_shares(self.config.episodes, done,
                                                                       self.world_size)[self.rank]
            torch.set_rng_state(rank_state["torch_rng"])
            np.random.set_state(from_safe(rank_state["numpy_rng"]))
            random.setstate(_python_rng_state(rank_state["python_rng"]))
            self.sample_generator.set_state(rank_state["sample_generator"].to("cpu"))
            self.env.set_state(from_safe(rank_state["env"]))
            self.obs = from_safe(rank_state["obs"])
            self.episode_start = from_safe(rank_state["episode_start"])
            self.lstm_state = (rank_state["lstm_h"].to(self.device), rank_state["lstm_c"].to(self.device))
        else:
            # Another layout or market: what is left is split afresh, envs restart.
            self.rank_episodes = 0
            self.share = remaining_episode_shares(max(0, self.config.episodes - self.global_episodes), [],
                                                  self.world_size)[self.rank]
            obs, _ = self.env.reset(seed=env_seeds(self.config.seed, self.rank, self.config.num_envs, self.update))
            self.obs = obs
            why = (f"the checkpoint was written by {saved_world} worker(s) x {saved_envs} envs and this run has "
                   f"{self.world_size} x {self.config.num_envs}" if not same_layout
                   else "the environment settings changed")
            self.notes.append(f"warning: {why}: weights, optimizer and counters restored; environments and "
                              f"per-rank RNG streams restarted")
        self.resumed_from = path

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Train until every rank has finished its share of episodes. Returns the exit code."""
        c = self.config
        self.log.header(c.to_dict(), self.world_size)
        shares = sorted({episode_share(c.episodes, r, self.world_size) for r in range(self.world_size)}, reverse=True)
        self.log.line(f"Batch: {c.update_interval} transitions per update = {self.world_size} worker(s) x "
                      f"{c.num_envs} envs x {self.steps} steps; episodes per worker: "
                      f"{' / '.join(map(str, shares))}")
        if self.resumed_from is not None:
            self.log.line(f"Resumed from {self.resumed_from} at episode {self.global_episodes}/{c.episodes} "
                          f"(update {self.update}); {max(0, c.episodes - self.global_episodes)} episodes left")
        for note in self.notes:
            self.log.line(note)
        start = time.perf_counter()
        try:
            finished = self.global_episodes >= c.episodes
            while not finished:
                tic = time.perf_counter()
                local_records = self._collect_rollout()
                batch = self.buffer.finish(*self._bootstrap(), c.gamma, c.gae_lambda)
                batch = batch.map(lambda _, t: self.comm.gather(t, dim=1))  # [T, N*W] on every rank
                stats, skipped = self._update(batch)
                finished, signum, rank_sps, records = self._agree(local_records, time.perf_counter() - tic)
                self._log_update(records, stats, skipped, rank_sps, time.perf_counter() - start)
                if finished or signum or self.global_episodes >= self.next_checkpoint_at:
                    self._checkpoint()
                if signum:
                    self.log.line(f"interrupted at episode {self.global_episodes}, checkpoint saved")
                    self.comm.barrier()  # nobody exits before rank 0 has written
                    return 128 + signum  # 130 for SIGINT, 143 for SIGTERM
                if self.update % c.sync_check_interval == 0:
                    parameters_in_sync(self.comm, self.agent, self.optimizer)
            self.log.line(f"Training finished: {self.global_episodes} episodes, {self.update} updates, "
                          f"{self.env_steps} env steps in {time.perf_counter() - start:.1f}s")
            if os.environ.get(DUMP_FINAL_VARIABLE):
                torch.save({"model": self.agent.state_dict(), "optimizer": self.optimizer.state_dict()},
                           Path(os.environ[DUMP_FINAL_VARIABLE]) / f"rank{self.rank}_final.pt")
            self.comm.barrier()
            return 0
        finally:
            self.log.close()

    def _collect_rollout(self) -> np.ndarray:
        """Step the envs T times, filling the buffer. Returns the records ``[k, 6]``
        (:data:`EPISODE_FIELDS`) of the episodes this rank finished and counts, in order.

        A time-limit truncation is bootstrapped by adding gamma * V(final obs) to that
        step's reward (the final obs is valued with the episode's own LSTM state).
        """
        records = []
        self.buffer.initial_h.copy_(self.lstm_state[0])
        self.buffer.initial_c.copy_(self.lstm_state[1])
        for t in range(self.steps):
            obs = torch.as_tensor(self.obs, device=self.device)
            starts = torch.as_tensor(self.episode_start, device=self.device, dtype=torch.float32)
            with torch.no_grad():
                logits, values, self.lstm_state = self.agent(obs[None], self.lstm_state, starts[None])
                logits, values = logits[0], values[0]  # [N, A], [N]
                try:  # multinomial itself rejects inf/nan probabilities: no extra check on the hot path
                    actions = torch.multinomial(logits.softmax(-1), 1, generator=self.sample_generator).squeeze(-1)
                except RuntimeError as err:
                    raise TrainingError(f"the policy gave non-finite outputs after update {self.update} ({err}); "
                                        f"lower --learning-rate-actor/--learning-rate-critic or --max-grad-norm, "
                                        f"or check --data") from None
                log_probs = torch.distributions.Categorical(logits=logits, validate_args=False).log_prob(actions)
            self.obs, rewards, terminated, truncated, info = self.env.step(actions.cpu().numpy())
            rewards_t = torch.as_tensor(rewards, dtype=torch.float32, device=self.device)
            cut = truncated & ~terminated
            if cut.any():
                rewards_t += self.config.gamma * self._final_values(info["final_obs"], cut)
            self.buffer.add(t, obs, starts, actions.float(), log_probs, values, rewards_t)
            self.episode_start = terminated | truncated
            if "_episode" in info:
                records.append(self._count_episodes(info["episode"], info["_episode"]))
        self.env_steps += self.steps * self.config.num_envs * self.world_size
        return np.concatenate(records) if records else np.zeros((0, len(EPISODE_FIELDS)))

    def _final_values(self, final_obs: np.ndarray, cut: np.ndarray) -> Tensor:
        """``[N]`` values of the final observations where ``cut``, 0 elsewhere."""
        index = torch.as_tensor(np.flatnonzero(cut), device=self.device)
        obs = torch.as_tensor(final_obs[cut], device=self.device, dtype=torch.float32)
        h, c = self.lstm_state
        with torch.no_grad():
            _, values, _ = self.agent(obs[None], (h[:, index], c[:, index]), torch.zeros(1, len(index),
                                                                                         device=self.device))
        out = torch.zeros(self.config.num_envs, device=self.device)
        out[index] = values[0]
        return out

    def _count_episodes(self, episode: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
        """Records ``[k, 6]`` of the finished episodes, in env order, up to this rank's share."""
        rows = np.flatnonzero(mask)[: max(0, self.share - self.rank_episodes)]
        self.rank_episodes += len(rows)
        return episode_records(episode, rows)

    def _bootstrap(self) -> tuple[Tensor, Tensor]:
        """Value ``[N]`` of the observation after the rollout, and its episode-start flags ``[N]``."""
        obs = torch.as_tensor(self.obs, device=self.device)
        starts = torch.as_tensor(self.episode_start, device=self.device, dtype=torch.float32)
        with torch.no_grad():
            _, values, _ = self.agent(obs[None], self.lstm_state, starts[None])
        return values[0], starts

    def _update(self, batch: RolloutBatch) -> tuple[UpdateStats, bool]:
        """One PPO update; a non-finite one is undone (weights and optimizer) and counted."""
        c = self.config
        if c.anneal_lr:
            frac = max(0.0, 1.0 - self.update / self.total_updates_estimate)
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
        self.update += 1
        if ok:
            self.bad_updates = 0
            return stats, False
        _restore_snapshot(self.agent, self.optimizer, snapshot)
        self.bad_updates += 1
        self.log.line(f"warning: update {self.update} gave non-finite losses or parameters; skipped "
                      f"({self.bad_updates} in a row)", to_log=True)
        if self.bad_updates >= MAX_BAD_UPDATES:
            raise TrainingError(f"{MAX_BAD_UPDATES} updates in a row were non-finite; lower "
                                f"--learning-rate-actor/--learning-rate-critic or --max-grad-norm, or check --data")
        return stats, True

    def _agree(self, records: np.ndarray, seconds: float) -> tuple[bool, int, list[float], list[list[float]]]:
        """The one per-update collective. Each rank sends a fixed-size row (gloo needs equal
        sizes): [episode count, done flag, signal number or 0, env-steps/s, records padded to T*N x 6].

        Returns (every rank done, the largest signal any rank received (0: none), env-steps/s per rank, every rank's
        episode records in rank order).
        """
        capacity = self.steps * self.config.num_envs  # at most one episode per env per step
        row = torch.zeros(1, 4 + capacity * len(EPISODE_FIELDS), dtype=torch.float64)
        row[0, :4] = torch.tensor([len(records), float(self.rank_episodes >= self.share),
                                   float(self.stop.signum or 0), capacity / seconds])
        row[0, 4:4 + records.size] = torch.from_numpy(records.reshape(-1))
        rows = self.comm.gather(row.to(self.device), dim=0).cpu()  # [W, 4 + capacity * 6]
        gathered = [rows[r, 4:].view(capacity, -1)[: int(rows[r, 0])] for r in range(self.world_size)]
        finished = bool(rows[:, 1].sum() == self.world_size)
        return finished, int(rows[:, 2].max()), rows[:, 3].tolist(), torch.cat(gathered).tolist()

    def _log_update(self, records: list[list[float]], stats: UpdateStats, skipped: bool, rank_sps: list[float],
                    wall: float) -> None:
        """Count the update's episodes one by one, so each log line covers exactly the
        episodes since the previous one; then write the metrics row."""
        c = self.config
        for record in records:
            self.global_episodes += 1
            self.interval_totals.add(EpisodeTotals.of_records([record]))
            if self.global_episodes >= self.next_log_at or self.global_episodes == c.episodes:
                self.log.line(format_episode_line(self.global_episodes, c.episodes, self.interval_totals,
                                                  self.world_size, self.device.type))
                self.interval_totals = EpisodeTotals()
                self.next_log_at = (self.global_episodes // c.log_interval + 1) * c.log_interval
        update_totals = EpisodeTotals.of_records(records)
        self.checkpoint_totals.add(update_totals)
        self.log.progress(self.global_episodes)
        self.log.metrics({
            "update": self.update, "episodes": self.global_episodes, "env_steps": self.env_steps,
            "wall_time_s": round(wall, 3), "policy_loss": stats.policy_loss, "value_loss": stats.value_loss,
            "entropy": stats.entropy, "approx_kl": stats.approx_kl, "clip_fraction": stats.clip_fraction,
            "explained_variance": stats.explained_variance, "epochs_run": stats.epochs_run,
            "lr_actor": self.optimizer.param_groups[0]["lr"], "lr_critic": self.optimizer.param_groups[1]["lr"],
            "skipped": int(skipped), "sps_global": round(sum(rank_sps), 1),
            "sps_per_rank": ";".join(f"{s:.1f}" for s in rank_sps),
            "episodes_finished": len(records),
            **(update_totals.means() if records else {}),
        })

    # ------------------------------------------------------------------ checkpoints

    def _rank_state(self) -> dict[str, Any]:
        """Everything this rank needs to continue bit for bit."""
        return to_safe({
            "rank_episodes": self.rank_episodes,
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
            "sample_generator": self.sample_generator.get_state().cpu(),
            "env": self.env.get_state(),
            "obs": self.obs.copy(),
            "episode_start": self.episode_start.copy(),
            "lstm_h": self.lstm_state[0].detach().cpu().clone(),
            "lstm_c": self.lstm_state[1].detach().cpu().clone(),
        })

    def _checkpoint(self) -> None:
        """Gather every rank's state to all ranks; rank 0 writes the checkpoint atomically."""
        ranks = self.comm.gather_objects(self._rank_state())
        if self.checkpoint_totals.episodes:
            score = self.checkpoint_totals.dollar_return / self.checkpoint_totals.episodes
        else:
            score = -math.inf
        is_best = score > self.best_score
        self.best_score = max(self.best_score, score)
        self.checkpoint_totals = EpisodeTotals()
        self.next_checkpoint_at = (self.global_episodes // self.config.checkpoint_interval + 1) \
            * self.config.checkpoint_interval
        if self.rank != 0:
            return
        state = {
            "format": CHECKPOINT_FORMAT,
            "run_id": self.run_id,
            "model": {k: v.detach().cpu() for k, v in self.agent.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "config": self.config.to_dict(),
            "world_size": self.world_size,
            "permutation_generator": self.permutation_generator.get_state(),
            "counters": {
                "update": self.update, "global_episodes": self.global_episodes, "env_steps": self.env_steps,
                "interval_totals": self.interval_totals.as_list(),
                "checkpoint_totals": self.checkpoint_totals.as_list(),
                "next_log_at": self.next_log_at, "next_checkpoint_at": self.next_checkpoint_at,
                "best_score": self.best_score, "score": score,
            },
            "ranks": ranks,
        }
        self.checkpoints.save(state, self.update, is_best)


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


def new_run_id() -> str:
    """A run's identity, kept across resumes: its start time and a random tag."""
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"


def _python_rng_state(saved: Any) -> tuple:
    """``random.setstate`` wants tuples all the way down."""
    version, internal, gauss = saved
    return version, tuple(internal), gauss


# ------------------------------------------------------------------ worker entry


def train_worker(config: TrainConfig, worker: Worker, given: frozenset[str] = frozenset()) -> int:
    """The body of every worker, whichever way it was launched. Returns an exit code.

    ``given`` names the settings the command line gave: on ``--resume`` every other
    setting comes from the checkpoint. Set-up problems on any rank are agreed on
    collectively (two fixed collectives, whatever fails where), so a bad input on
    one rank stops every rank with exit 2 instead of leaving the others waiting in
    a collective. A failure after that (a full disk, repeated non-finite updates)
    raises :class:`WorkerFailed` after this rank's clean-up; the launch code reports
    it and ends the job, as it does for any other exception.
    """
    comm = worker.comm
    stop = StopRequest()
    stop.install()
    lock: Optional[RunLock] = None
    found: Optional[tuple[str, dict[str, Any]]] = None
    notes: list[str] = []
    failure = ""
    if comm.rank == 0:  # step 1: rank 0 alone locks the run dir, then resumes or claims it
        try:
            lock = _lock_run(config)
            found = _find_resume(config)
            if found is None:
                notes += _claim_run_dir(config)
        except (UsageError, CheckpointError) as err:
            failure = str(err)
    failure, found, notes = comm.gather_objects((failure, found, notes))[0]
    trainer: Optional[Trainer] = None
    if not failure:  # step 2: every rank builds its trainer
        try:
            if found is not None:
                config, changes = resumed_config(config, given, found[1]["config"])
                validate(config, comm.world_size)
                notes.append(f"Settings changed on resume: {', '.join(changes)}" if changes
                             else "Settings: as in the checkpoint")
            trainer = Trainer(config, worker, (Path(found[0]), found[1]) if found else None, stop, tuple(notes))
        except (UsageError, CheckpointError) as err:
            failure = str(err)
        failure = next((f for f in comm.gather_objects(failure) if f), "")
    try:
        if failure:
            if comm.rank == 0:
                print(f"error: {failure}", file=sys.stderr)
            return EXIT_USAGE
        assert trainer is not None
        return trainer.run()
    except (TrainingError, CheckpointError) as err:
        raise WorkerFailed(str(err)) from None
    finally:
        if lock is not None:
            lock.release()


def _lock_run(config: TrainConfig) -> Optional[RunLock]:
    """Lock the checkpoint dir, unless the launching process already holds the lock."""
    if os.environ.get(LOCK_HELD_VARIABLE) == "1":
        return None
    lock = RunLock(config.checkpoint_dir)
    lock.acquire()
    return lock


def _claim_run_dir(config: TrainConfig) -> list[str]:
    """A fresh run's claim on --checkpoint-dir: refused if it holds a run, unless --overwrite,
    which moves that run aside. Returns the start-up notes (what was moved where)."""
    directory = CheckpointDir(config.checkpoint_dir)
    if not config.overwrite:
        directory.refuse_if_taken()
        return []
    held = directory.describe_run()
    moved = directory.move_aside()
    return [f"--overwrite: moved {held[0]} into {moved}/"] if held is not None and moved is not None else []


def _find_resume(config: TrainConfig) -> Optional[tuple[str, dict[str, Any]]]:
    """With --resume, the newest valid checkpoint (path, state); warns about skipped files."""
    if not config.resume:
        return None
    path, state, skipped = CheckpointDir(config.checkpoint_dir).load_newest_valid()
    for line in skipped:
        print(f"warning: {line}; falling back to an older checkpoint", file=sys.stderr)
    return str(path), state
