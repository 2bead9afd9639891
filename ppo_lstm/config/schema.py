"""The training configuration: one dataclass, :class:`TrainConfig`, whose fields are every
setting of a run and every flag of ``train_ppo_lstm.py`` (with the nested
:class:`envs.config.EnvConfig`).

A field is made with :func:`setting`: its default, type, ``help`` and ``group`` become the
flag (:mod:`ppo_lstm.config.command_line`); nothing about a flag is written twice. A field
marked ``launch`` describes this invocation (where to write, how many workers, which port);
every other field is a setting of the run, which ``--resume`` takes from the checkpoint
unless the command line gives it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from envs.config import EnvConfig

from .plan import (BASE_BATCH, BASE_MINIBATCH, BASE_RATES, DEFAULT_RATE_CAP, FULL_FROM, MAX_MINIBATCHES,
                   MIN_MINIBATCH, MIN_SEQUENCES, RULES, SHARD_FROM, SHORT_FROM, SHORT_STEPS, STEPS_PER_ENV, LATEST_RULE)
from .schedule import LATEST_SCHEDULE_RULE, SCHEDULE_RULES

RUN, PPO, MODEL, DIST, ENV = "run", "PPO", "model", "distributed", "environment"
GROUP_TITLES = {
    RUN: "run: length, data, logging and checkpoints",
    PPO: "PPO: rollout and update",
    MODEL: "model: recurrent actor-critic sizes",
    ENV: "environment: market, positions and costs",
    DIST: "distributed: workers, rendezvous and faults",
}
DEFAULT_MASTER_PORT = 12355
MAX_LEARNING_RATE = 10.0  # far above any useful Adam rate; larger ones overflow Adam's step


def setting(default: Any, group: str, help: str, launch: bool = False, **extra: Any) -> Any:
    """A dataclass field carrying its flag's group and help text; ``launch`` marks a
    setting of this invocation, which ``--resume`` never takes from the checkpoint."""
    return field(default=default, metadata={"group": group, "help": help, "launch": launch, **extra})


@dataclass
class TrainConfig:
    """All options of a training run. Field ``foo_bar`` is flag ``--foo-bar``."""

    # run
    episodes: int = setting(1000, RUN, "total completed episodes (global, over all workers)")
    num_envs: int = setting(64, RUN, "vectorised environments per worker (each update takes 16 steps of every env, 8 "
                                "from 16 to 31 env sequences: docs/batch_scaling.md)")
    seed: int = setting(1, RUN, "random seed (model init, envs, sampling)")
    device: str = setting("auto", RUN, "where to train", launch=True, choices=("auto", "cpu", "cuda"))
    threads: Optional[int] = setting(None, RUN, "intra-op torch threads per worker "
                                           "(default: OMP_NUM_THREADS if set, else 1)", launch=True)
    autocast: str = setting("off", RUN, "bf16: run the PPO update's forward pass (matrix products, the LSTM) in bfloat16 "
                                   "under torch.autocast; rollouts, losses and Adam stay float32. On a CPU it is "
                                   "slower at the default sizes; off: float32 throughout", choices=("off", "bf16"))
    deterministic: bool = setting(True, RUN, "GPU workers use deterministic cuDNN and cuBLAS algorithms, so ranks that run "
                                        "the same update stay bitwise equal (--no-deterministic: torch's defaults); "
                                        "CPU runs are deterministic either way", launch=True)
    data: Optional[Union[str, list[str]]] = setting(
        None, RUN, "OHLCV history for rank 0: one or more files (CSV, CSV.gz, Parquet) or directories of them, each "
                   "file one instrument (docs/data.md; default: a simulated market)", nargs="+", metavar="PATH")
    date_format: Optional[str] = setting(None, RUN, "strftime format of the data's time column (default: detected)")
    data_all_ranks: bool = setting(False, RUN, "trade --data on every rank (at different random windows)")
    data_start: Optional[str] = setting(None, RUN, "first bar of --data to use, a date (inclusive; default: the first)")
    data_end: Optional[str] = setting(None, RUN, "last bar of --data to use (inclusive; a date without a time of day "
                                            "includes that whole day; default: the last)")
    holdout: float = setting(0.2, RUN, "with --data: the last fraction of its bars, kept out of training and backtested "
                                  "at every checkpoint (best.pt = best hold-out return); 0 turns the hold-out off")
    holdout_episodes: int = setting(32, RUN, "without --data: simulated episodes on held-out seeds, backtested at every "
                                        "checkpoint instead (0 turns the hold-out off)")
    log_file: str = setting("training.log", RUN, "append episode lines here (flushed per line, for tail -f)", launch=True)
    log_interval: int = setting(10, RUN, "print a log line every this many episodes")
    checkpoint_dir: str = setting("checkpoints", RUN, "checkpoints, metrics.csv and the lock file go here", launch=True)
    checkpoint_interval: int = setting(100, RUN, "save a checkpoint every this many episodes (and at the end)")
    keep_checkpoints: int = setting(3, RUN, "how many recent checkpoints to keep (best.pt is kept apart)")
    resume: bool = setting(False, RUN, "continue the run in --checkpoint-dir from its newest valid checkpoint, with its "
                      "settings (flags given here override them)", launch=True)
    overwrite: bool = setting(False, RUN, "start afresh in a --checkpoint-dir that holds a run, moving that run's files "
                         "into <checkpoint-dir>/previous-<timestamp>/", launch=True)
    allow_data_change: bool = setting(False, RUN, "with --resume: go on when the training data changed since the "
                                 "checkpoint (a file that grew or was edited, an instrument added or removed); "
                                 "best.pt is then chosen afresh on the new hold-out (default: refuse such a resume)",
                                 launch=True)
    progress: bool = setting(True, RUN, "show a tqdm progress bar over episodes", launch=True)
    time_limit: Optional[str] = setting(None, RUN, "end the run cleanly after this much wall time (90s, 10min, 1h30m): a "
                                   "hold-out backtest, a checkpoint and the summary, as at its end; --resume goes on. "
                                   "The cost warm-up and the rates' annealing follow --episodes: a run the limit will "
                                   "cut short of them says so early, with the --episodes that fits",
                                   launch=True, metavar="DURATION")
    train_for: Optional[str] = setting(None, RUN, "train for this much wall time (90s, 10min, 1h30m) instead of a number "
                                  "of --episodes: once a twentieth of it has passed, the run sets its episodes to "
                                  "what fits at its measured speed, so the cost warm-up and the rates' annealing end "
                                  "with the time; its checkpoints record them", launch=True, metavar="DURATION")
    tensorboard: bool = setting(False, RUN, "also write TensorBoard curves to <checkpoint-dir>/tb (needs tensorboard)")
    # PPO
    update_interval: Optional[int] = setting(None, PPO, "transitions in one update's batch U, all workers together "
                                                        "(default: --rollout-steps of every env, so steps x --num-envs "
                                                        "x workers)")
    rollout_steps: Optional[int] = setting(None, PPO, f"steps of every env in one update's batch (default: {STEPS_PER_ENV}; "
                                                 f"{SHORT_STEPS} from {SHORT_FROM} to {FULL_FROM - 1} env sequences, "
                                                 f"envs x workers); --update-interval sets the batch instead")
    learning_rate_actor: Optional[float] = setting(
        None, PPO, f"Adam learning rate of encoder, LSTM and policy head (default: {BASE_RATES[0]:g} x "
                   f"min(sqrt(U / {BASE_BATCH}), --rate-cap) at a batch of U transitions, sqrt(minibatch / "
                   f"{BASE_MINIBATCH}) where the default takes under {MAX_MINIBATCHES} minibatches; a given rate is "
                   f"used as it is)")
    learning_rate_critic: Optional[float] = setting(
        None, PPO, f"Adam learning rate of the value head (default: {BASE_RATES[1]:g} x the same scale as the "
                   f"actor's; a given rate is used as it is)")
    rate_cap: float = setting(
        DEFAULT_RATE_CAP, PPO, f"the most the batch rule scales the default learning rates by (the scale of "
                               f"--learning-rate-actor's default, up to this; {DEFAULT_RATE_CAP:g} is reached at a "
                               f"batch of {int(BASE_BATCH * DEFAULT_RATE_CAP ** 2)}); a given rate is not scaled")
    batch_rule: int = setting(LATEST_RULE, PPO, "version of the batch rule, which picks the rollout length, the "
                                                "minibatches and the default rates (docs/batch_scaling.md); a "
                                                "resumed run keeps the version it started with",
                              choices=tuple(RULES))
    gamma: float = setting(0.99, PPO, "discount factor")
    gae_lambda: float = setting(0.95, PPO, "GAE lambda")
    clip: float = setting(0.2, PPO, "PPO ratio clip range")
    epochs: int = setting(4, PPO, "passes over each batch")
    minibatches: Optional[int] = setting(None, PPO, f"minibatches per epoch, each a set of whole env sequences (default: "
                                               f"{MAX_MINIBATCHES}, fewer where each would hold under {MIN_SEQUENCES} "
                                               f"sequences or {MIN_MINIBATCH} transitions, e.g. 2 at 8 envs; a given "
                                               f"count leaves the default rates on the batch)")
    ent_coef: float = setting(0.02, PPO, "entropy bonus coefficient")
    vf_coef: float = setting(0.5, PPO, "value loss coefficient")
    max_grad_norm: float = setting(0.5, PPO, "global gradient-norm clip")
    clip_vloss: bool = setting(True, PPO, "clip the value loss around the old values")
    norm_adv: bool = setting(True, PPO, "normalise advantages per minibatch")
    norm_value: bool = setting(False, PPO, "the critic learns the returns standardised by their running mean and std "
                                      "(rl_games' normalize_value: baselines' RunningMeanStd of every batch's "
                                      "returns); its values are de-normalised for GAE, its value loss is in those "
                                      "units. Off: the critic learns the returns as they are")
    anneal_lr: bool = setting(True, PPO, "anneal learning rates linearly to 0 over the run's progress (its env "
                                         "steps or finished episodes, whichever is further, of what --episodes makes)")
    micro_batches: int = setting(1, PPO, "pieces each worker splits its share of a minibatch into, their gradients summed "
                                    "before the step: the same update in less memory", launch=True)
    target_kl: Optional[float] = setting(None, PPO,
                                    "stop an update's epochs early when approx-KL exceeds this (default: off)")
    cost_warmup: float = setting(0.5, PPO, "fraction of the run (its progress, as --anneal-lr's) over which the "
                                      "training envs' fee and slippage ramp up linearly from 0 to "
                                      "--fee-bps/--slippage-bps (0: full costs from the start)")
    schedule_rule: int = setting(LATEST_SCHEDULE_RULE, PPO, "version of the clock --cost-warmup and --anneal-lr "
                                                            "follow (2: the run's progress; 1: the rates on env "
                                                            "steps, the costs on finished episodes); a resumed run "
                                                            "keeps the version it started with",
                                 choices=SCHEDULE_RULES)
    # model
    hidden_size: int = setting(64, MODEL, "width of the MLP encoder")
    lstm_size: int = setting(64, MODEL, "LSTM hidden state size")
    # distributed
    distributed: bool = setting(False, DIST, "spawn one worker per device (GPUs, or CPU processes with --device cpu)",
                           launch=True)
    num_workers: Optional[int] = setting(
        None, DIST, "workers to spawn: with --device auto/cuda, GPUs (default: every visible GPU; more than "
                    "are visible is an error); with --device cpu, CPU processes (default: 2, also what "
                    "--device auto starts without a GPU)", launch=True, aliases=("--num-gpus",)
    )
    backend: Optional[str] = setting(None, DIST, "torch.distributed backend (default: nccl on CUDA, gloo on CPU)",
                                launch=True, choices=("nccl", "gloo"))
    master_addr: str = setting("localhost", DIST, "rendezvous address of spawned workers", launch=True)
    master_port: Optional[int] = setting(
        None, DIST, f"rendezvous port (default: {DEFAULT_MASTER_PORT}, or a free one if that is taken)", launch=True
    )
    dist_timeout: float = setting(180.0, DIST, "seconds before a stuck collective (e.g. a dead worker) fails the job",
                             launch=True)
    sync_check_interval: int = setting(50, DIST, "compare a parameter checksum across ranks every this many updates")
    shard_update: str = setting("auto", DIST, f"how workers split an update: on: each computes the gradient of its "
                                              f"share of every minibatch, and one sum per gradient step adds them; "
                                              f"off: each computes every minibatch whole, with no collective in the "
                                              f"update; auto: on where each worker's share of a minibatch holds at "
                                              f"least {SHARD_FROM} transitions", launch=True,
                                choices=("auto", "on", "off"))
    spin_ms: Optional[float] = setting(None, DIST, "milliseconds a CPU (gloo) worker waiting at a collective stays on its "
                                            "core, yielding it at every turn, before it sleeps; 0: sleep at once "
                                            "(default: 20 when the workers' torch threads fit this machine's cores, "
                                            "else 0)", launch=True)
    # environment
    env: EnvConfig = field(default_factory=EnvConfig, metadata={"group": ENV})

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for checkpoints and the log header)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainConfig":
        """Inverse of :meth:`to_dict`, for settings of this format (:mod:`ppo_lstm.config.migrate`
        brings older ones to it). A key this version does not know is a ValueError: settings it
        cannot run as they were meant."""
        env_names = {f.name for f in dataclasses.fields(EnvConfig)}
        names = {f.name for f in dataclasses.fields(cls)} - {"env"}
        env = values.get("env", {})
        unknown = sorted(set(values) - names - {"env"}) + sorted(f"env.{k}" for k in set(env) - env_names)
        if unknown:
            raise ValueError(f"settings this version does not know: {', '.join(unknown)} (written by a newer "
                             f"version?)")
        return cls(env=EnvConfig(**env), **{k: v for k, v in values.items() if k != "env"})


