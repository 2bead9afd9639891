"""Collectives: the :class:`Comm` interface the rest of the code sees, its one-process
and torch.distributed implementations, and the parameter sync check."""
from __future__ import annotations

import io
import os
import time
import warnings
from typing import Any, Optional, Protocol

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import one_line
from .devices import usable_cores

# How long a gloo collective's caller busy-waits, giving the core away at every turn
# (sched_yield), before it sleeps until the collective completes. A rank that sleeps
# is woken a millisecond or more after its peer's data arrives (the scheduler, and on
# a VM the host, must wake its idle core); one that keeps its core runs the moment the
# data is there (docs/benchmarks.md, "Why --spin-ms auto"). --spin-ms overrides it.
SPIN_SECONDS = 0.02
_give_core_away = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))  # sched_yield is POSIX-only


class CommError(Exception):
    """A collective failed: another rank failed or left, the network broke, or --dist-timeout passed."""


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

    def sum_(self, tensor: Tensor) -> None:
        """Overwrite ``tensor`` in place with its elementwise sum over ranks (the same bits on every rank)."""

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

    def sum_(self, tensor: Tensor) -> None:
        pass

    def gather_objects(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass

    def broadcast_(self, tensor: Tensor, src: int = 0) -> None:
        pass


def spin_budget(backend: str) -> float:
    """Seconds a collective's caller may busy-wait (:data:`SPIN_SECONDS`): only under gloo,
    and only when this machine's workers (``LOCAL_WORLD_SIZE``) times their torch threads
    fit its cores, so a waiting rank never takes a core another rank needs. Under NCCL
    the wait is NCCL's own (blocking wait), so there is nothing to spin on."""
    if backend != "gloo":
        return 0.0
    local_workers = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return SPIN_SECONDS if local_workers * torch.get_num_threads() <= usable_cores() else 0.0


def wire_device(backend: str, device: torch.device) -> torch.device:
    """The device every tensor must be on when handed to ``backend``'s collectives:
    the CPU for gloo; the worker's own device (its GPU) for NCCL."""
    return torch.device("cpu") if backend == "gloo" else torch.device(device)


class TorchComm:
    """Collectives over an initialised torch.distributed process group.

    Tensors from any device go in: each is copied to :attr:`device`, where the backend
    needs it (:func:`wire_device`), and the result comes back on the tensor's own device.
    Under gloo, GPU tensors travel through the CPU; under NCCL, CPU tensors (the agreement
    row of the exchange, a non-fused optimizer's ``step`` counts) travel through the GPU.

    Under NCCL the worker sets ``TORCH_NCCL_BLOCKING_WAIT=1`` before the process group
    starts (launch.py), so a collective that fails or outlives ``--dist-timeout`` raises
    in the calling thread, where it becomes a :class:`CommError`.

    ``device`` is the worker's device (default: the current CUDA device under NCCL).
    ``collectives`` is :mod:`torch.distributed`; a test may pass a stand-in offering the
    same functions (``get_rank``, ``get_world_size``, ``get_backend``, ``all_gather``,
    ``all_reduce``, ``broadcast``, ``all_gather_object``, ``barrier``).
    """

    def __init__(self, device: Optional[torch.device] = None, collectives: Any = dist,
                 spin_seconds: Optional[float] = None) -> None:
        self._dist = collectives
        self.rank = collectives.get_rank()
        self.world_size = collectives.get_world_size()
        backend = collectives.get_backend()
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        self.device = wire_device(backend, device)
        # Only gloo callers spin; NCCL's blocking wait does its own waiting.
        if spin_seconds is None:
            spin_seconds = spin_budget(backend)
        self.spin_seconds = spin_seconds if backend == "gloo" else 0.0

    def _run(self, collective: str, *args: Any, spin: bool = False) -> None:
        """Call ``collective`` and wait for it (with ``spin``, a tensor collective: busy for up
        to :attr:`spin_seconds`, then asleep); a backend failure (a peer gone, a timeout)
        becomes a :class:`CommError`."""
        try:
            if spin and self.spin_seconds > 0:
                work = getattr(self._dist, collective)(*args, async_op=True)
                deadline = time.perf_counter() + self.spin_seconds
                while not work.is_completed() and time.perf_counter() < deadline:
                    _give_core_away()
                work.wait()  # at once if completed; else asleep, under the group's timeout
            else:
                getattr(self._dist, collective)(*args)
        except RuntimeError as err:  # DistBackendError, DistNetworkError, gloo's "Connection closed by peer", ...
            raise CommError(f"{collective}: {one_line(err, 300, first_line=True)}") from err

    def _wire(self, tensor: Tensor, copy: bool = False) -> Tensor:
        """``tensor`` on the wire device, contiguous; a private copy when ``copy`` (the collective writes into it)."""
        return tensor.detach().to(self.device, copy=copy).contiguous()

    def gather(self, tensor: Tensor, dim: int = 0) -> Tensor:
        local = self._wire(tensor)
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        self._run("all_gather", parts, local, spin=True)
        return torch.cat(parts, dim=dim).to(tensor.device)

    def sum(self, tensor: Tensor) -> Tensor:
        total = self._wire(tensor, copy=True)
        self._run("all_reduce", total, spin=True)  # the default op: SUM
        return total.to(tensor.device)

    def sum_(self, tensor: Tensor) -> None:
        if tensor.device == self.device and tensor.is_contiguous():
            self._run("all_reduce", tensor.detach(), spin=True)  # in place, no copy
        else:
            total = self.sum(tensor)
            with torch.no_grad():
                tensor.copy_(total)

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
        self._run("broadcast", wire, src, spin=True)
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
    if optimizer is not None:  # moments and step counts (on the parameters' device with fused Adam)
        tensors += [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    for tensor in tensors:
        comm.broadcast_(tensor, src=0)
    if comm.rank == 0:
        warnings.warn("parameters diverged across ranks; re-synchronised from rank 0", RuntimeWarning, stacklevel=2)
    return False
