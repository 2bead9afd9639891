"""When a rank fails after start-up: it says why in one line, tells the other ranks through
the rendezvous store, and ends at once; the others stop within seconds. Plus the
``PPO_LSTM_FAIL_AT`` test hook that injects such a failure."""
from __future__ import annotations

import datetime
import multiprocessing.util
import os
import sys
import threading
import time
from typing import Any, NoReturn, Optional

import torch.distributed as dist
from torch import Tensor

from ..errors import UsageError
from .comm import Comm

ALARM_GRACE_SECONDS = 1.0  # a rank told that another failed waits this long for its own collective to fail first
# Test hook: "RANK:N" makes rank RANK fail (an InjectedFault) just before its N-th gather, while
# the other ranks wait in that collective: a mid-run failure on one rank.
FAIL_AT_VARIABLE = "PPO_LSTM_FAIL_AT"


class WorkerFailed(Exception):
    """This worker cannot go on (``str(err)``: one line, what and how to fix). Raised by the
    worker function after its own clean-up; the launch code reports it and ends the job."""


class InjectedFault(RuntimeError):
    """The failure :data:`FAIL_AT_VARIABLE` injects (an unexpected exception, for tests)."""


_ENDING = threading.Lock()


def end_process(line: str, alarm: Optional["FailureAlarm"] = None, notice: str = "") -> NoReturn:
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


def tell_ranks(store: Any, ranks: Any, reason: str) -> None:
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
            end_process(f"rank {self.rank} stopped: {reason}")

    def notify(self, reason: str) -> None:
        """Tell every other rank to stop, giving ``reason``."""
        tell_ranks(self._store, [r for r in range(self.world_size) if r != self.rank], reason)

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


def with_fault_hook(comm: Comm) -> Comm:
    spec = os.environ.get(FAIL_AT_VARIABLE, "")
    rank, _, calls = spec.partition(":")
    if not (rank.isdigit() and calls.isdigit()):
        if spec:
            raise UsageError(f"{FAIL_AT_VARIABLE}={spec}: expected RANK:N (a test hook)")
        return comm
    return _FailAt(comm, int(calls), spec) if int(rank) == comm.rank else comm
