"""The command line: parse flags (and a ``--config`` file), resolve them (with ``--resume``,
under the checkpoint's settings: :func:`ppo_lstm.config.resolve.resolve`), check every input
before any worker starts, then launch (single process, spawned workers, or under torchrun).
``--print-config`` prints the resolved settings instead."""
from __future__ import annotations

import functools
import sys
from typing import Optional

from .rundir.checkpoint import CheckpointDir
from .rundir.lock import RunLock
from .config.command_line import CommandLine, config_yaml, parse_command_line
from .config.resolve import Resolved, resolve
from .distributed import first_process, launch, launched_by_torchrun, resolve_device, world_size_for
from .errors import EXIT_USAGE, UsageError
from .train.build import build_agent, check_model_matches
from .train.data_fingerprint import check_resume_data, data_fingerprint
from .data_split import load_training_data
from .train.run_dir import check_run_dir, hold_lock_for_workers, newest_checkpoint, release_lock_for_workers
from .train.worker import train_worker


def preflight(command: CommandLine, world_size: int) -> Resolved:
    """Every check that can fail before training: raises UsageError (one line).

    Returns the run's settings: with ``--resume``, the checkpoint's under the flags given;
    else the command line's, once the checkpoint dir is known to hold no run (or
    ``--overwrite`` says to move it aside).
    """
    config = command.config
    directory = CheckpointDir(config.checkpoint_dir, config.keep_checkpoints)
    if config.resume and not config.overwrite:
        path, state, _ = newest_checkpoint(config)
        resolved = resolve(command, world_size, state["config"], str(path))
    else:
        resolved = resolve(command, world_size)
    config = resolved.config
    if config.data is not None:
        datas, splits = load_training_data(config)  # a bad file, bad dates or a split too short: one line, exit 2
        if config.resume:  # data changed since the checkpoint: refused unless --allow-data-change
            check_resume_data(config, state, data_fingerprint(datas, splits), str(path))
    parameter_bytes = sum(p.numel() for p in build_agent(config).parameters()) * 4
    directory.check_writable(needed_bytes=4 * (3 * parameter_bytes + (1 << 20)))
    check_run_dir(config)  # not a live run's, and no run to write over unless --resume or --overwrite
    if config.resume:
        check_model_matches(config, state, path)
    return resolved


def print_config(command: CommandLine, world_size: int) -> None:
    """``--print-config``: the settings this command would run with, as YAML on stdout
    (with ``--resume``, the checkpoint's under those given), once per job: under torchrun
    only global rank 0 prints. UsageError when ``--resume`` finds no checkpoint."""
    header = ("Resolved settings; train with: --config FILE (flags given with it override it)",)
    config = command.config
    if config.resume and not config.overwrite:
        path, state, _ = newest_checkpoint(config)
        config = resolve(command, world_size, state["config"], str(path)).config
        header += (f"--resume: the settings of {path}, under those given on the command line or in --config",)
    else:
        config = resolve(command, world_size).config
    if first_process():
        sys.stdout.write(config_yaml(config, header))


def main(argv: Optional[list[str]] = None, force_distributed: bool = False, prog: Optional[str] = None) -> int:
    """Run the trainer; returns the process exit code (2 for bad input, 130/143 when interrupted)."""
    lock: Optional[RunLock] = None
    try:
        command = parse_command_line(argv, prog)
        config = command.config  # this launch's fields (device, workers, rendezvous) are the command line's
        if force_distributed:
            config.distributed = True
        if command.print_config:  # of a run for another machine too: its worker count as asked, no device probed
            print_config(command, (config.num_workers or 1) if config.distributed else 1)
            return 0
        device = resolve_device(config.device)  # launch() warns about a CPU fallback once every check passed
        world_size = world_size_for(config, device)
        if launched_by_torchrun():
            resolve(command, world_size)  # every worker checks; rank 0 resumes or claims the run when it starts
        elif preflight(command, world_size).config.distributed:  # the launcher holds the run lock for its workers
            lock = hold_lock_for_workers(config)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return launch(config, device, functools.partial(train_worker, command=command))
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if lock is not None:
            release_lock_for_workers(lock)
