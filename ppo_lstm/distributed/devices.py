"""Devices, worker counts and threads: what a job runs on, decided before any worker starts."""
from __future__ import annotations

import os
import sys
from typing import Mapping

import torch

from ..config.schema import TrainConfig
from ..errors import UsageError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
CPU_FALLBACK_WARNING = "warning: no CUDA device found; running on CPU (gloo for distributed workers)"


def threads_per_worker(config: TrainConfig, environ: Mapping[str, str] = os.environ) -> int:
    """Intra-op torch threads of every worker: ``--threads``, else ``OMP_NUM_THREADS``
    when it is set (to a positive count), else 1.

    The model is far too small to gain from intra-op threads, and on a CPU that other
    processes also use, torch's default (one thread per core) thrashes (docs/distributed.md).
    GPU workers get the same rule for their CPU-side work.
    """
    if config.threads is not None:
        return config.threads
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # OpenMP allows a list: "4,2"
    return int(first) if first.isdigit() and int(first) > 0 else 1


def describe_workers(world_size: int, device: str, backend: str, threads: int) -> str:
    """The start-up line naming the workers, their process group's ``backend`` (``""``: a
    single process without one) and their torch threads (rank 0 prints it)."""
    each = f"{threads} torch thread{'s' if threads > 1 else ''}"
    group = f" ({backend})" if backend else ""
    if world_size == 1:
        return f"Workers: 1 on {device}{group}, {each}"
    return f"Workers: {world_size} on {device}{group}, {each} each"


def launched_by_torchrun() -> bool:
    """True inside a process started by torchrun (or any env:// launcher)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def first_process() -> bool:
    """False in a torchrun worker other than global rank 0, so that output meant once per
    job (``--print-config``) comes from one process; True in any other process."""
    return not launched_by_torchrun() or os.environ["RANK"] == "0"


def announces_for_job(config: TrainConfig) -> bool:
    """Whether this process prints job-wide notices (e.g. the CPU fallback): the spawning
    launcher, or global rank 0 under torchrun; never a single-device run."""
    if launched_by_torchrun():
        return os.environ["RANK"] == "0"
    return config.distributed


def resolve_device(requested: str, announce: bool = False,
                   cpu_hint: str = " (with --num-workers N for N CPU workers)") -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cpu``, ``cuda`` and ``cuda:N`` are
    checked against this machine (a UsageError says what is wrong and what to pass instead).

    With ``announce``, the CPU fallback prints a one-line warning (:func:`launch` does
    that itself, once every start-up check has passed). ``cpu_hint`` follows the
    ``--device cpu`` advice when CUDA was asked for and none is visible.
    """
    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if announce:
            print(CPU_FALLBACK_WARNING, file=sys.stderr)
        return "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device cuda was asked for but no CUDA device is visible; use --device cpu{cpu_hint}")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise UsageError(f"--device {requested!r} is not a torch device; use cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {requested}: CUDA is not available here; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {requested}: only cpu and cuda are supported")
    visible = torch.cuda.device_count() if device.type == "cuda" else 0
    if device.index is not None and device.index >= visible:
        raise UsageError(f"--device {requested}: this machine has {visible} visible GPU"
                         f"{'' if visible == 1 else 's'} ({', '.join(f'cuda:{i}' for i in range(visible))}); "
                         f"use one of those, or --device cuda")
    return requested


def world_size_for(config: TrainConfig, device: str) -> int:
    """How many workers this job has (before any is started).

    With ``--device auto`` or ``cuda``, an explicit ``--num-gpus N`` (alias ``--num-workers``)
    counts GPUs: more than are visible is a UsageError naming the CPU alternative. With
    ``--device cpu`` it counts CPU workers. ``--backend nccl`` needs CUDA.
    """
    if config.backend == "nccl" and device != "cuda":
        raise UsageError("--backend nccl needs CUDA devices; CPU workers use gloo (leave --backend out)")
    if launched_by_torchrun():
        return int(os.environ["WORLD_SIZE"])
    wanted = config.num_workers
    if config.device != "cpu":
        visible = torch.cuda.device_count() if device == "cuda" else 0
        if wanted is not None and wanted > visible:
            if visible == 0:
                raise UsageError(f"--num-gpus {wanted} asks for more GPUs than the 0 visible (no CUDA device "
                                 f"here); for {wanted} CPU workers use --device cpu --num-workers {wanted}")
            raise UsageError(f"--num-gpus {wanted} asks for more GPUs than the {visible} visible; use "
                             f"--num-gpus {visible} or fewer, or --device cpu --num-workers {wanted} "
                             f"for {wanted} CPU workers")
        if device == "cuda" and config.distributed:
            return visible if wanted is None else wanted
    if not config.distributed:
        return 1
    return 2 if wanted is None else wanted  # CPU workers


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def announce_workers(config: TrainConfig, device: str, local_workers: int) -> None:
    """Warnings about the job's workers, printed once by the process that speaks for
    the job (:func:`announces_for_job`): the CPU fallback of ``--device auto``, and more
    CPU threads on this machine than it has cores."""
    if config.device == "auto" and device == "cpu":
        print(CPU_FALLBACK_WARNING, file=sys.stderr)
    if device != "cpu":
        return
    cores, threads = usable_cores(), threads_per_worker(config)
    if local_workers > cores:
        print(f"warning: {local_workers} CPU workers on {cores} core{'s' if cores > 1 else ''}: they slow each "
              f"other down; use --num-workers {cores} or fewer", file=sys.stderr)
    elif local_workers * threads > cores:
        print(f"warning: {local_workers} CPU workers x {threads} torch threads on {cores} cores: they slow each "
              f"other down; use --threads {max(1, cores // local_workers)}", file=sys.stderr)
