"""Launching workers: three ways in, one code path (``env://`` rendezvous from RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT):

1. ``--distributed``: :func:`launch` starts one worker per device with
   ``torch.multiprocessing`` (forked CPU workers on Linux, else spawned), hosts the
   rendezvous store and sets those variables;
2. ``torchrun``: the variables are already set, the process is one worker;
3. no flag: a single in-process worker with :class:`LocalComm`.
"""
from __future__ import annotations

import datetime
import multiprocessing.connection
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..config.schema import DEFAULT_MASTER_PORT, TrainConfig
from ..errors import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, UsageError, one_line
from .comm import Comm, CommError, LocalComm, TorchComm
from .cuda import configure_numerics, gpu_index_for
from .devices import (announce_workers, announces_for_job, describe_workers, launched_by_torchrun,
                      threads_per_worker, world_size_for)
from .failure import FailureAlarm, WorkerFailed, end_process, tell_ranks, with_fault_hook

FAILURE_GRACE_SECONDS = 5.0  # after one worker fails, the others get this long to stop by themselves, then SIGKILL


@dataclass
class Worker:
    """Where a worker runs: its place in the job and its torch device."""

    comm: Comm
    local_rank: int
    device: torch.device


WorkerFn = Callable[[TrainConfig, Worker], int]


def choose_master_port(config: TrainConfig) -> int:
    """The rendezvous port: the user's (which must be free), else 12355, else any free port."""
    if config.master_port is not None:
        if not _port_is_free(config.master_addr, config.master_port):
            raise UsageError(f"--master-port {config.master_port} is already in use on {config.master_addr}; "
                             f"pass a free port, e.g. --master-port {_free_port(config.master_addr)}")
        return config.master_port
    if _port_is_free(config.master_addr, DEFAULT_MASTER_PORT):
        return DEFAULT_MASTER_PORT
    return _free_port(config.master_addr)


def _port_is_free(addr: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, port))
        except OSError:
            return False
    return True


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((addr, 0))
        return sock.getsockname()[1]


def launch(config: TrainConfig, device: str, worker_fn: WorkerFn) -> int:
    """Run ``worker_fn`` once per worker and return the job's exit code.

    A worker that fails after start-up (``worker_fn`` raises) ends the whole job within
    seconds: it prints one line naming its rank and the error (plus the traceback of an
    unexpected exception), tells the other ranks through the rendezvous store, and exits
    with code 1; every other rank stops with one line and exit code 1.
    """
    if launched_by_torchrun():
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        if announces_for_job(config):
            announce_workers(config, device, local_world)
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # outlives the workers
        return _run_worker(config, device, worker_fn, int(os.environ["LOCAL_RANK"]), spawned=False,
                           alarm=agent_store)
    world_size = world_size_for(config, device)
    if not config.distributed:
        torch.set_num_threads(threads_per_worker(config))
        print(describe_workers(1, device, "", torch.get_num_threads()), flush=True)
        worker = Worker(LocalComm(), 0, _worker_device(config, device, 0))
        try:
            return worker_fn(config, worker)
        except WorkerFailed as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    store, port = _host_store(config)  # the launcher hosts the rendezvous store: it outlives every worker
    os.environ["MASTER_ADDR"] = config.master_addr
    os.environ["MASTER_PORT"] = str(port)
    os.environ["WORLD_SIZE"] = str(world_size)
    announce_workers(config, device, world_size)
    return _spawn(config, device, worker_fn, world_size, store)


def _host_store(config: TrainConfig) -> tuple[dist.TCPStore, int]:
    """The rendezvous store, listening on :func:`choose_master_port`'s port (another free
    one if someone took that port meanwhile and the user did not choose it)."""
    for attempt in range(3):
        port = choose_master_port(config) if attempt == 0 else _free_port(config.master_addr)
        try:
            return dist.TCPStore(config.master_addr, port, is_master=True, wait_for_workers=False,
                                 timeout=datetime.timedelta(seconds=config.dist_timeout)), port
        except RuntimeError as err:  # the port was taken since we looked, or the address is not this machine's
            if config.master_port is not None or attempt == 2:
                raise UsageError(f"cannot listen on {config.master_addr}:{port} for the workers' rendezvous "
                                 f"({one_line(err, 300, first_line=True)}); "
                                 f"pass another --master-port or --master-addr") from None
    raise AssertionError("unreachable")


def _spawn(config: TrainConfig, device: str, worker_fn: WorkerFn, world_size: int, store: dist.TCPStore) -> int:
    """Spawn ``world_size`` workers; forward SIGINT/SIGTERM to them; when one fails, give
    the others :data:`FAILURE_GRACE_SECONDS` to stop by themselves, SIGKILL the rest, and
    say what happened to any worker that could not say it itself."""
    context = mp.start_processes(_spawned_entry, args=(config, device, worker_fn, world_size),
                                 nprocs=world_size, join=False, start_method=_start_method(device))
    processes = context.processes
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        first = _first_failure(processes)
        if first is None:
            return 0
        failed = processes[first]
        crashed = os.access(context.error_files[first], os.R_OK)  # an exception outside the worker function
        told = failed.exitcode in (1, EXIT_USAGE, EXIT_SIGINT, EXIT_SIGTERM) and not crashed  # by the workers
        if not told and not received:  # killed, or crashed before it could tell the others: tell them
            tell_ranks(store, range(world_size), f"rank {first} {_describe_exit(failed.exitcode)}"
                        if failed.exitcode < 0 else f"rank {first} failed")
        _join_all(processes, FAILURE_GRACE_SECONDS)
        stuck = [process for process in processes if process.is_alive()]
        for process in stuck:
            process.kill()
        for process in processes:
            process.join()
        for rank, process in enumerate(processes):
            if process in stuck or received:
                continue
            if os.access(context.error_files[rank], os.R_OK):
                with open(context.error_files[rank], "rb") as handle:
                    trace = pickle.load(handle)
                print(f"{trace.rstrip()}\nerror: worker rank {rank} (pid {process.pid}) failed; the other workers "
                      f"were stopped", file=sys.stderr)
            elif process.exitcode < 0 or process.exitcode not in (0, 1, EXIT_USAGE, EXIT_SIGINT, EXIT_SIGTERM):
                print(f"error: worker rank {rank} (pid {process.pid}) {_describe_exit(process.exitcode)}; "
                      f"the other workers were stopped", file=sys.stderr)
        if failed.exitcode in (EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE):  # the workers already said why
            return failed.exitcode
        if received:
            return EXIT_SIGTERM if received[0] == signal.SIGTERM else EXIT_SIGINT
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _first_failure(processes: list[Any]) -> Optional[int]:
    """Wait until every process has exited with 0 (None) or one has exited otherwise (its index)."""
    pending = {process.sentinel: index for index, process in enumerate(processes)}
    while pending:
        for sentinel in multiprocessing.connection.wait(list(pending)):
            index = pending.pop(sentinel)
            processes[index].join()
            if processes[index].exitcode != 0:
                return index
    return None


def _join_all(processes: list[Any], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for every process to exit."""
    deadline = time.monotonic() + timeout
    alive = [process.sentinel for process in processes if process.is_alive()]
    while alive and time.monotonic() < deadline:
        for sentinel in multiprocessing.connection.wait(alive, timeout=max(0.0, deadline - time.monotonic())):
            alive.remove(sentinel)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _spawned_entry(local_rank: int, config: TrainConfig, device: str, worker_fn: WorkerFn, world_size: int) -> None:
    """Entry of a spawned worker: its own process group (the launcher forwards signals)."""
    os.setpgrp()
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(world_size))
    code = _run_worker(config, device, worker_fn, local_rank, spawned=True, alarm=True)
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _run_worker(config: TrainConfig, device: str, worker_fn: WorkerFn, local_rank: int, spawned: bool,
                alarm: bool) -> int:
    """Join the process group, run the worker, leave the group.

    ``spawned``: the launcher hosts the rendezvous store (else env://, e.g. torchrun's
    agent store). ``alarm``: that store outlives the workers, so a :class:`FailureAlarm`
    can use it. A failure in ``worker_fn`` ends this process (and, through the alarm or
    the broken collectives, the job) without leaving the group in order: a peer may be
    stuck in a collective that would never complete.
    """
    torch.set_num_threads(threads_per_worker(config))
    torch_device = _worker_device(config, device, local_rank)
    backend = config.backend or ("nccl" if device == "cuda" else "gloo")
    if backend == "nccl":  # a failed or timed-out collective raises in this thread (CommError), not in a watchdog
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if rank == 0:
        print(describe_workers(world_size, device, backend, torch.get_num_threads()), flush=True)
    timeout = datetime.timedelta(seconds=config.dist_timeout)
    device_id = torch_device if backend == "nccl" else None
    if spawned:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout,
                                device_id=device_id)
    else:
        dist.init_process_group(backend, init_method="env://", timeout=timeout, device_id=device_id)
    watch: Optional[FailureAlarm] = None
    if alarm:
        try:
            watch = FailureAlarm(rank, world_size)
        except RuntimeError as err:  # the job still ends on a failure, just not as fast under NCCL
            print(f"warning: rank {rank}: no failure alarm ({one_line(err, 300, first_line=True)})", file=sys.stderr)
    try:
        spin = None if config.spin_ms is None else config.spin_ms / 1000.0  # None: comm.spin_budget decides
        comm = with_fault_hook(TorchComm(torch_device, spin_seconds=spin))
        code = worker_fn(config, Worker(comm, local_rank, torch_device))
    except WorkerFailed as err:
        end_process(f"error: rank {rank}: {err}", watch, f"rank {rank} failed")
    except CommError as err:
        known = watch.reason() if watch is not None else ""
        end_process(f"rank {rank} stopped: {known or f'a collective failed ({err})'}",
                     watch, "" if known else f"rank {rank} lost contact with the other ranks")
    except Exception as err:  # noqa: BLE001 - whatever it is, the other ranks must not wait for this one
        traceback.print_exc()
        end_process(f"error: rank {rank}: {type(err).__name__}: {one_line(err, 300, first_line=True)}", watch,
                    f"rank {rank} failed")
    if watch is not None:
        watch.disarm()
    dist.destroy_process_group()
    return code


def _worker_device(config: TrainConfig, device: str, local_rank: int) -> torch.device:
    """This worker's torch device: the CPU, or its GPU (:func:`~.cuda.gpu_index_for`) made
    current, with the project's numerics (:func:`~.cuda.configure_numerics`) set before
    its first kernel. Raises UsageError when this process sees too few GPUs."""
    if device != "cuda":
        return torch.device("cpu")
    index = gpu_index_for(local_rank, torch.cuda.device_count())
    configure_numerics(config.deterministic)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _start_method(device: str) -> str:
    """How spawned workers start: ``fork`` for CPU workers on Linux (they inherit the
    launcher's imports, about a second less each), else ``spawn`` (CUDA cannot be
    used in a forked child, and other systems fork unsafely)."""
    return "fork" if device == "cpu" and sys.platform == "linux" else "spawn"
