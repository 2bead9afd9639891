"""Everything that knows about ranks: collectives, per-rank policy, devices, launching
workers, and what happens when one fails.

The rest of the code sees a :class:`Comm`: ``rank``, ``world_size``, ``gather``,
``mean`` (plus ``sum``, ``sum_``, ``gather_objects``, ``barrier`` and ``broadcast_``). One
process is a :class:`LocalComm`; a torch.distributed worker is a :class:`TorchComm`.

- ``comm.py``: the Comm interface, LocalComm, TorchComm, the parameter sync check;
- ``policy.py``: episode shares and which ranks trade ``--data``;
- ``devices.py``: device, worker count and threads, decided before any worker starts;
- ``launch.py``: spawn, torchrun and single-process launching, one code path;
- ``failure.py``: a rank that fails after start-up ends the whole job within seconds.
"""
from .comm import Comm, CommError, LocalComm, TorchComm, parameters_in_sync, wire_device
from .devices import (announces_for_job, describe_workers, first_process, launched_by_torchrun, resolve_device,
                      threads_per_worker, usable_cores, world_size_for)
from .failure import FAIL_AT_VARIABLE, InjectedFault, WorkerFailed
from .launch import Worker, WorkerFn, choose_master_port, launch
from .policy import episode_share, remaining_episode_shares, trades_history

__all__ = [
    "Comm", "CommError", "LocalComm", "TorchComm", "parameters_in_sync", "wire_device",
    "announces_for_job", "describe_workers", "first_process", "launched_by_torchrun", "resolve_device",
    "threads_per_worker", "usable_cores", "world_size_for", "FAIL_AT_VARIABLE", "InjectedFault", "WorkerFailed",
    "Worker", "WorkerFn",
    "choose_master_port", "launch", "episode_share", "remaining_episode_shares", "trades_history",
]
