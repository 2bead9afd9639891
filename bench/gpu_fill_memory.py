"""What deterministic mode's NaN fill of fresh memory costs the training loop on a GPU:
env-steps/s with ``torch.utils.deterministic.fill_uninitialized_memory`` off (what
``configure_numerics`` sets) and on (torch's default), alternated in rounds in one process.

    python bench/gpu_fill_memory.py [--envs 8 512] [--rounds 3] [--budget 4]

The iterations are ``bench/gpu_check.py``'s (16 steps per env, 4 epochs x 4 minibatches, the
default model, ``--deterministic``). Prints a table (the median of the rounds, and every
round) and one JSON line. Without CUDA it runs on the CPU (a rehearsal).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpucheck import inprocess  # noqa: E402
from bench.gpucheck.plan import Plan  # noqa: E402
from ppo_lstm.distributed import cuda as cuda_setup  # noqa: E402


def point(device: str, envs: int, fill: bool, plan: Plan) -> float:
    """env-steps/s at ``envs`` with the fill ``fill`` (set after the trainer's numerics)."""
    original = cuda_setup.configure_numerics

    def configured(deterministic: bool) -> None:
        original(deterministic)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]

    cuda_setup.configure_numerics = configured
    try:
        if device != "cuda":  # the rehearsal: make_trainer configures CUDA workers only
            configured(True)
        return inprocess.throughput(plan, device, envs)["env_steps_per_s"]
    finally:
        cuda_setup.configure_numerics = original


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 512])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing per point")
    args = parser.parse_args()
    plan = replace(Plan(device=args.device), budget=args.budget)
    rows: list[dict[str, Any]] = []
    for envs in args.envs:
        seen: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.rounds):
            for name in ("off", "on"):
                seen[name].append(point(args.device, envs, name == "on", plan))
        off, on = float(np.median(seen["off"])), float(np.median(seen["on"]))
        rows.append({"envs": envs, "fill_off": off, "fill_on": on, "ratio": round(off / on, 3), "rounds": seen})
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (1 thread, a rehearsal)"
    print(f"# NaN fill of fresh memory under --deterministic, {name}, torch {torch.__version__}\n")
    print("| envs | fill off env-steps/s | fill on env-steps/s | off / on | rounds (off; on) |\n|---:|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['envs']} | {row['fill_off']:,.0f} | {row['fill_on']:,.0f} | {row['ratio']:.3f} "
              f"| {', '.join(f'{v:,.0f}' for v in row['rounds']['off'])}; "
              f"{', '.join(f'{v:,.0f}' for v in row['rounds']['on'])} |")
    print()
    print(json.dumps({"bench": "gpu_fill_memory", "device": name, "torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
