"""Where a training iteration's time goes on one device: torch.profiler over a few
iterations (rollout + update) of the default model, at several ``--num-envs``.

    python bench/gpu_profile.py [--device cuda] [--envs 8 4096] [--iterations 3] [--top 12]

Prints, per ``--num-envs``: env-steps/s without the profiler, the ops with the most self
time on the host (and on the GPU), and kernel launches per iteration; then one JSON line.
The iterations are those of ``bench/gpu_check.py`` (16 steps per env, 4 epochs x 4 minibatches).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpucheck.inprocess import iteration, make_trainer  # noqa: E402
from bench.gpucheck.plan import STEPS_PER_ENV  # noqa: E402


def top_ops(prof: Any, key: str, n: int, iterations: int) -> list[dict[str, Any]]:
    """The ``n`` ops with the most self time under ``key`` (``self_cpu_time_total`` or
    ``self_device_time_total``), per iteration, in microseconds."""
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    return [{"op": e.key[:60], "us_per_iteration": round(getattr(e, key) / iterations, 1),
             "calls_per_iteration": round(e.count / iterations, 1)} for e in events[:n]]


def profile_point(device: str, num_envs: int, iterations: int, top: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(device, num_envs, tmp)
        try:
            iteration(trainer)  # warm-up
            tic = time.perf_counter()
            split = [iteration(trainer) for _ in range(iterations)]
            seconds = time.perf_counter() - tic
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
            with profile(activities=activities) as prof:
                for _ in range(iterations):
                    iteration(trainer)
        finally:
            trainer.log.close()
    rollout = sum(r for r, _ in split)
    out: dict[str, Any] = {
        "num_envs": num_envs, "env_steps_per_s": round(iterations * num_envs * STEPS_PER_ENV / seconds, 1),
        "rollout_ms": round(1000 * rollout / iterations, 2),
        "update_ms": round(1000 * (seconds - rollout) / iterations, 2),
        "host_top": top_ops(prof, "self_cpu_time_total", top, iterations)}
    if device == "cuda":
        out["gpu_top"] = top_ops(prof, "self_device_time_total", top, iterations)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        out["kernels_per_iteration"] = round(len(kernels) / iterations, 1)
        busy_us = sum(getattr(e, "device_time_total", 0) for e in kernels)
        out["gpu_busy_ms_per_iteration"] = round(busy_us / 1000 / iterations, 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 4096])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    points = [profile_point(args.device, n, args.iterations, args.top) for n in args.envs]
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (1 thread)"
    print(f"# Profile of one training iteration on {name}, torch {torch.__version__}")
    for point in points:
        print(f"\n## --num-envs {point['num_envs']}: {point['env_steps_per_s']:,.0f} env-steps/s; "
              f"rollout {point['rollout_ms']} ms, update {point['update_ms']} ms per iteration"
              + (f"; {point['kernels_per_iteration']:,.0f} kernels, GPU busy {point['gpu_busy_ms_per_iteration']} ms"
                 if "kernels_per_iteration" in point else ""))
        for key, title in (("host_top", "host self time"), ("gpu_top", "GPU self time")):
            if key not in point:
                continue
            print(f"\n| op ({title}) | us per iteration | calls per iteration |\n|---|---:|---:|")
            for row in point[key]:
                print(f"| {row['op']} | {row['us_per_iteration']:,.0f} | {row['calls_per_iteration']:,.0f} |")
    print()
    print(json.dumps({"bench": "gpu_profile", "device": name, "torch": torch.__version__, "points": points}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
