"""CUDA and NCCL, end to end: these run wherever a GPU is visible and are skipped elsewhere.

 - NCCL collectives take CPU tensors too (Adam's step counts): TorchComm moves every
   tensor to the worker's GPU and back.
 - With 2 GPUs, a drift between ranks is repaired from rank 0, Adam state included.
 - A short training run on 1 GPU (and on 2 with NCCL, when there are 2).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import TINY, assert_models_equal, episode_lines, load_state, run_cli

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
TINY_CUDA = [a if a != "cpu" else "cuda" for a in TINY]  # TINY with --device cuda

NCCL_SCRIPT = """
import sys
import torch
from ppo_lstm.config import TrainConfig
from ppo_lstm.distributed import launch, parameters_in_sync

def worker(config, w):
    comm = w.comm
    assert w.device.type == "cuda" and comm.device == w.device
    step = torch.tensor(float(comm.rank))  # on the CPU, like Adam's state["step"]
    comm.broadcast_(step, src=0)
    assert step.device.type == "cpu" and float(step) == 0.0
    total = comm.sum(torch.ones(2))
    assert total.device.type == "cpu" and total.tolist() == [float(comm.world_size)] * 2
    rows = comm.gather(torch.full((1, 2), float(comm.rank), device=w.device))
    assert rows.device == w.device and rows[:, 0].tolist() == [float(r) for r in range(comm.world_size)]

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(w.device)
    optimizer = torch.optim.Adam(model.parameters(), foreach=True)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.ones(2, 4, device=w.device)).sum().backward()
        optimizer.step()
    assert optimizer.state[model.weight]["step"].device.type == "cpu"
    if comm.rank == 1:
        with torch.no_grad():
            model.weight[0, 0] += 1.0
        optimizer.state[model.weight]["step"] += 5
    assert parameters_in_sync(comm, model, optimizer) == (comm.world_size == 1)
    assert parameters_in_sync(comm, model, optimizer)
    torch.save({"model": {k: v.cpu() for k, v in model.state_dict().items()},
                "step": float(optimizer.state[model.weight]["step"]),
                "exp_avg": optimizer.state[model.weight]["exp_avg"].cpu()}, f"rank{comm.rank}.pt")
    return 0

if __name__ == "__main__":
    n = int(sys.argv[1])
    sys.exit(launch(TrainConfig(distributed=True, num_workers=n, device="cuda"), "cuda", worker))
"""


@pytest.mark.parametrize("gpus", [1, 2])
def test_nccl_collectives_take_cpu_tensors_and_repair_drift(tmp_path, gpus):
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    (tmp_path / "nccl.py").write_text(NCCL_SCRIPT)
    result = subprocess.run([sys.executable, "nccl.py", str(gpus)], capture_output=True, text=True, timeout=240,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    if gpus == 2:
        rank0, rank1 = load_state(tmp_path / "rank0.pt"), load_state(tmp_path / "rank1.pt")
        assert_models_equal(rank0["model"], rank1["model"])
        assert rank0["step"] == rank1["step"] == 2.0 and torch.equal(rank0["exp_avg"], rank1["exp_avg"])
        assert result.stderr.count("parameters diverged across ranks") == 1


def test_single_gpu_run(cwd):
    result = run_cli(cwd, *TINY_CUDA, "--episodes", "4", "--log-interval", "2", timeout=240)
    assert result.returncode == 0, result.output
    assert "Workers: 1 on cuda, 1 torch thread" in result.stdout
    assert "Training finished: 4 episodes" in result.stdout


def test_two_gpu_nccl_run(cwd):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    result = run_cli(cwd, *TINY_CUDA, "--distributed", "--num-gpus", "2", "--episodes", "8", "--log-interval", "4",
                     "--sync-check-interval", "1", timeout=240)
    assert result.returncode == 0, result.output
    assert "Workers: 2 on cuda (nccl), 1 torch thread each" in result.stdout
    assert "diverged" not in result.output
    lines = episode_lines(cwd / "training.log")
    assert lines and all(line.endswith(" | GPUs: 2") for line in lines)
