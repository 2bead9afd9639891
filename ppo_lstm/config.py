"""The training configuration: one dataclass, and the argparse flags built from it.

Every flag of ``train_ppo_lstm.py`` is a field of :class:`TrainConfig` (or of the
nested :class:`envs.config.EnvConfig`). A field's default, type, ``help`` and
``group`` metadata become the flag (:func:`ppo_lstm.config_file.add_field_flag`);
nothing about a flag is written twice.

A field marked ``launch`` describes this invocation (where to write, how many
workers, which port); every other field is a setting of the run, which
``--resume`` takes from the checkpoint unless the command line gives it.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from envs.config import EnvConfig
from envs.data.features import FEATURE_WINDOW, SAVED_FEATURE_WINDOW

from .rundir.checkpoint import RUN_CONFIG_NAME, atomic_write_bytes
from .config_file import (DefaultsHelpFormatter, ParsedArgs, add_config_options, add_field_flag, dump_settings,
                          flag_name, parse_args)
from .batch_rule import (BASE_BATCH, BASE_MINIBATCH, BASE_RATES, DEFAULT_RATE_CAP, FULL_FROM, MAX_MINIBATCHES,
                         MIN_MINIBATCH, MIN_SEQUENCES, SAVED_RATE_CAP, SHORT_FROM, SHORT_STEPS, STEPS_PER_ENV,
                         minibatches, steps_per_env, update_batch)
from .config_values import limit_seconds
from .errors import OneLineParser, UsageError

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


def _f(default: Any, group: str, help: str, launch: bool = False, **extra: Any) -> Any:
    """A dataclass field carrying its flag's group and help text; ``launch`` marks a
    setting of this invocation, which ``--resume`` never takes from the checkpoint."""
    return field(default=default, metadata={"group": group, "help": help, "launch": launch, **extra})


@dataclass
class TrainConfig:
    """All options of a training run. Field ``foo_bar`` is flag ``--foo-bar``."""

    # run
    episodes: int = _f(1000, RUN, "total completed episodes (global, over all workers)")
    num_envs: int = _f(64, RUN, "vectorised environments per worker (each update takes 16 steps of every env, 8 "
                                "from 16 to 31 env sequences: docs/batch_scaling.md)")
    seed: int = _f(1, RUN, "random seed (model init, envs, sampling)")
    device: str = _f("auto", RUN, "where to train", launch=True, choices=("auto", "cpu", "cuda"))
    threads: Optional[int] = _f(None, RUN, "intra-op torch threads per worker "
                                           "(default: OMP_NUM_THREADS if set, else 1)", launch=True)
    autocast: str = _f("off", RUN, "bf16: run the PPO update's forward pass (matrix products, the LSTM) in bfloat16 "
                                   "under torch.autocast; rollouts, losses and Adam stay float32. On a CPU it is "
                                   "slower at the default sizes; off: float32 throughout", choices=("off", "bf16"))
    deterministic: bool = _f(True, RUN, "GPU workers use deterministic cuDNN and cuBLAS algorithms, so ranks that run "
                                        "the same update stay bitwise equal (--no-deterministic: torch's defaults); "
                                        "CPU runs are deterministic either way", launch=True)
    data: Optional[Union[str, list[str]]] = _f(
        None, RUN, "OHLCV history for rank 0: one or more files (CSV, CSV.gz, Parquet) or directories of them, each "
                   "file one instrument (docs/data.md; default: a simulated market)", nargs="+", metavar="PATH")
    date_format: Optional[str] = _f(None, RUN, "strftime format of the data's time column (default: detected)")
    data_all_ranks: bool = _f(False, RUN, "trade --data on every rank (at different random windows)")
    data_start: Optional[str] = _f(None, RUN, "first bar of --data to use, a date (inclusive; default: the first)")
    data_end: Optional[str] = _f(None, RUN, "last bar of --data to use (inclusive; a date without a time of day "
                                            "includes that whole day; default: the last)")
    holdout: float = _f(0.2, RUN, "with --data: the last fraction of its bars, kept out of training and backtested "
                                  "at every checkpoint (best.pt = best hold-out return); 0 turns the hold-out off")
    holdout_episodes: int = _f(32, RUN, "without --data: simulated episodes on held-out seeds, backtested at every "
                                        "checkpoint instead (0 turns the hold-out off)")
    log_file: str = _f("training.log", RUN, "append episode lines here (flushed per line, for tail -f)", launch=True)
    log_interval: int = _f(10, RUN, "print a log line every this many episodes")
    checkpoint_dir: str = _f("checkpoints", RUN, "checkpoints, metrics.csv and the lock file go here", launch=True)
    checkpoint_interval: int = _f(100, RUN, "save a checkpoint every this many episodes (and at the end)")
    keep_checkpoints: int = _f(3, RUN, "how many recent checkpoints to keep (best.pt is kept apart)")
    resume: bool = _f(False, RUN, "continue the run in --checkpoint-dir from its newest valid checkpoint, with its "
                      "settings (flags given here override them)", launch=True)
    overwrite: bool = _f(False, RUN, "start afresh in a --checkpoint-dir that holds a run, moving that run's files "
                         "into <checkpoint-dir>/previous-<timestamp>/", launch=True)
    allow_data_change: bool = _f(False, RUN, "with --resume: go on when the training data changed since the "
                                 "checkpoint (a file that grew or was edited, an instrument added or removed); "
                                 "best.pt is then chosen afresh on the new hold-out (default: refuse such a resume)",
                                 launch=True)
    progress: bool = _f(True, RUN, "show a tqdm progress bar over episodes", launch=True)
    time_limit: Optional[str] = _f(None, RUN, "end the run cleanly after this much wall time (90s, 10min, 1h30m): a "
                                   "hold-out backtest, a checkpoint and the summary, as at its end; --resume goes on. "
                                   "The cost warm-up and the rates' annealing follow --episodes: a run the limit will "
                                   "cut short of them says so early, with the --episodes that fits",
                                   launch=True, metavar="DURATION")
    train_for: Optional[str] = _f(None, RUN, "train for this much wall time (90s, 10min, 1h30m) instead of a number "
                                  "of --episodes: once a twentieth of it has passed, the run sets its episodes to "
                                  "what fits at its measured speed, so the cost warm-up and the rates' annealing end "
                                  "with the time; its checkpoints record them", launch=True, metavar="DURATION")
    tensorboard: bool = _f(False, RUN, "also write TensorBoard curves to <checkpoint-dir>/tb (needs tensorboard)")
    # PPO
    update_interval: Optional[int] = _f(None, PPO, f"transitions in one update's batch U, all workers together "
                                                   f"(default: --rollout-steps of every env, so steps x --num-envs x "
                                                   f"workers)")
    rollout_steps: Optional[int] = _f(None, PPO, f"steps of every env in one update's batch (default: {STEPS_PER_ENV}; "
                                                 f"{SHORT_STEPS} from {SHORT_FROM} to {FULL_FROM - 1} env sequences, "
                                                 f"envs x workers); --update-interval sets the batch instead")
    learning_rate_actor: Optional[float] = _f(
        None, PPO, f"Adam learning rate of encoder, LSTM and policy head (default: {BASE_RATES[0]:g} x "
                   f"min(sqrt(U / {BASE_BATCH}), --rate-cap) at a batch of U transitions, sqrt(minibatch / "
                   f"{BASE_MINIBATCH}) where the default takes under {MAX_MINIBATCHES} minibatches; a given rate is "
                   f"used as it is)")
    learning_rate_critic: Optional[float] = _f(
        None, PPO, f"Adam learning rate of the value head (default: {BASE_RATES[1]:g} x the same scale as the "
                   f"actor's; a given rate is used as it is)")
    rate_cap: float = _f(
        DEFAULT_RATE_CAP, PPO, f"the most the batch rule scales the default learning rates by (the scale of "
                               f"--learning-rate-actor's default, up to this; {DEFAULT_RATE_CAP:g} is reached at a "
                               f"batch of {int(BASE_BATCH * DEFAULT_RATE_CAP ** 2)}); a given rate is not scaled")
    gamma: float = _f(0.99, PPO, "discount factor")
    gae_lambda: float = _f(0.95, PPO, "GAE lambda")
    clip: float = _f(0.2, PPO, "PPO ratio clip range")
    epochs: int = _f(4, PPO, "passes over each batch")
    minibatches: Optional[int] = _f(None, PPO, f"minibatches per epoch, each a set of whole env sequences (default: "
                                               f"{MAX_MINIBATCHES}, fewer where each would hold under {MIN_SEQUENCES} "
                                               f"sequences or {MIN_MINIBATCH} transitions, e.g. 2 at 8 envs; a given "
                                               f"count leaves the default rates on the batch)")
    ent_coef: float = _f(0.02, PPO, "entropy bonus coefficient")
    vf_coef: float = _f(0.5, PPO, "value loss coefficient")
    max_grad_norm: float = _f(0.5, PPO, "global gradient-norm clip")
    clip_vloss: bool = _f(True, PPO, "clip the value loss around the old values")
    norm_adv: bool = _f(True, PPO, "normalise advantages per minibatch")
    anneal_lr: bool = _f(True, PPO, "anneal learning rates linearly to 0 over the run's --episodes")
    micro_batches: int = _f(1, PPO, "pieces each worker splits its share of a minibatch into, their gradients summed "
                                    "before the step: the same update in less memory", launch=True)
    target_kl: Optional[float] = _f(None, PPO,
                                    "stop an update's epochs early when approx-KL exceeds this (default: off)")
    cost_warmup: float = _f(0.5, PPO, "fraction of --episodes over which the training envs' fee and slippage "
                                      "ramp up linearly from 0 to --fee-bps/--slippage-bps "
                                      "(0: full costs from the start)")
    # model
    hidden_size: int = _f(64, MODEL, "width of the MLP encoder")
    lstm_size: int = _f(64, MODEL, "LSTM hidden state size")
    # distributed
    distributed: bool = _f(False, DIST, "spawn one worker per device (GPUs, or CPU processes with --device cpu)",
                           launch=True)
    num_workers: Optional[int] = _f(
        None, DIST, "workers to spawn: with --device auto/cuda, GPUs (default: every visible GPU; more than "
                    "are visible is an error); with --device cpu, CPU processes (default: 2, also what "
                    "--device auto starts without a GPU)", launch=True, aliases=("--num-gpus",)
    )
    backend: Optional[str] = _f(None, DIST, "torch.distributed backend (default: nccl on CUDA, gloo on CPU)",
                                launch=True, choices=("nccl", "gloo"))
    master_addr: str = _f("localhost", DIST, "rendezvous address of spawned workers", launch=True)
    master_port: Optional[int] = _f(
        None, DIST, f"rendezvous port (default: {DEFAULT_MASTER_PORT}, or a free one if that is taken)", launch=True
    )
    dist_timeout: float = _f(180.0, DIST, "seconds before a stuck collective (e.g. a dead worker) fails the job",
                             launch=True)
    sync_check_interval: int = _f(50, DIST, "compare a parameter checksum across ranks every this many updates")
    spin_ms: Optional[float] = _f(None, DIST, "milliseconds a CPU (gloo) worker waiting at a collective stays on its "
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
        """Inverse of :meth:`to_dict`; unknown keys are ignored (older/newer checkpoints)."""
        values = as_this_version(values)
        env_names = {f.name for f in dataclasses.fields(EnvConfig)}
        env = EnvConfig(**{k: v for k, v in values["env"].items() if k in env_names})
        names = {f.name for f in dataclasses.fields(cls)} - {"env"}
        return cls(env=env, **{k: v for k, v in values.items() if k in names})


# What a run saved before a setting existed trained with, where that is not today's default:
# before --cost-warmup, full costs; before --rate-cap, rates capped at x8; before --rollout-steps,
# 16 steps at every env count; before --ema-spans, no EMA deviations; before --feature-window, 256 bars.
SAVED_BEFORE: dict[str, Any] = {"cost_warmup": 0.0, "rate_cap": SAVED_RATE_CAP, "rollout_steps": STEPS_PER_ENV}
ENV_SAVED_BEFORE: dict[str, Any] = {"ema_spans": None, "feature_window": SAVED_FEATURE_WINDOW}


def as_this_version(values: dict[str, Any]) -> dict[str, Any]:
    """Saved training settings (``TrainConfig.to_dict()`` of any version) as this version reads
    them: a setting the saving version lacked is what its run trained with (:data:`SAVED_BEFORE`,
    :data:`ENV_SAVED_BEFORE`), not today's default, and ``feature_window`` without feature
    columns, which then means nothing, is today's default. Checkpoints
    (:meth:`TrainConfig.from_dict`), walk-forward state and tune studies read saved settings so."""
    env = values.get("env")
    env = {**ENV_SAVED_BEFORE, **(env if isinstance(env, dict) else {})}
    if not str(env.get("features") or "").strip():
        env["feature_window"] = FEATURE_WINDOW
    return {**SAVED_BEFORE, **values, "env": env}


def as_this_version_by_dest(values: dict[str, Any]) -> dict[str, Any]:
    """:func:`as_this_version` of settings keyed by dest (``"env.fee_bps"``), as a tune study records them."""
    nested = {k: v for k, v in values.items() if not k.startswith("env.")}
    read = as_this_version({**nested, "env": {k[4:]: v for k, v in values.items() if k.startswith("env.")}})
    return {**{k: v for k, v in read.items() if k != "env"}, **{f"env.{k}": v for k, v in read["env"].items()}}


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The CLI parser, generated from :class:`TrainConfig` and its nested :class:`EnvConfig`,
    with ``--config FILE`` and ``--print-config`` (see :mod:`ppo_lstm.config_file`)."""
    parser = OneLineParser(
        prog=prog,
        description="Train a recurrent (LSTM) PPO agent to trade, on one device or many.",
        formatter_class=DefaultsHelpFormatter,
    )
    add_config_options(parser)
    groups = {key: parser.add_argument_group(title) for key, title in GROUP_TITLES.items()}
    hints, env_hints = typing.get_type_hints(TrainConfig), typing.get_type_hints(EnvConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name == "env":
            for env_field in dataclasses.fields(EnvConfig):
                add_field_flag(groups[ENV], env_field, env_hints[env_field.name], "env." + env_field.name)
        else:
            add_field_flag(groups[f.metadata["group"]], f, hints[f.name], f.name)
    return parser


@dataclass(frozen=True)
class CommandLine:
    """A parsed command line: the run's ``config``, the fields the command line or its
    ``--config`` file ``given`` (``"episodes"``, ``"env.fee_bps"``, ...), whether it asks
    for ``--print-config``, and the start-up ``note`` naming the config file (None
    without one)."""

    config: TrainConfig
    given: frozenset[str]
    print_config: bool
    note: Optional[str]


def parse_command_line(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> CommandLine:
    """Parse ``argv`` and the ``--config`` file it names (flags override the file). A bad
    flag exits 2 in one line; a bad config file raises :class:`UsageError`."""
    parsed: ParsedArgs = parse_args(build_parser(prog), argv)
    values = vars(parsed.namespace)
    if isinstance(values.get("data"), list) and len(values["data"]) == 1:
        values["data"] = values["data"][0]  # one path: the plain string, as runs have always stored it
    env = EnvConfig(**{k[4:]: v for k, v in values.items() if k.startswith("env.")})
    config = TrainConfig(env=env, **{k: v for k, v in values.items() if not k.startswith("env.")})
    from_file = set(parsed.file.values) - set(parsed.overridden) if parsed.file is not None else set()
    if config.train_for is not None and "episodes" in parsed.given - from_file:  # a file's --episodes yields
        raise UsageError(f"--train-for {config.train_for} sets the run's episodes from the time; drop --episodes, or "
                         f"drop --train-for to train a number of episodes")
    if config.rollout_steps is not None and config.update_interval is not None:  # neither comes from a checkpoint
        raise UsageError(f"--rollout-steps {config.rollout_steps} and --update-interval {config.update_interval} both "
                         f"set the batch (--update-interval takes U / (workers x --num-envs) steps); pass one of them")
    return CommandLine(config, parsed.given, parsed.print_config, parsed.describe())


def config_yaml(config: TrainConfig, header: tuple[str, ...] = ()) -> str:
    """``config`` as a YAML config file (every field, keyed by its flag name, grouped as in
    --help) that ``--config`` reads back into an equal :class:`TrainConfig`."""
    return dump_settings(build_parser(), {name: value for name, (_, value) in _settings(config).items()}, header)


def save_run_config(config: TrainConfig) -> Path:
    """Write the run's settings to ``<checkpoint-dir>/config.yaml``, atomically (rank 0, at
    the start of a run or resume). Every field is written, but ``resume`` and ``overwrite``
    as false: the file describes the run, so fed back with ``--config`` it starts a new
    run with these settings (refused in a directory that holds one) and never resumes or
    moves a run aside by itself. Raises :class:`CheckpointError` when it cannot be written."""
    path = Path(config.checkpoint_dir) / RUN_CONFIG_NAME
    header = (f"Settings of the run in {config.checkpoint_dir}, written when it (re)started; resume and "
              f"overwrite are always false here.",
              f"A new run with them: --config {path} --checkpoint-dir <another dir>; "
              f"continue this one: --resume --checkpoint-dir {config.checkpoint_dir}")
    text = config_yaml(dataclasses.replace(config, resume=False, overwrite=False), header)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))
    return path


def _settings(config: TrainConfig) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Every flag's field and value, keyed ``"name"`` or ``"env.name"``."""
    out = {f.name: (f, getattr(config, f.name)) for f in dataclasses.fields(config) if f.name != "env"}
    out.update({"env." + f.name: (f, getattr(config.env, f.name)) for f in dataclasses.fields(config.env)})
    return out


def resumed_config(config: TrainConfig, given: frozenset[str],
                   saved: dict[str, Any]) -> tuple[TrainConfig, list[str]]:
    """The config of a resumed run: the checkpoint's ``saved`` settings, except the launch
    fields and those the command line ``given`` (which win).

    Returns it with one ``--flag old -> new`` entry per given setting that changed.
    """
    merged = TrainConfig.from_dict(saved)
    changes = []
    for name, (f, value) in _settings(config).items():
        if not (f.metadata.get("launch") or name in given):
            continue
        target = merged.env if name.startswith("env.") else merged
        old = getattr(target, f.name)
        if not f.metadata.get("launch") and old != value:
            changes.append(f"{flag_name(f.name)} {_show(old)} -> {_show(value)}")
        setattr(target, f.name, value)
    return merged, changes


def _show(value: Any) -> str:
    return "none" if value is None else str(value)


def validate(config: TrainConfig, world_size: int = 1) -> None:
    """Raise :class:`UsageError` (one line, how to fix) for an impossible configuration."""
    positive = ("episodes", "num_envs", "log_interval", "checkpoint_interval", "keep_checkpoints", "update_interval",
                "rollout_steps", "epochs", "minibatches", "micro_batches", "hidden_size", "lstm_size",
                "sync_check_interval")
    for name in positive:
        value = getattr(config, name)
        if value is not None and value < 1:
            raise UsageError(f"{flag_name(name)} must be a positive count, got {value}")
    if config.num_workers is not None and config.num_workers < 1:
        raise UsageError(f"--num-workers/--num-gpus must be at least 1, got {config.num_workers}")
    if config.threads is not None and config.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {config.threads}")
    limit_seconds(config.time_limit)
    limit_seconds(config.train_for, "--train-for")
    for name in ("clip", "max_grad_norm", "dist_timeout", "rate_cap"):
        value = getattr(config, name)
        if not value > 0:
            raise UsageError(f"{flag_name(name)} must be > 0, got {value}")
    for name in ("learning_rate_actor", "learning_rate_critic"):
        value = getattr(config, name)
        if value is not None and not 0 < value <= MAX_LEARNING_RATE:
            raise UsageError(f"{flag_name(name)} must be within (0, {MAX_LEARNING_RATE:g}], got {value:g}")
    for name in ("gamma", "gae_lambda"):
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise UsageError(f"{flag_name(name)} must be within [0, 1], got {value}")
    if not 0.0 <= config.cost_warmup <= 1.0:
        raise UsageError(f"--cost-warmup must be within [0, 1], got {config.cost_warmup}")
    if config.target_kl is not None and not config.target_kl > 0:
        raise UsageError(f"--target-kl must be > 0 (or left out), got {config.target_kl}")
    if config.spin_ms is not None and not 0.0 <= config.spin_ms <= 1000.0:
        raise UsageError(f"--spin-ms must be within [0, 1000] milliseconds (0: never busy-wait), got {config.spin_ms}")
    if not 0.0 <= config.holdout < 1.0:
        raise UsageError(f"--holdout must be a fraction within [0, 1), got {config.holdout}; 0.2 keeps the last "
                         f"fifth of --data out of training, 0 trains on all of it")
    if config.holdout_episodes < 0:
        raise UsageError(f"--holdout-episodes must be >= 0 (0 turns the hold-out off), got {config.holdout_episodes}")
    if config.data is None:
        for name in ("data_start", "data_end"):
            if getattr(config, name) is not None:
                raise UsageError(f"{flag_name(name)} selects bars of --data; pass --data too")
        if config.env.features:
            raise UsageError(f"--features {config.env.features} names columns of --data, and a simulated market has "
                             f"no feature columns; pass --data too, or drop --features")
    if config.master_port is not None and not 0 < config.master_port < 65536:
        raise UsageError(f"--master-port must be within 1..65535, got {config.master_port}")
    try:
        config.env.validate()
    except ValueError as err:
        raise UsageError(str(err)) from None
    if config.resume and config.overwrite:
        raise UsageError("--resume continues the run in --checkpoint-dir and --overwrite moves it aside; "
                         "pass only one of them")
    if config.allow_data_change and not config.resume:
        raise UsageError("--allow-data-change is for --resume (a fresh run has no earlier data to compare); "
                         "drop it, or pass --resume")
    steps = steps_per_env(config, world_size)
    total = config.num_envs * world_size
    count = minibatches(config, world_size)
    if total % count:
        valid = [m for m in range(1, total + 1) if total % m == 0]
        raise UsageError(
            f"--minibatches {config.minibatches} must divide the {total} env sequences of a batch "
            f"(--num-envs {config.num_envs} x {world_size} workers); valid: {', '.join(map(str, valid))}"
        )
    if config.norm_adv and steps * total // count < 2:
        fits = [m for m in range(1, total + 1) if total % m == 0 and steps * total // m >= 2]
        fewer = f"--minibatches {max(fits)} or fewer, " if fits else ""
        raise UsageError(
            f"--minibatches {count} leaves one transition per minibatch "
            f"({update_batch(config, world_size)} transitions / {count}), too few to normalise "
            f"advantages; use {fewer}a larger --update-interval, or --no-norm-adv"
        )
