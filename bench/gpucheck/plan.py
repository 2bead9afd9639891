"""What the acceptance command runs, and on which device; the machine it runs on; child processes."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

ROOT = Path(__file__).resolve().parents[2]

# The training runs' tiny model and env (the device is added per run).
TINY = ["--num-envs", "2", "--update-interval", "32", "--episode-length", "16", "--window", "8",
        "--hidden-size", "16", "--lstm-size", "16", "--minibatches", "2", "--market", "regime", "--seed", "3",
        "--no-progress"]
STEPS_PER_ENV = 16


@dataclass(frozen=True)
class Plan:
    """The phases' sizes and the device they run on: ``cuda``, or ``cpu`` standing in for it
    (the rehearsal: the same code, every CUDA device replaced by the CPU and NCCL by gloo)."""

    device: str = "cuda"
    sizes: tuple[int, ...] = (8, 64, 512, 4096)  # --num-envs of the throughput table
    variant_envs: int = 512  # --num-envs of the bf16 / --no-deterministic comparison
    budget: float = 6.0  # seconds of timing per throughput point
    min_iterations: int = 3  # timed iterations per throughput point, at least
    dist_timeout: float = 20.0  # --dist-timeout of the stalled-peer run, seconds
    stall_margin: float = 30.0  # the stalled job must end within dist_timeout + this
    stall_wait: float = 80.0  # seconds the check waits for the stalled job before it kills it
    settle: float = 3.0  # seconds of training before the peer is stopped
    skip_tests: bool = False
    bf16: bool = True  # run the bf16 phases (bfloat16 hardware, or the CPU's autocast)

    @property
    def rehearsal(self) -> bool:
        return self.device == "cpu"

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def ranks(self) -> int:
        """How many ranks a job can have here: one per GPU; 2 CPU workers in the rehearsal."""
        return torch.cuda.device_count() if self.device == "cuda" else 2

    @property
    def workers_flag(self) -> str:
        return "--num-gpus" if self.device == "cuda" else "--num-workers"


REHEARSAL = Plan(device="cpu", sizes=(4,), variant_envs=4, budget=0.0, min_iterations=1, dist_timeout=3.0,
                 stall_wait=60.0, settle=1.0)

# What the CPU cannot show in the rehearsal, said in its report.
STAND_INS = [
    "tests: tests/distributed/test_cuda.py needs CUDA, so every test skips (pytest and the file's imports run)",
    "throughput: the CPU stands in for the GPU column, at tiny sizes",
    "numerics: configure_numerics runs in CUDA workers only, so the CPU shows torch's defaults",
    "bf16: the CPU's autocast, not cuDNN's",
    "syncs: not counted (torch's sync debug mode needs CUDA); the rollout and update they cover ran",
    "distributed runs and stalled peer: gloo between CPU workers instead of NCCL between GPUs",
    "resume: the CPU on both sides, so no device-change warning is expected",
]


def child_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The environment of a child process: the repository first on ``PYTHONPATH``, the
    user's entries (e.g. a ``pip install --target`` directory) kept after it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **(extra or {})}


def run(args: list[str], cwd: Path, timeout: float) -> tuple[int, str, float]:
    """Run a command; (exit code, stdout+stderr, seconds)."""
    started = time.monotonic()
    try:
        out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=child_env())
        return out.returncode, out.stdout + out.stderr, time.monotonic() - started
    except subprocess.TimeoutExpired as err:
        text = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        return 124, text, time.monotonic() - started


def train(cwd: Path, *args: str, timeout: float = 240.0) -> tuple[int, str, float]:
    """The training CLI in ``cwd`` (created); (exit code, output, seconds)."""
    cwd.mkdir(parents=True, exist_ok=True)
    return run([sys.executable, str(ROOT / "train_ppo_lstm.py"), *args], cwd, timeout)


def nccl_version() -> str:
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):  # a torch built without NCCL (the CPU wheel)
        return "n/a (this torch has no NCCL)"
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def environment(plan: Plan) -> dict[str, Any]:
    """The GPU, driver, torch, CUDA, cuDNN and NCCL this check ran on (in the rehearsal: the CPU)."""
    common = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "nccl": nccl_version()}
    if plan.rehearsal:
        cpu = platform.processor() or platform.machine()
        return {"gpu": f"none (CPU rehearsal on {cpu})", "gpus": 0, "driver": "n/a", **common,
                "bf16_hardware": "n/a (CPU autocast)"}
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        driver = "unknown (no nvidia-smi)"
    return {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(), "driver": driver, **common,
            "bf16_hardware": torch.cuda.is_bf16_supported(including_emulation=False)}
