"""Wall time of a walk-forward's jobs run two at a time against one after another.

One driftless daily random walk (1500 bars), 5 folds x 3 seeds = 15 small training jobs,
run twice with the same settings:

    walkforward-ppo-lstm --data walk.csv --folds 5 --test-size 120 --seeds 3 --jobs 1 ...
    walkforward-ppo-lstm --data walk.csv --folds 5 --test-size 120 --seeds 3 --jobs 2 ...

each job with the default torch threads (1, as the trainer's, unless OMP_NUM_THREADS is set;
the table prints what the walk-forward reported).

Each run starts in an empty output dir. Also checks that both runs give the same report
figures. Prints a table and ONE JSON line. On a shared machine the times are noisy;
quote the ratio.

    python bench/walkforward_walltime.py --out /tmp/wf_wall
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.walkforward_false_edges import write_walk  # noqa: E402

TRAINING = ["--episodes", "32", "--episode-length", "32", "--window", "16", "--num-envs", "4", "--update-interval",
            "128", "--minibatches", "2", "--hidden-size", "32", "--lstm-size", "32", "--checkpoint-interval", "8",
            "--device", "cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/wf_wall")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = write_walk(out / "walk.csv", 1500, 100)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    times, summaries, threads = {}, {}, {}
    for jobs in (1, 2):
        target = out / f"jobs{jobs}"
        shutil.rmtree(target, ignore_errors=True)
        command = [sys.executable, "-m", "ppo_lstm.walkforward", "--data", str(data), "--out", str(target),
                   "--folds", "5", "--test-size", "120", "--seeds", "3", "--jobs", str(jobs), "--no-progress",
                   *TRAINING]
        started = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        times[jobs] = time.monotonic() - started
        if done.returncode != 0:
            sys.exit(f"--jobs {jobs}: walk-forward failed ({done.returncode}): {done.stderr[-2000:]}")
        summaries[jobs] = json.loads((target / "summary.json").read_text())
        found = re.search(r"(\d+) torch thread\(s\) each", done.stdout)
        threads[jobs] = int(found.group(1)) if found else None
    same = summaries[1]["figures"] == summaries[2]["figures"]
    print("# python bench/walkforward_walltime.py " + " ".join(sys.argv[1:]))
    print(f"# each: walkforward-ppo-lstm --folds 5 --test-size 120 --seeds 3 --jobs J {' '.join(TRAINING)}")
    print(f"{'--jobs':>6s} {'threads/job':>11s} {'wall s':>8s} {'speed-up':>9s}")
    for jobs in (1, 2):
        print(f"{jobs:6d} {threads[jobs]!s:>11s} {times[jobs]:8.1f} {times[1] / times[jobs]:9.2f}")
    print(f"same report figures: {same}  (15 jobs; cores: {len(os.sched_getaffinity(0))})")
    print(json.dumps({"bench": "walkforward_walltime", "jobs": 15, "wall_s": {"1": times[1], "2": times[2]},
                      "threads_per_job": {"1": threads[1], "2": threads[2]},
                      "speedup": times[1] / times[2], "same_figures": same,
                      "cores": len(os.sched_getaffinity(0))}))


if __name__ == "__main__":
    main()
