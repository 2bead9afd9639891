"""The command line: parse flags (and a ``--config`` file) into the config, check every
input before any worker starts, then launch (single process, spawned workers, or under
torchrun). ``--print-config`` prints the resolved settings instead."""
from __future__ import annotations

import functools
import sys
from typing import Optional

from .rundir.checkpoint import CheckpointDir
from .rundir.lock import RunLock
from .config.checks import validate
from .config.command_line import config_yaml, parse_command_line, resumed_config
from .config.schema import TrainConfig
from .distributed import first_process, launch, launched_by_torchrun, resolve_device, world_size_for
from .errors import EXIT_USAGE, UsageError
from .train.build import build_agent, check_model_matches
from .train.data_fingerprint import check_resume_data, data_fingerprint
from .train.holdout import load_training_data
from .train.run_dir import check_run_dir, hold_lock_for_workers, newest_checkpoint, release_lock_for_workers
from .train.worker import train_worker


def preflight(config: TrainConfig, given: frozenset[str], world_size: int) -> TrainConfig:
    """Every check that can fail before training: raises UsageError (one line).

    Returns the run's config: with ``--resume``, the checkpoint's settings under the
    ``given`` flags; else ``config``, once the checkpoint dir is known to hold no run
    (or ``--overwrite`` says to move it aside).
    """
    directory = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
    if config.resume and not config.overwrite:
        path, state, _ = newest_checkpoint(config)
        config = resumed_config(config, given, state["config"])[0]
    validate(config, world_size)
    if config.data is not None:
        datas, splits = load_training_data(config)  # a bad file, bad dates or a split too short: one line, exit 2
        if config.resume:  # data changed since the checkpoint: refused unless --allow-data-change
            check_resume_data(config, state, data_fingerprint(datas, splits), str(path))
    parameter_bytes = sum(p.numel() for p in build_agent(config).parameters()) * 4
    directory.check_writable(needed_bytes=4 * (3 * parameter_bytes + (1 << 20)))
    check_run_dir(config)  # not a live run's, and no run to write over unless --resume or --overwrite
    if config.resume:
        check_model_matches(config, state, path)
    return config


def print_config(config: TrainConfig, given: frozenset[str]) -> None:
    """``--print-config``: the settings this command would run with, as YAML on stdout
    (with ``--resume``, the checkpoint's under those given), once per job: under torchrun
    only global rank 0 prints. UsageError when ``--resume`` finds no checkpoint."""
    header = ("Resolved settings; train with: --config FILE (flags given with it override it)",)
    if config.resume and not config.overwrite:
        path, state, _ = newest_checkpoint(config)
        config = resumed_config(config, given, state["config"])[0]
        header += (f"--resume: the settings of {path}, under those given on the command line or in --config",)
    if first_process():
        sys.stdout.write(config_yaml(config, header))


def main(argv: Optional[list[str]] = None, force_distributed: bool = False, prog: Optional[str] = None) -> int:
    """Run the trainer; returns the process exit code (2 for bad input, 130/143 when interrupted)."""
    try:
        command = parse_command_line(argv, prog)
        config, given = command.config, command.given
        if force_distributed:
            config.distributed = True
        if command.print_config:
            print_config(config, given)
            return 0
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    notes = (command.note,) if command.note else ()
    lock: Optional[RunLock] = None
    try:
        device = resolve_device(config.device)  # launch() warns about a CPU fallback once every check passed
        world_size = world_size_for(config, device)
        if launched_by_torchrun():
            validate(config, world_size)  # every worker checks; rank 0 checks the rest when it starts
        else:
            config = preflight(config, given, world_size)
            if config.distributed:  # the launcher holds the run lock for its workers
                lock = hold_lock_for_workers(config)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return launch(config, device, functools.partial(train_worker, given=given, notes=notes))
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if lock is not None:
            release_lock_for_workers(lock)
