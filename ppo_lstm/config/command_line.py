"""The training command line: the argparse parser built from :class:`~ppo_lstm.config.schema.TrainConfig`,
its parse (flags over a ``--config`` file), and the run's settings written back as a config file."""
from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from envs.config import EnvConfig

from ..errors import OneLineParser, UsageError
from ..rundir.atomic import RUN_CONFIG_NAME, atomic_write_bytes
from .files import dump_settings
from .flags import DefaultsHelpFormatter, ParsedArgs, add_config_options, add_field_flag, parse_args
from .schema import ENV, GROUP_TITLES, TrainConfig

def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The CLI parser, generated from :class:`TrainConfig` and its nested :class:`EnvConfig`,
    with ``--config FILE`` and ``--print-config`` (see :mod:`ppo_lstm.config.files`)."""
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
    return dump_settings(build_parser(), {name: value for name, (_, value) in flag_settings(config).items()}, header)


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


def flag_settings(config: TrainConfig) -> dict[str, tuple[dataclasses.Field, Any]]:
    """Every flag's field and value, keyed ``"name"`` or ``"env.name"``."""
    out = {f.name: (f, getattr(config, f.name)) for f in dataclasses.fields(config) if f.name != "env"}
    out.update({"env." + f.name: (f, getattr(config.env, f.name)) for f in dataclasses.fields(config.env)})
    return out
