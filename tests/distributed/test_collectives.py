"""The collectives themselves, on real gloo processes over loopback: every tensor handed to the
backend on its wire device, drift between ranks repaired bitwise from rank 0, and the spinning
collectives that deliver whether the peer is early or late."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from conftest import assert_models_equal, load_state

pytestmark = pytest.mark.timeout(180)


# ----------------------------------------------------------------------------- tensors on the backend's device


def test_wire_device_is_the_cpu_for_gloo_and_the_worker_gpu_for_nccl():
    from ppo_lstm.distributed import wire_device

    gpu = torch.device("cuda", 1)  # only a name: no GPU needed
    assert wire_device("gloo", gpu) == torch.device("cpu")
    assert wire_device("gloo", torch.device("cpu")) == torch.device("cpu")
    assert wire_device("nccl", gpu) == gpu


class Delivered(Exception):
    """Raised by :class:`DeviceCheckingCollectives` once it has checked what it was handed."""


class DeviceCheckingCollectives:
    """A stand-in for torch.distributed's collectives, for one rank of ``backend``: it
    asserts that every tensor handed to it is on ``device``, records it, and stops the
    call (a meta tensor carries no data to bring back)."""

    def __init__(self, backend: str, device: torch.device) -> None:
        self.backend, self.device, self.seen = backend, device, []

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def get_backend(self) -> str:
        return self.backend

    def _check(self, *tensors) -> None:
        for tensor in tensors:
            assert tensor.device == self.device, f"a tensor on {tensor.device} was handed to {self.backend}"
            self.seen.append(tensor.device)
        raise Delivered

    def all_gather(self, parts, tensor) -> None:
        self._check(tensor, *parts)

    def all_reduce(self, tensor) -> None:
        self._check(tensor)

    def broadcast(self, tensor, src) -> None:
        self._check(tensor)


@pytest.mark.parametrize("where", ["cpu", "meta"])
@pytest.mark.parametrize("call", ["gather", "sum", "mean", "broadcast_"])
def test_nccl_comm_hands_every_tensor_over_on_the_worker_device(call, where):
    """Under NCCL every tensor must reach the collective on the worker's GPU, including
    CPU tensors such as Adam's step counts (the re-sync after a drift broadcasts them).
    ``meta`` stands in for the GPU, so this runs without one."""
    from ppo_lstm.distributed import TorchComm

    gpu = torch.device("meta")
    collectives = DeviceCheckingCollectives("nccl", gpu)
    comm = TorchComm(gpu, collectives=collectives)
    assert comm.device == gpu
    step = torch.tensor(3.0, device=where)  # like Adam's state["step"] (on the CPU), or a parameter (on the GPU)
    with pytest.raises(Delivered):
        getattr(comm, call)(step)
    assert collectives.seen and set(collectives.seen) == {gpu}


DRIFT_SCRIPT = """
import sys
import torch
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch, parameters_in_sync

def worker(config, w):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=True)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(5, 4)).square().sum().backward()
        optimizer.step()
    if w.comm.rank == 1:  # drift: a parameter and the optimizer state of rank 1 move apart
        first = next(model.parameters())
        with torch.no_grad():
            first[0, 0] += 1e-3
        optimizer.state[first]["exp_avg"][0, 0] += 1.0
        optimizer.state[first]["step"] += 5
    repaired = not parameters_in_sync(w.comm, model, optimizer)
    in_sync_after = parameters_in_sync(w.comm, model, optimizer)
    torch.save({"repaired": repaired, "in_sync_after": in_sync_after, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, f"rank{w.comm.rank}.pt")
    return 0

if __name__ == "__main__":
    sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
"""


@pytest.mark.e2e
def test_drift_is_repaired_from_rank_0_bitwise_adam_state_included(tmp_path):
    """Two real gloo workers; rank 1's weights and Adam state drift: the sync check
    finds it, re-broadcasts rank 0's copy (Adam's CPU step counts included), warns once."""
    import subprocess
    import sys

    (tmp_path / "drift.py").write_text(DRIFT_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "drift.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("parameters diverged across ranks; re-synchronised from rank 0") == 1, result.stderr
    rank0, rank1 = load_state(tmp_path / "rank0.pt"), load_state(tmp_path / "rank1.pt")
    assert rank0["repaired"] and rank1["repaired"]
    assert rank0["in_sync_after"] and rank1["in_sync_after"]
    assert_models_equal(rank0["model"], rank1["model"])
    for key, state in rank0["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, rank1["optimizer"]["state"][key][name]), (key, name)
    assert float(rank1["optimizer"]["state"][0]["step"]) == 3.0  # rank 0's count, not rank 1's 8


def test_spin_budget_only_under_gloo_and_only_when_the_workers_fit_the_cores(monkeypatch):
    """A waiting rank busy-waits only where it takes no core from another rank."""
    from ppo_lstm.distributed import comm

    monkeypatch.setattr(comm, "usable_cores", lambda: 2)
    monkeypatch.setattr(comm.torch, "get_num_threads", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert comm.spin_budget("gloo") == comm.SPIN_SECONDS > 0
    assert comm.spin_budget("nccl") == 0.0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")  # more workers than cores
    assert comm.spin_budget("gloo") == 0.0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(comm.torch, "get_num_threads", lambda: 2)  # 2 workers x 2 threads on 2 cores
    assert comm.spin_budget("gloo") == 0.0


SPIN_SCRIPT = """
import sys, time
import torch
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch

def worker(config, w):
    comm = w.comm
    assert comm.spin_seconds == 0.005, comm.spin_seconds  # --spin-ms 5
    out = []
    for late in (0.0, 0.001, 0.1):  # a peer in time, one within the spin budget, one long after it
        if w.comm.rank == 1:
            time.sleep(late)
        x = torch.full((2, 3), float(w.comm.rank))
        out.append(comm.gather(x, dim=0).tolist())
        out.append(comm.sum(torch.tensor([1.0, w.comm.rank])).tolist())
        y = torch.tensor([float(w.comm.rank + 5)])
        comm.broadcast_(y, src=1)
        out.append(y.tolist())
    torch.save(out, f"rank{w.comm.rank}.pt")
    return 0

if __name__ == "__main__":
    sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu", spin_ms=5.0), "cpu", worker))
"""


@pytest.mark.e2e
def test_spinning_collectives_deliver_whether_the_peer_is_early_or_late(tmp_path):
    """Two real gloo workers (--spin-ms 5): gather, sum and broadcast give the same results
    when the waiting rank finds them done within its spin and when it must sleep after it."""
    import subprocess
    import sys

    (tmp_path / "spin.py").write_text(SPIN_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "spin.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    expected = [[[0.0] * 3, [0.0] * 3, [1.0] * 3, [1.0] * 3], [2.0, 1.0], [6.0]] * 3
    assert torch.load(tmp_path / "rank0.pt") == expected
    assert torch.load(tmp_path / "rank1.pt") == expected
