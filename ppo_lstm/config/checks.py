"""Checks of a training configuration: one line saying what is wrong and how to fix it."""
from __future__ import annotations

from ..errors import UsageError
from .flags import flag_name
from .plan import minibatches, steps_per_env, update_batch
from .schema import MAX_LEARNING_RATE, TrainConfig
from .values import limit_seconds

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
    if count > total:
        raise UsageError(f"--minibatches {count} is more than the {total} env sequences of a batch (--num-envs "
                         f"{config.num_envs} x {world_size} workers); use {total} or fewer")
    if config.norm_adv and steps * (total // count) < 2:
        fits = [m for m in range(1, total + 1) if steps * (total // m) >= 2]
        fewer = f"--minibatches {max(fits)} or fewer, " if fits else ""
        raise UsageError(
            f"--minibatches {count} leaves one transition in a minibatch "
            f"({update_batch(config, world_size)} transitions / {count}), too few to normalise "
            f"advantages; use {fewer}a larger --update-interval, or --no-norm-adv"
        )
