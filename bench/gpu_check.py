"""GPU acceptance: one command that checks a CUDA machine end to end, in under 10 minutes.

    python bench/gpu_check.py [--out bench/results/gpu_check_<gpu>.md] [--skip-tests]
    python bench/gpu_check.py --rehearse-on-cpu [--out FILE]   # every phase, the CPU standing in

It runs, and reports in markdown tables plus one JSON line (also written to ``--out``):

1. ``tests/distributed/test_cuda.py`` (pytest): NCCL collectives, fused Adam state, per-step syncs,
   the IEEE replay of log-probs, the device-side finite check, bf16 dtypes, CPU-only
   checkpoints, resume across devices, a 1-GPU run (and a 2-GPU NCCL run with 2 GPUs);
2. env-steps/s of the training loop (rollout + update, no hold-out or checkpoints) on one
   GPU and on one CPU core, at ``--num-envs`` 8, 64, 512 and 4096 (16 steps per env and
   update, 4 epochs x 4 minibatches, the default model);
3. ``--autocast bf16`` against float32, and ``--deterministic`` against ``--no-deterministic``,
   at 512 envs on the GPU: speed, and the dtypes the update's LSTM runs in;
4. synchronizing CUDA calls per rollout step and per update (``torch.cuda.set_sync_debug_mode``);
5. a 1-rank NCCL run through ``--distributed`` (and a 2-rank one where 2 GPUs are visible);
6. resume GPU -> CPU and CPU -> GPU: each must finish with one warning line;
7. a stalled peer under NCCL (SIGSTOP on rank 1, 2 GPUs): the job must end within
   ``--dist-timeout`` plus a margin, with one clear line.

Each phase is guarded: an error (out of memory, cuDNN) is recorded in the report as a failed
check and the next phase runs. Exit code 0 when every check passed, else 1. Without CUDA it
exits 2 with one line, unless ``--rehearse-on-cpu``: the same phases and report with the CPU
for every CUDA device and gloo for NCCL, at tiny sizes (seconds; CI runs it). The parts are
in ``bench/gpucheck/``; GPU machines without internet: docs/gpu.md, "Machines without internet".
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpucheck import inprocess, jobs  # noqa: E402
from bench.gpucheck.plan import REHEARSAL, STAND_INS, Plan, environment  # noqa: E402
from bench.gpucheck.report import failures, guarded, render  # noqa: E402


def phases(plan: Plan, work: Path) -> list[tuple[str, Callable[[], Any]]]:
    """Every phase, in order: (its key in the report, what runs it). ``work``: a scratch directory."""
    from ppo_lstm.distributed.cuda import numerics_settings

    def point(device: str, n: int, **kwargs: Any) -> Any:
        return guarded(f"throughput {device} {n}", lambda: inprocess.throughput(plan, device, n, **kwargs))

    return [
        ("tests", lambda: {"skipped": True} if plan.skip_tests else jobs.cuda_tests(plan, work)),
        ("throughput", lambda: {side: {str(n): point(device, n) for n in plan.sizes}
                                for side, device in (("gpu", plan.device), ("cpu", "cpu"))}),
        ("numerics", numerics_settings),
        ("variants", lambda: {
            "float32": point(plan.device, plan.variant_envs),
            "bf16": point(plan.device, plan.variant_envs, autocast="bf16") if plan.bf16 else "no bf16",
            "no_deterministic": point(plan.device, plan.variant_envs, deterministic=False)}),
        ("bf16_dtypes", lambda: inprocess.lstm_dtypes(plan) if plan.bf16 else "no bf16"),
        ("syncs", lambda: inprocess.syncs(plan)),
        ("distributed_runs", lambda: jobs.distributed_runs(plan, work)),
        ("resume", lambda: jobs.resume_across_devices(plan, work)),
        ("stalled_peer", lambda: jobs.stalled_peer(plan, work)),
    ]


def measure(plan: Plan, steps: Optional[list[tuple[str, Callable[[], Any]]]] = None,
            machine: Optional[dict[str, Any]] = None, partial: Optional[Path] = None) -> dict[str, Any]:
    """The report: the ``machine`` (else :func:`environment`), then every phase (``steps``, else
    :func:`phases`), each guarded, and the checks that ``failed``. Each phase's end is said on
    stderr, and, with ``partial``, the report so far is written there as JSON after every phase
    (a machine taken back, or a timeout, still leaves what was measured)."""
    started = time.monotonic()
    report: dict[str, Any] = {"bench": "gpu_check", "rehearsal": plan.rehearsal,
                              **(machine if machine is not None else environment(plan))}
    with tempfile.TemporaryDirectory() as tmp:
        steps = steps if steps is not None else phases(plan, Path(tmp))
        for index, (name, fn) in enumerate(steps, 1):
            tic = time.monotonic()
            report[name] = guarded(name, fn)
            print(f"gpu_check: phase {index}/{len(steps)} {name}: {time.monotonic() - tic:.1f} s", file=sys.stderr,
                  flush=True)
            if partial is not None:
                partial.write_text(json.dumps(report, default=str) + "\n")
    if plan.rehearsal:
        report["stand_ins"] = STAND_INS
    report["seconds"] = round(time.monotonic() - started, 1)
    report["failed"] = failures(report, [name for name, _ in steps])
    return report


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="markdown file to write (default: bench/results/gpu_check_<gpu>.md)")
    parser.add_argument("--skip-tests", action="store_true", help="leave tests/distributed/test_cuda.py out")
    parser.add_argument("--budget", type=float, help="seconds of timing per throughput point (default 6)")
    parser.add_argument("--rehearse-on-cpu", action="store_true",
                        help="run every phase with the CPU standing in for CUDA and gloo for NCCL, at tiny sizes")
    args = parser.parse_args(argv)
    if args.rehearse_on_cpu:
        plan = REHEARSAL
    elif torch.cuda.is_available():
        plan = Plan()
    else:
        print("error: no CUDA device is visible; run bench/gpu_check.py on a machine with an NVIDIA GPU "
              "(or --rehearse-on-cpu for a rehearsal with the CPU standing in)", file=sys.stderr)
        return 2
    plan = replace(plan, skip_tests=args.skip_tests, budget=plan.budget if args.budget is None else args.budget)
    if not plan.rehearsal:
        plan = replace(plan, bf16=torch.cuda.is_bf16_supported(including_emulation=False))
    machine = environment(plan)
    slug = "cpu_rehearsal" if plan.rehearsal else re.sub(r"[^a-z0-9]+", "_", machine["gpu"].lower()).strip("_")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"gpu_check_{slug}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial.json")
    report = measure(plan, machine=machine, partial=partial)
    text = render(report, plan)
    print(text)
    out.write_text(text + "\n")
    partial.unlink(missing_ok=True)
    print(f"written to {out}")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
