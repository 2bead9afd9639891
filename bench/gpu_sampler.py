"""The rollout's action sampler on a GPU: its draws against ``torch.multinomial``'s, bit for bit,
and what the exponential race saves against the multinomial sampler it replaced.

    python bench/gpu_sampler.py [--device cuda] [--draws 500] [--budget 3] [--rounds 2]

1. **Equality.** ``sample_actions`` on the device path (finiteness checked on the device, as a
   training run on a GPU does) against ``torch.multinomial(softmax(logits), 1)``, with two
   generators seeded alike, ``--draws`` draws at 8, 512 and 4096 envs: every action must be
   equal and the generators must end in the same state.
2. **One call.** Microseconds per call of each sampler, the device -> host copy included
   (it synchronizes, so the time is the GPU's too), alternated in rounds (the best round
   counts), and CUDA kernels per call from ``torch.profiler``.
3. **Training.** env-steps/s of the training loop (``bench/gpu_check.py``'s iterations: 16
   steps per env, 4 epochs x 4 minibatches) with each sampler, alternated in ``--rounds``.

Prints the tables and one JSON line. Without CUDA it runs on the CPU (a rehearsal: the
device path is the same code, the timings mean little).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ppo_lstm.algo.rollout as rollout_module  # noqa: E402
from bench.gpucheck import inprocess  # noqa: E402
from bench.gpucheck.plan import Plan  # noqa: E402
from ppo_lstm.algo.rollout import sample_actions  # noqa: E402
from ppo_lstm.errors import TrainingError  # noqa: E402

SIZES = (8, 512, 4096)
ACTIONS = 3


def multinomial_sampler(logits: torch.Tensor, generator: torch.Generator, check_on_device: bool,
                        update: int) -> tuple[torch.Tensor, np.ndarray]:
    """The device path as it was: ``torch.multinomial`` on the (finite-guarded) softmax."""
    finite = torch.isfinite(logits).all()
    safe = torch.where(finite, logits, torch.zeros_like(logits))
    actions = torch.multinomial(safe.softmax(-1), 1, generator=generator).squeeze(-1)
    host = torch.cat([actions, finite.long().view(1)]).cpu().numpy()
    if not host[-1]:
        raise TrainingError(f"the policy gave non-finite outputs after update {update}")
    return actions, host[:-1]


SAMPLERS: dict[str, Callable[..., tuple[torch.Tensor, np.ndarray]]] = {
    "race": sample_actions, "multinomial": multinomial_sampler}


def equality(device: str, envs: int, draws: int) -> dict[str, Any]:
    """Actions of the device path and of ``torch.multinomial`` over ``draws`` draws at ``envs`` envs."""
    source = torch.Generator(device).manual_seed(envs)
    ours, theirs = torch.Generator(device).manual_seed(7), torch.Generator(device).manual_seed(7)
    differing = 0
    for i in range(draws):
        logits = torch.randn(envs, ACTIONS, generator=source, device=device) * (1 + i % 7)
        drawn, host = sample_actions(logits, ours, True, 0)
        expected = torch.multinomial(logits.softmax(-1), 1, generator=theirs)[:, 0]
        differing += int((drawn != expected).sum()) + int(not np.array_equal(host, expected.cpu().numpy()))
    return {"envs": envs, "draws": draws, "differing": differing,
            "generator_states_equal": bool(torch.equal(ours.get_state(), theirs.get_state()))}


def per_call(device: str, envs: int, calls: int = 2000, rounds: int = 5) -> dict[str, Any]:
    """Microseconds per call of each sampler (best of ``rounds`` alternated rounds) and CUDA
    kernels per call."""
    logits = torch.randn(envs, ACTIONS, device=device)
    generator = torch.Generator(device).manual_seed(0)
    best = {name: float("inf") for name in SAMPLERS}
    for name, fn in SAMPLERS.items():  # warm-up
        for _ in range(50):
            fn(logits, generator, True, 0)
    for _ in range(rounds):
        for name, fn in SAMPLERS.items():
            tic = time.perf_counter()
            for _ in range(calls):
                fn(logits, generator, True, 0)
            best[name] = min(best[name], (time.perf_counter() - tic) / calls * 1e6)
    out: dict[str, Any] = {"envs": envs, **{f"{name}_us": round(us, 2) for name, us in best.items()}}
    if device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        for name, fn in SAMPLERS.items():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(100):
                    fn(logits, generator, True, 0)
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            out[f"{name}_kernels"] = round(len(kernels) / 100, 1)
    return out


def training(device: str, envs: int, rounds: int, budget: float) -> dict[str, Any]:
    """env-steps/s of the training loop with each sampler in the rollout, ``rounds`` alternated
    rounds (the median counts)."""
    plan = replace(Plan(device=device), budget=budget)
    seen: dict[str, list[float]] = {name: [] for name in SAMPLERS}
    for _ in range(rounds):
        for name, fn in SAMPLERS.items():
            rollout_module.sample_actions = fn
            try:
                seen[name].append(inprocess.throughput(plan, device, envs)["env_steps_per_s"])
            finally:
                rollout_module.sample_actions = sample_actions
    medians = {name: float(np.median(v)) for name, v in seen.items()}
    return {"envs": envs, **{f"{name}_env_steps_per_s": round(m, 1) for name, m in medians.items()},
            "ratio": round(medians["race"] / medians["multinomial"], 3), "rounds": seen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of timing per training point")
    parser.add_argument("--rounds", type=int, default=2, help="alternated rounds per training point")
    parser.add_argument("--training-envs", type=int, nargs="+", default=[8, 64, 512])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.device == "cuda":
        from ppo_lstm.distributed.cuda import configure_numerics

        configure_numerics(True)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU (1 thread, a rehearsal)"
    equal = [equality(args.device, n, args.draws) for n in SIZES]
    calls = [per_call(args.device, n) for n in SIZES]
    trains = [training(args.device, n, args.rounds, args.budget) for n in args.training_envs]
    print(f"# The rollout's sampler on {name}, torch {torch.__version__}\n")
    print("| envs | draws | actions differing from torch.multinomial | generator states equal |\n|---:|---:|---:|---|")
    for row in equal:
        print(f"| {row['envs']} | {row['draws']} | {row['differing']} | {row['generator_states_equal']} |")
    print("\n| envs | race us/call | multinomial us/call | race kernels | multinomial kernels |\n|---:|---:|---:|---:|---:|")
    for row in calls:
        print(f"| {row['envs']} | {row['race_us']} | {row['multinomial_us']} | {row.get('race_kernels', '-')} "
              f"| {row.get('multinomial_kernels', '-')} |")
    print("\n| envs | race env-steps/s | multinomial env-steps/s | race / multinomial |\n|---:|---:|---:|---:|")
    for row in trains:
        print(f"| {row['envs']} | {row['race_env_steps_per_s']:,.0f} | {row['multinomial_env_steps_per_s']:,.0f} "
              f"| {row['ratio']:.3f} |")
    ok = all(r["differing"] == 0 and r["generator_states_equal"] for r in equal)
    print(f"\nDraws equal to torch.multinomial's: {ok}\n")
    print(json.dumps({"bench": "gpu_sampler", "device": name, "torch": torch.__version__, "equal": ok,
                      "equality": equal, "per_call": calls, "training": trains}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
