"""Everything that knows about ranks: launching workers, collectives, and the sync check.

The rest of the code sees a :class:`Comm`: ``rank``, ``world_size``, ``gather``,
``mean`` (plus ``sum``, ``gather_objects`` and ``barrier``). One process is a
:class:`LocalComm`; a torch.distributed worker is a :class:`TorchComm`.

Three ways in, one code path (``env://`` rendezvous from RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT):
1. ``--distributed``: :func:`launch` spawns one worker per device with
   ``torch.multiprocessing`` and sets those variables itself;
2. ``torchrun``: the variables are already set, the process is one worker;
3. no flag: a single in-process worker with :class:`LocalComm`.
"""
from __future__ import annotations

import datetime
import io
import multiprocessing.connection
import multiprocessing.util
import os
import pickle
import re
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NoReturn, Optional, Protocol

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import Tensor, nn

from .config import DEFAULT_MASTER_PORT, TrainConfig
from .errors import EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE, UsageError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
CPU_FALLBACK_WARNING = "warning: no CUDA device found; running on CPU (gloo for distributed workers)"
FAILURE_GRACE_SECONDS = 5.0  # after one worker fails, the others get this long to stop by themselves, then SIGKILL
ALARM_GRACE_SECONDS = 1.0  # a rank told that another failed waits this long for its own collective to fail first
# Test hook: "RANK:N" makes rank RANK fail (an InjectedFault) just before its N-th gather, while
# the other ranks wait in that collective: a mid-run failure on one rank.
FAIL_AT_VARIABLE = "PPO_LSTM_FAIL_AT"


class CommError(Exception):
    """A collective failed: another rank failed or left, the network broke, or --dist-timeout passed."""


class WorkerFailed(Exception):
    """This worker cannot go on (``str(err)``: one line, what and how to fix). Raised by the
    worker function after its own clean-up; the launch code reports it and ends the job."""


class InjectedFault(RuntimeError):
    """The failure :data:`FAIL_AT_VARIABLE` injects (an unexpected exception, for tests)."""


class Comm(Protocol):
    """The collective operations the trainer uses. Every rank must call them in the same order.

    Tensors may live on any device; results come back on the device of the tensor given.
    """

    rank: int
    world_size: int

    def gather(self, tensor: Tensor, dim: int = 0) -> Tensor:
        """Concatenate every rank's ``tensor`` along ``dim`` (rank order); equal shapes required."""

    def mean(self, tensor: Tensor) -> Tensor:
        """Elementwise mean of ``tensor`` over ranks."""

    def sum(self, tensor: Tensor) -> Tensor:
        """Elementwise sum of ``tensor`` over ranks."""

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order, on every rank."""

    def barrier(self) -> None:
        """Wait until every rank gets here."""

    def broadcast_(self, tensor: Tensor, src: int = 0) -> None:
        """Overwrite ``tensor`` in place with rank ``src``'s copy."""


class LocalComm:
    """A world of one process: every collective is the identity."""

    rank = 0
    world_size = 1

    def gather(self, tensor: Tensor, dim: int = 0) -> Tensor:
        return tensor

    def mean(self, tensor: Tensor) -> Tensor:
        return tensor

    def sum(self, tensor: Tensor) -> Tensor:
        return tensor

    def gather_objects(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def broadcast_(self, tensor: Tensor, src: int = 0) -> None:
        pass


def wire_device(backend: str, device: torch.device) -> torch.device:
    """The device every tensor must be on when handed to ``backend``'s collectives:
    the CPU for gloo; the worker's own device (its GPU) for NCCL."""
    return torch.device("cpu") if backend == "gloo" else torch.device(device)


class TorchComm:
    """Collectives over an initialised torch.distributed process group.

    Tensors from any device go in: each is copied to :attr:`device`, where the backend
    needs it (:func:`wire_device`), and the result comes back on the tensor's own device.
    That matters under NCCL, where the parameters are on the GPU but Adam keeps its
    ``step`` counts on the CPU.

    ``device`` is the worker's device (default: the current CUDA device under NCCL).
    ``collectives`` is :mod:`torch.distributed`; a test may pass a stand-in offering the
    same functions (``get_rank``, ``get_world_size``, ``get_backend``, ``all_gather``,
    ``all_reduce``, ``broadcast``, ``all_gather_object``, ``barrier``).
    """

    def __init__(self, device: Optional[torch.device] = None, collectives: Any = dist) -> None:
        self._dist = collectives
        self.rank = collectives.get_rank()
        self.world_size = collectives.get_world_size()
        backend = collectives.get_backend()
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self.device = wire_device(backend, device)

    def _run(self, collective: str, *args: Any) -> None:
        """Call ``collective``; a backend failure (a peer gone, a timeout) becomes a :class:`CommError`."""
        try:
            getattr(self._dist, collective)(*args)
        except RuntimeError as err:  # DistBackendError, DistNetworkError, gloo's "Connection closed by peer", ...
            raise CommError(f"{collective}: {_one_line(err)}") from err

    def _wire(self, tensor: Tensor, copy: bool = False) -> Tensor:
        """``tensor`` on the wire device, contiguous; a private copy when ``copy`` (the collective writes into it)."""
        return tensor.detach().to(self.device, copy=copy).contiguous()

    def gather(self, tensor: Tensor, dim: int = 0) -> Tensor:
        local = self._wire(tensor)
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        self._run("all_gather", parts, local)
        return torch.cat(parts, dim=dim).to(tensor.device)

    def sum(self, tensor: Tensor) -> Tensor:
        total = self._wire(tensor, copy=True)
        self._run("all_reduce", total)  # the default op: SUM
        return total.to(tensor.device)

    def mean(self, tensor: Tensor) -> Tensor:
        return self.sum(tensor) / self.world_size

    def gather_objects(self, obj: Any) -> list[Any]:
        # Tensors inside all_gather_object's own pickles do not load back in torch 2.13,
        # so objects travel as torch.save bytes and load with weights_only=True.
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        out: list[Any] = [None] * self.world_size
        self._run("all_gather_object", out, buffer.getvalue())
        return [torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True) for raw in out]

    def barrier(self) -> None:
        self._run("barrier")

    def broadcast_(self, tensor: Tensor, src: int = 0) -> None:
        wire = self._wire(tensor, copy=True)
        self._run("broadcast", wire, src)
        with torch.no_grad():
            tensor.copy_(wire)


def parameters_in_sync(comm: Comm, module: nn.Module, optimizer: Optional[torch.optim.Optimizer] = None) -> bool:
    """Compare a bit-level checksum of the parameters across ranks; on a mismatch,
    broadcast rank 0's parameters (and optimizer state) to every rank and warn.

    Returns True when every rank already held the same parameters.
    """
    if comm.world_size == 1:
        return True
    flat = torch.cat([p.detach().reshape(-1).float() for p in module.parameters()])
    bits = flat.view(torch.int32).to(torch.int64)
    checksum = torch.stack([bits.sum(), (bits * torch.arange(1, bits.numel() + 1, device=bits.device)).sum()])
    rows = comm.gather(checksum.unsqueeze(0), dim=0)  # [W, 2]
    if bool((rows == rows[0]).all()):
        return True
    tensors = [p.data for p in module.parameters()]
    if optimizer is not None:  # Adam's step counts live on the CPU, its moments with the parameters
        tensors += [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    for tensor in tensors:
        comm.broadcast_(tensor, src=0)
    if comm.rank == 0:
        warnings.warn("parameters diverged across ranks; re-synchronised from rank 0", RuntimeWarning, stacklevel=2)
    return False


# --------------------------------------------------------------------------- per-rank policy


def episode_share(total: int, rank: int, world_size: int) -> int:
    """Episodes rank ``rank`` must finish: total // world_size, plus the remainder on rank 0."""
    share = total // world_size
    return share + total % world_size if rank == 0 else share


def remaining_episode_shares(total: int, done: list[int], world_size: int) -> list[int]:
    """Episodes each rank still has to count so that the job ends at exactly ``total``.

    ``done`` holds what each rank already counted (``[]`` when a resume changed the
    layout). The plain split (:func:`episode_share` of ``total``) is kept whenever no
    rank has overshot it, so a resumed run stops exactly where an uninterrupted one
    would; otherwise what is left is split afresh the same way.
    """
    if len(done) == world_size:
        left = [episode_share(total, r, world_size) - d for r, d in enumerate(done)]
        if min(left) >= 0:
            return left
    return [episode_share(max(0, total - sum(done)), r, world_size) for r in range(world_size)]


def trades_history(config: TrainConfig, rank: int) -> bool:
    """Whether ``rank`` trades ``--data``: rank 0 does; the others simulate markets (for
    diversity) unless ``--data-all-ranks`` is set."""
    return config.data is not None and (rank == 0 or config.data_all_ranks)


# --------------------------------------------------------------------------- launching


@dataclass
class Worker:
    """Where a worker runs: its place in the job and its torch device."""

    comm: Comm
    local_rank: int
    device: torch.device


WorkerFn = Callable[[TrainConfig, Worker], int]


def threads_per_worker(config: TrainConfig, environ: Mapping[str, str] = os.environ) -> int:
    """Intra-op torch threads of every worker: ``--threads``, else ``OMP_NUM_THREADS``
    when it is set (to a positive count), else 1.

    The model is far too small to gain from intra-op threads, and on a CPU that other
    processes also use, torch's default (one thread per core) thrashes: 16 episodes took
    17.2 s instead of 1.1 s next to one busy process on 2 cores. GPU workers get the
    same rule for their CPU-side work.
    """
    if config.threads is not None:
        return config.threads
    first = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # OpenMP allows a list: "4,2"
    return int(first) if first.isdigit() and int(first) > 0 else 1


def describe_workers(world_size: int, device: str, backend: str, threads: int) -> str:
    """The start-up line naming the workers and their torch threads (rank 0 prints it)."""
    each = f"{threads} torch thread{'s' if threads > 1 else ''}"
    if world_size == 1:
        return f"Workers: 1 on {device}, {each}"
    return f"Workers: {world_size} on {device} ({backend}), {each} each"


def launched_by_torchrun() -> bool:
    """True inside a process started by torchrun (or any env:// launcher)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def announces_for_job(config: TrainConfig) -> bool:
    """Whether this process prints job-wide notices (e.g. the CPU fallback): the spawning
    launcher, or global rank 0 under torchrun; never a single-device run."""
    if launched_by_torchrun():
        return os.environ["RANK"] == "0"
    return config.distributed


def resolve_device(requested: str, announce: bool = False) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without a CUDA device is a UsageError.

    With ``announce``, the CPU fallback prints a one-line warning (:func:`launch` does
    that itself, once every start-up check has passed).
    """
    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for but no CUDA device is visible; use --device cpu "
                         "(with --num-workers N for N CPU workers)")
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if announce:
        print(CPU_FALLBACK_WARNING, file=sys.stderr)
    return "cpu"


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
    wanted = config.num_gpus
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
        worker = Worker(LocalComm(), 0, torch.device("cuda:0" if device == "cuda" else "cpu"))
        try:
            return worker_fn(config, worker)
        except WorkerFailed as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # a failed NCCL collective raises, as under torchrun
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
                                 f"({_one_line(err)}); pass another --master-port or --master-addr") from None
    raise AssertionError("unreachable")


def _spawn(config: TrainConfig, device: str, worker_fn: WorkerFn, world_size: int, store: dist.TCPStore) -> int:
    """Spawn ``world_size`` workers; forward SIGINT/SIGTERM to them; when one fails, give
    the others :data:`FAILURE_GRACE_SECONDS` to stop by themselves, SIGKILL the rest, and
    say what happened to any worker that could not say it itself."""
    context = mp.start_processes(_spawned_entry, args=(config, device, worker_fn, world_size),
                                 nprocs=world_size, join=False, start_method="spawn")
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
            _tell_ranks(store, range(world_size), f"rank {first} {_describe_exit(failed.exitcode)}"
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


def _one_line(err: BaseException) -> str:
    """The first line of ``err``'s message (or its type's name), without a C++ source
    location such as ``[/path/pair.cc:553] ``, at most 300 characters."""
    text = re.sub(r"^\[[^\]\s]+:\d+\]\s*", "", str(err).strip())
    return (text.splitlines()[0] if text else type(err).__name__)[:300]


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
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        torch_device = torch.device("cuda", local_rank)
    else:
        torch_device = torch.device("cpu")
    backend = config.backend or ("nccl" if device == "cuda" else "gloo")
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
            print(f"warning: rank {rank}: no failure alarm ({_one_line(err)})", file=sys.stderr)
    try:
        code = worker_fn(config, Worker(_with_fault_hook(TorchComm(torch_device)), local_rank, torch_device))
    except WorkerFailed as err:
        _end_process(f"error: rank {rank}: {err}", watch, f"rank {rank} failed")
    except CommError as err:
        known = watch.reason() if watch is not None else ""
        _end_process(f"rank {rank} stopped: {known or f'a collective failed ({err})'}",
                     watch, "" if known else f"rank {rank} lost contact with the other ranks")
    except Exception as err:  # noqa: BLE001 - whatever it is, the other ranks must not wait for this one
        traceback.print_exc()
        _end_process(f"error: rank {rank}: {type(err).__name__}: {_one_line(err)}", watch, f"rank {rank} failed")
    if watch is not None:
        watch.disarm()
    dist.destroy_process_group()
    return code


# --------------------------------------------------------------------------- when a rank fails

_ENDING = threading.Lock()


def _end_process(line: str, alarm: Optional["FailureAlarm"] = None, notice: str = "") -> NoReturn:
    """Print ``line`` on stderr, tell the other ranks (``notice``), and end this process now
    with exit code 1: no orderly leaving of the process group, which could wait forever
    for a peer stuck in a collective. The first caller wins; a second one (the alarm
    thread and the main thread at once) just waits for the exit."""
    _ENDING.acquire()
    print(line, file=sys.stderr, flush=True)
    if alarm is not None and notice:
        alarm.notify(notice)
    try:
        sys.stdout.flush()
        multiprocessing.util._exit_function()  # what a normal exit runs: frees our semaphores (tqdm's lock)
    except Exception:  # noqa: BLE001 - exiting regardless
        pass
    os._exit(1)


def _stop_key(rank: int) -> str:
    """The store key that tells ``rank`` to stop (per torchrun restart, so an old one never fires)."""
    return f"ppo_lstm/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/stop/{rank}"


def _tell_ranks(store: Any, ranks: Any, reason: str) -> None:
    """Ask ``ranks`` to stop, giving ``reason`` (best effort: the store may be gone)."""
    keys = [_stop_key(rank) for rank in ranks]
    try:
        store.multi_set(keys, [reason] * len(keys))
    except RuntimeError:
        pass


class FailureAlarm:
    """Stops this rank at once when another rank reports a failure.

    A thread waits on this rank's key in the rendezvous store (hosted by the spawning
    launcher, or by torchrun's agent: it outlives every worker). A failing rank sets the
    key of every other rank; the waiting thread wakes and, unless the main thread stops
    first (its collective fails), prints ``rank R stopped: <reason>`` and ends the process
    :data:`ALARM_GRACE_SECONDS` later, even while the main thread is stuck in a
    collective (NCCL does not notice a dead peer until ``--dist-timeout``).
    """

    _FOREVER = datetime.timedelta(days=3650)

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        self._store = self._connect(address)
        watcher = self._connect(address)  # a connection of its own: it blocks in wait()
        self._thread = threading.Thread(target=self._watch, args=(watcher,), name="failure-alarm", daemon=True)
        self._thread.start()

    @staticmethod
    def _connect(address: tuple[str, int]) -> dist.TCPStore:
        return dist.TCPStore(address[0], address[1], is_master=False, timeout=datetime.timedelta(seconds=60))

    def _watch(self, store: dist.TCPStore) -> None:
        key = _stop_key(self.rank)
        try:
            store.wait([key], self._FOREVER)
            reason = store.get(key).decode()
        except RuntimeError:  # the store is gone: its host (launcher or torchrun agent) is ending the job
            return
        if reason:  # empty: disarmed at the end of a normal run
            # Usually the main thread's collective fails at once (the failing rank is gone) and it
            # stops after its own clean-up (the run lock, the log); if it is stuck (NCCL) or
            # busy, stop it here.
            time.sleep(ALARM_GRACE_SECONDS)
            _end_process(f"rank {self.rank} stopped: {reason}")

    def notify(self, reason: str) -> None:
        """Tell every other rank to stop, giving ``reason``."""
        _tell_ranks(self._store, [r for r in range(self.world_size) if r != self.rank], reason)

    def reason(self) -> str:
        """Why another rank asked this one to stop ("" if none did)."""
        key = _stop_key(self.rank)
        try:
            return self._store.get(key).decode() if self._store.check([key]) else ""
        except RuntimeError:
            return ""

    def disarm(self) -> None:
        """The worker finished: release the waiting thread."""
        try:
            self._store.set(_stop_key(self.rank), "")
        except RuntimeError:
            return
        self._thread.join(timeout=10)


class _FailAt:
    """The :data:`FAIL_AT_VARIABLE` test hook: a Comm whose ``gather`` raises
    :class:`InjectedFault` at its ``calls``-th call, instead of joining the collective."""

    def __init__(self, comm: Comm, calls: int, spec: str) -> None:
        self._comm, self._calls, self._spec = comm, calls, spec
        self.rank, self.world_size = comm.rank, comm.world_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def gather(self, tensor: Tensor, dim: int = 0) -> Tensor:
        self._calls -= 1
        if self._calls == 0:
            raise InjectedFault(f"injected failure ({FAIL_AT_VARIABLE}={self._spec})")
        return self._comm.gather(tensor, dim)


def _with_fault_hook(comm: Comm) -> Comm:
    spec = os.environ.get(FAIL_AT_VARIABLE, "")
    rank, _, calls = spec.partition(":")
    if not (rank.isdigit() and calls.isdigit()):
        if spec:
            raise UsageError(f"{FAIL_AT_VARIABLE}={spec}: expected RANK:N (a test hook)")
        return comm
    return _FailAt(comm, int(calls), spec) if int(rank) == comm.rank else comm
