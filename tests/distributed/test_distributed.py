"""Distributed training end to end: real processes, real gloo over loopback.

Covers the spawn launcher (``--distributed --device cpu``), ``torchrun`` on one
node and on two "nodes" (two torchrun agents on localhost), the split of episodes
and of the update batch over workers, a worker killed mid-run, resuming with a
different number of workers, and the rendezvous port choice.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
import torch

from conftest import (SPAWN2, TINY, TRAIN, Run, assert_models_equal, assert_no_process_left, children_of,
                      cli_in_process, episode_lines, free_port, load_state, run_cli, torchrun, training_started,
                      wait_for)
from ppo_lstm.batch_rule import steps_per_env
from ppo_lstm.config import TrainConfig
from ppo_lstm.distributed import episode_share
from ppo_lstm.errors import UsageError

pytestmark = pytest.mark.timeout(180)


def checkpoint_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("checkpoint_u*.pt"))


def newest_checkpoint(directory: Path) -> dict:
    return load_state(directory / (directory / "latest").read_text().strip())


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """One 2-worker spawned run of 11 episodes (checksum every update, each rank dumps its
    final state), run while port 12355 is held by someone else."""
    cwd = tmp_path_factory.mktemp("spawned")
    dump = tmp_path_factory.mktemp("dump")
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("localhost", 12355))
        blocker.listen()
    except OSError:
        pass  # already taken by another process: just as good
    try:
        result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "11", "--sync-check-interval", "1",
                         "--log-interval", "4", "--checkpoint-interval", "4",
                         env={"PPO_LSTM_DUMP_FINAL_DIR": str(dump)})
    finally:
        blocker.close()
    return result, dump


@pytest.mark.e2e
def test_spawned_workers_end_bitwise_equal(spawned):
    result, dump = spawned
    assert result.returncode == 0, result.output
    assert "diverged" not in result.output  # the per-update checksum never disagreed
    rank0, rank1 = load_state(dump / "rank0_final.pt"), load_state(dump / "rank1_final.pt")
    assert_models_equal(rank0["model"], rank1["model"])
    for key, state in rank0["optimizer"]["state"].items():
        for name, value in state.items():
            assert (value == rank1["optimizer"]["state"][key][name]).all(), (key, name)
    # and the checkpoint holds exactly those weights
    assert_models_equal(rank0["model"], newest_checkpoint(result.cwd / "checkpoints")["model"])


@pytest.mark.e2e
def test_spawned_run_log_and_checkpoint(spawned):
    result, _ = spawned
    assert result.returncode == 0, result.output
    log = result.cwd / "training.log"
    lines = episode_lines(log)
    assert lines and all(line.endswith("| Workers: 2") for line in lines)  # CPU workers
    assert [p.name for p in result.cwd.iterdir() if p.is_dir()] == ["checkpoints"]
    state = newest_checkpoint(result.cwd / "checkpoints")
    assert state["world_size"] == 2
    assert len(state["ranks"]) == 2
    assert not any(key.startswith("module.") for key in state["model"])
    assert not (result.cwd / "checkpoints" / ".lock").exists()


@pytest.mark.e2e
def test_default_port_taken_still_runs(spawned):
    """The spawned fixture ran while 12355 was taken: a free port was picked instead."""
    result, _ = spawned
    assert result.returncode == 0, result.output
    assert "Training finished: 11 episodes" in result.stdout


def test_episode_share_unit():
    assert [episode_share(11, r, 2) for r in range(2)] == [6, 5]
    assert [episode_share(10, r, 3) for r in range(3)] == [4, 3, 3]
    assert [episode_share(7, r, 1) for r in range(1)] == [7]
    assert sum(episode_share(1001, r, 8) for r in range(8)) == 1001


@pytest.mark.e2e
def test_episode_split_end_to_end(spawned):
    result, _ = spawned
    assert result.returncode == 0, result.output
    assert "episodes per worker: 6 / 5" in result.stdout
    assert episode_lines(result.cwd / "training.log")[-1].startswith("Episode 11/11 ")
    assert "Training finished: 11 episodes" in result.stdout
    phases = re.search(r"^Time by phase \(rank 0\): rollout \d+%, gather \d+%, update \d+%, "
                       r"logging \d+%, hold-out \d+%, checkpoints \d+%(, sync check \d+%)?$", result.stdout, re.M)
    assert phases, result.stdout
    peaks = re.search(r"^Peak memory per worker: (\d+) / (\d+) MiB$", result.stdout, re.M)
    assert peaks and all(50 < int(p) < 4096 for p in peaks.groups()), result.stdout
    state = newest_checkpoint(result.cwd / "checkpoints")
    assert state["counters"]["global_episodes"] == 11
    assert [rank["rank_episodes"] for rank in state["ranks"]] == [6, 5]


def test_steps_per_env_unit():
    config = TrainConfig(update_interval=32, num_envs=2)
    assert steps_per_env(config, 1) == 16
    assert steps_per_env(config, 2) == 8
    assert steps_per_env(config, 4) == 4
    config.update_interval = 30
    with pytest.raises(UsageError) as info:
        steps_per_env(config, 2)
    message = str(info.value)
    assert "--update-interval 30" in message and "2 worker(s) x 2 envs" in message
    assert "multiple of 4" in message and "4, 8, 12, 16" in message
    assert "\n" not in message


def test_update_interval_not_dividing_exits_2(cwd):
    result = cli_in_process(cwd, *TINY, *SPAWN2, "--update-interval", "30", "--episodes", "4")
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert "--update-interval 30 does not divide into 2 worker(s) x 2 envs" in result.stderr
    assert "Traceback" not in result.output
    assert not (cwd / "checkpoints").exists() or not list((cwd / "checkpoints").glob("*.pt"))


@pytest.mark.e2e
def test_torchrun_standalone(cwd):
    result = run_cli(cwd, *TINY, "--episodes", "8", "--log-interval", "4",
                     launcher=torchrun("--standalone", "--nproc-per-node=2", TRAIN), timeout=120)
    assert result.returncode == 0, result.output
    lines = episode_lines(cwd / "training.log")
    assert lines and all(line.endswith("| Workers: 2") for line in lines)  # CPU workers
    assert [p.name for p in cwd.iterdir() if p.is_dir()] == ["checkpoints"]
    state = newest_checkpoint(cwd / "checkpoints")
    assert state["world_size"] == 2 and state["counters"]["global_episodes"] == 8
    assert not any(key.startswith("module.") for key in state["model"])


@pytest.mark.e2e
def test_two_nodes_on_loopback(tmp_path):
    """Two torchrun agents (node 0 and node 1, one worker each) with static rendezvous."""
    port = free_port()
    nodes = [Run(tmp_path / f"node{rank}", [*TINY, "--episodes", "8", "--log-interval", "4"],
                 launcher=torchrun("--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "1",
                                   "--master-addr", "localhost", "--master-port", str(port), TRAIN))
             for rank in (0, 1)]
    results = [node.wait(timeout=120) for node in nodes]
    for result in results:
        assert result.returncode == 0, result.output
    node0, node1 = (tmp_path / "node0", tmp_path / "node1")
    state = newest_checkpoint(node0 / "checkpoints")
    assert state["world_size"] == 2 and state["counters"]["global_episodes"] == 8
    assert all(line.endswith("| Workers: 2") for line in episode_lines(node0 / "training.log"))
    assert not checkpoint_files(node1 / "checkpoints") and not (node1 / "training.log").exists()


@pytest.mark.e2e
def test_killed_worker_fails_the_job(cwd):
    run = Run(cwd, [*TINY, *SPAWN2, "--episodes", "1000000", "--checkpoint-interval", "1000000"])
    wait_for(lambda: training_started(cwd), 60, "training to start", run)
    workers = []  # the launcher's children but multiprocessing's resource tracker (CPU workers are forked)
    for child in children_of(run.pid):
        try:
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                workers.append(child)
        except OSError:
            pass
    assert len(workers) == 2, workers
    killed_at = time.monotonic()
    os.kill(workers[1], signal.SIGKILL)
    result = run.wait(timeout=60)
    assert time.monotonic() - killed_at < 60
    assert result.returncode != 0
    assert "error: worker rank 1" in result.stderr and "was killed by SIGKILL" in result.stderr
    assert_no_process_left(cwd)


@pytest.mark.e2e
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)], ids=["2to1", "1to2"])
def test_resume_with_other_world_size(cwd, before, after):
    workers = {1: [], 2: SPAWN2}
    run = {1: cli_in_process, 2: run_cli}  # the 1-worker side in this process, the 2-worker one spawned
    first = run[before](cwd, *TINY, *workers[before], "--episodes", "8", "--log-interval", "4")
    assert first.returncode == 0, first.output
    second = run[after](cwd, *TINY, *workers[after], "--episodes", "14", "--log-interval", "4", "--resume")
    assert second.returncode == 0, second.output
    warning = (f"warning: the checkpoint was written by {before} worker(s) x 2 envs and this run has {after} x 2: "
               f"weights, optimizer and counters restored; environments and per-rank RNG streams restarted")
    assert second.output.count(warning) == 1 and "RuntimeWarning" not in second.output  # once, on the console
    log = (cwd / "training.log").read_text()
    assert warning in log
    assert "Resumed from checkpoints/checkpoint_u" in log and "at episode 8/14" in log
    assert episode_lines(cwd / "training.log")[-1].startswith("Episode 14/14 ")
    assert "Training finished: 14 episodes" in second.stdout
    state = newest_checkpoint(cwd / "checkpoints")
    assert state["world_size"] == after and state["counters"]["global_episodes"] == 14


@pytest.mark.e2e
def test_master_port_taken_exits_2(cwd):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("localhost", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli(cwd, *TINY, *SPAWN2, "--episodes", "4", "--master-port", str(port), timeout=60)
    assert result.returncode == 2
    assert len(result.error_lines()) == 1, result.stderr
    assert f"--master-port {port} is already in use" in result.stderr and "pass a free port, e.g. --master-port" \
        in result.stderr
    assert "Traceback" not in result.output
    assert not (cwd / "checkpoints" / ".lock").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("all_ranks", [False, True], ids=["rank0-history", "all-ranks-history"])
def test_history_on_rank_0_and_simulated_markets_elsewhere(tmp_path, all_ranks):
    """With --data, rank 0 trades the file and rank 1 a simulated market; with
    --data-all-ranks both trade the file (their env price windows prove it)."""
    import numpy as np

    from envs.data import load_ohlcv
    from ppo_lstm.rundir.checkpoint import from_safe

    closes = 100 * np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.01, 300)))
    rows = [f"2024-01-{1 + i // 24:02d} {i % 24:02d}:00:00,{c},{c * 1.001},{c * 0.999},{c}"
            for i, c in enumerate(closes)]
    (tmp_path / "prices.csv").write_text("Date,Open,High,Low,Close\n" + "\n".join(rows) + "\n")
    history = load_ohlcv(tmp_path / "prices.csv").close
    flags = ["--data-all-ranks"] if all_ranks else []
    result = run_cli(tmp_path, *TINY, *SPAWN2, "--data", "prices.csv", "--episodes", "4", *flags)
    assert result.returncode == 0, result.output
    state = newest_checkpoint(tmp_path / "checkpoints")
    on_history = [bool(np.isin(from_safe(rank["env"])["close"], history).all()) for rank in state["ranks"]]
    assert on_history == [True, all_ranks]


@pytest.mark.e2e
def test_a_worker_usage_error_exits_2_with_its_own_line_only(tmp_path):
    """A spawned worker that rejects its input (exit 2, one line) makes the job exit 2
    without the launcher adding a second line."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys
        from ppo_lstm.config import TrainConfig
        from ppo_lstm.distributed import launch

        def worker(config, w):
            if w.comm.rank == 0:
                print("error: something only a worker can see", file=sys.stderr)
            return 2

        if __name__ == "__main__":
            sys.exit(launch(TrainConfig(distributed=True, num_workers=2, device="cpu"), "cpu", worker))
    """))
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: something only a worker can see"]


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
from ppo_lstm.config import TrainConfig
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
from ppo_lstm.config import TrainConfig
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
