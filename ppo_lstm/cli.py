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
from .config.resolve import Resolved
from .distributed import first_process, launch, launched_by_torchrun, resolve_device, world_size_for
from .errors import EXIT_USAGE, UsageError
from .train.build import build_agent, check_model_matches
from .train.data_fingerprint import check_resume_data, data_fingerprint
from .data_split import load_training_data
from .train.run_dir import Resume, newest_checkpoint, open_run
from .train.worker import RunStart, resolve_run, train_worker


def preflight(command: CommandLine, world_size: int, resume: Optional[Resume]) -> Resolved:
    """Every check that can fail before training, run by :func:`open_run` under the run lock
    once it found the checkpoint to ``resume`` (None for a fresh run): raises UsageError (one
    line). Returns the run's settings (:func:`resolve_run`)."""
    resolved = resolve_run(command, world_size, resume)
    config = resolved.config
    if config.data is not None:
        datas, splits = load_training_data(config)  # a bad file, bad dates or a split too short: one line, exit 2
        if resume is not None:  # data changed since the checkpoint: refused unless --allow-data-change
            check_resume_data(config, resume.state, data_fingerprint(datas, splits), resume.path)
    parameter_bytes = sum(p.numel() for p in build_agent(config).parameters()) * 4
    CheckpointDir(config.checkpoint_dir).check_writable(needed_bytes=4 * (3 * parameter_bytes + (1 << 20)))
    if resume is not None:
        check_model_matches(config, resume.state, resume.path)
    return resolved


def print_config(command: CommandLine, world_size: int) -> None:
    """``--print-config``: the settings this command would run with, as YAML on stdout
    (with ``--resume``, the checkpoint's under those given), once per job: under torchrun
    only global rank 0 prints. UsageError when ``--resume`` finds no checkpoint."""
    header = ("Resolved settings; train with: --config FILE (flags given with it override it)",)
    config = command.config
    resume = newest_checkpoint(config) if config.resume and not config.overwrite else None
    config = resolve_run(command, world_size, resume).config
    if resume is not None:
        header += (f"--resume: the settings of {resume.path}, under those given on the command line or in --config",)
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
        start = None  # under torchrun rank 0 opens the run when the job starts (every process sees its argv)
        if not launched_by_torchrun():  # opened here, under a lock held for the workers until they end
            run = open_run(config, functools.partial(preflight, command, world_size))
            lock, start = run.lock, RunStart(run.checked, run.resume, run.notes)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return launch(config, device, functools.partial(train_worker, command=command, start=start))
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if lock is not None:
            lock.release()
