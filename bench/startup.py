"""What a training process spends before and around its work: torch's import, ``torch._dynamo``'s,
and a tiny run with the trainer's optimizer (``EagerAdam``) against ``torch.optim.Adam``.

Each case runs in a fresh process, the cases interleaved over ``--repeats`` rounds; the table
gives the median wall seconds and CPU seconds (user + system) of each, and the tiny runs say
whether they imported ``torch._dynamo``:

* ``import torch``;
* ``import torch, torch._dynamo``: what torch's ``torch.compile`` guards on an optimizer's
  methods import on their first call;
* a tiny run (``--episodes 8 --num-envs 2``: 4 updates of 32 transitions, a hold-out
  backtest, checkpoints) through ``ppo_lstm.cli.main``, as the trainer builds it (``EagerAdam``);
* the same run with ``torch.optim.Adam`` put in its place (this bench's stand-in for the
  optimizer the trainer used before ``EagerAdam``).

    python bench/startup.py [--repeats 5]

Prints a table and one JSON line. The machine is shared: compare the rows of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TINY_RUN = """
import sys, torch
import ppo_lstm.train.build as build
if {torch_adam}:
    build.EagerAdam = torch.optim.Adam
from ppo_lstm.cli import main
code = main(["--episodes", "8", "--num-envs", "2", "--no-progress"])
print("DYNAMO", "torch._dynamo" in sys.modules)
sys.exit(code)
"""

CASES: dict[str, str] = {
    "import torch": "import torch",
    "import torch, torch._dynamo": "import torch, torch._dynamo",
    "tiny run, EagerAdam (the trainer)": TINY_RUN.format(torch_adam=False),
    "tiny run, torch.optim.Adam": TINY_RUN.format(torch_adam=True),
}


def timed(code: str) -> dict[str, Any]:
    """Wall and CPU seconds of ``python -c code`` in a fresh temp dir; whether it imported torch._dynamo."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"bench/startup.py: a case failed (exit {result.returncode}): {result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    dynamo = next((line.split()[1] == "True" for line in result.stdout.splitlines() if line.startswith("DYNAMO")),
                  None)
    return {"wall_s": wall, "cpu_s": cpu, "dynamo": dynamo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds of every case (default 5)")
    args = parser.parse_args()
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in CASES}
    for _ in range(args.repeats):
        for name, code in CASES.items():
            samples[name].append(timed(code))
    rows = {name: {"wall_s": statistics.median(s["wall_s"] for s in runs),
                   "cpu_s": statistics.median(s["cpu_s"] for s in runs),
                   "imports_dynamo": runs[0]["dynamo"]} for name, runs in samples.items()}
    print(f"median of {args.repeats} fresh processes per case, interleaved; one torch thread")
    print(f"{'case':<36}{'wall s':>8}{'cpu s':>8}  torch._dynamo imported")
    for name, row in rows.items():
        imported = "-" if row["imports_dynamo"] is None else ("yes" if row["imports_dynamo"] else "no")
        print(f"{name:<36}{row['wall_s']:>8.2f}{row['cpu_s']:>8.2f}  {imported}")
    eager, adam = rows["tiny run, EagerAdam (the trainer)"], rows["tiny run, torch.optim.Adam"]
    dynamo_cpu = rows["import torch, torch._dynamo"]["cpu_s"] - rows["import torch"]["cpu_s"]
    print(f"torch._dynamo's import: {dynamo_cpu:.2f} s of CPU; the tiny run with EagerAdam takes "
          f"{eager['wall_s'] / adam['wall_s']:.2f}x the wall time of the same run with torch.optim.Adam")
    print(json.dumps({"bench": "startup", "repeats": args.repeats, "torch": _torch_version(), "rows": rows,
                      "dynamo_import_cpu_s": dynamo_cpu, "tiny_run_wall_ratio": eager["wall_s"] / adam["wall_s"]}))


def _torch_version() -> str:
    import torch

    return torch.__version__


if __name__ == "__main__":
    main()
