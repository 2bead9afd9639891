"""Scaling: the same --episodes on 1 worker, on 1 worker with --threads 2, and on W gloo workers.

Runs the real command line (``train_ppo_lstm.py``, and ``--distributed --device cpu
--num-workers W``), one run at a time, the configurations interleaved, ``--repeats`` times
each. For each it reports the wall time and the speed-up over one worker; the training
loop's env-steps/s (the run's ``Training finished ... S env steps in X s`` line, which
leaves start-up and shut-down out) and its speed-up; the seconds from the command to the
first finished update (start-up: imports, starting the workers, rendezvous, env and model
set-up); every rank's share of its loop time per phase (rollout, gather, update, logging,
hold-out, checkpoints, sync check; from the run's ``Time by phase`` lines); the peak RSS
of each worker; and what it learned: the mean episode reward of the last 10 % of episodes
(from ``metrics.csv``) and the final simulated hold-out return, so that a faster run that
learns worse shows. Prints a table and one JSON line. ``--flags`` adds training flags to
every run (``--flags "--spin-ms 0"``: a waiting worker sleeps at once).

    python bench/scaling.py [--episodes 400] [--repeats 2] [--workers 1,2] [--threads-row] [--flags "..."]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "train_ppo_lstm.py")
PHASE = re.compile(r"Time by phase \(rank (\d+)\): (.*)$", re.M)
PEAK = re.compile(r"Peak memory per worker: (.*) MiB$", re.M)
HOLDOUT = re.compile(r"^Holdout @ episode \d+ - Return: ([+-]?\d+\.\d+)%", re.M)
LOOP = re.compile(r"^Training finished: .* (\d+) env steps in (\d+\.\d+)s$", re.M)


def run_once(workers: int, episodes: int, market: str, seed: int, flags: list[str]) -> dict[str, Any]:
    """One training command to the end; its timings, memory and learning figures."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        command = [sys.executable, TRAIN, "--episodes", str(episodes), "--market", market, "--seed", str(seed),
                   "--device", "cpu", "--no-progress", "--checkpoint-dir", str(run / "ck"),
                   "--log-file", str(run / "training.log"), *flags]
        if workers > 1:
            command += ["--distributed", "--num-workers", str(workers)]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        metrics = run / "ck" / "metrics.csv"
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        first_update = None
        while process.poll() is None:
            if first_update is None and _rows(metrics) >= 1:
                first_update = time.perf_counter() - start
            time.sleep(0.02)
        wall = time.perf_counter() - start
        output = process.stdout.read() if process.stdout else ""
        if process.returncode != 0:
            raise SystemExit(f"run with {workers} worker(s) failed ({process.returncode}):\n{output[-2000:]}")
        if first_update is None:
            first_update = wall
        rows = _read(metrics)
        phases = {int(rank): dict((name, float(share.rstrip("%"))) for name, share in
                                  (part.rsplit(" ", 1) for part in shares.split(", ")))
                  for rank, shares in PHASE.findall(output)}
        peaks = [float(x) for x in PEAK.search(output).group(1).split(" / ")]
        holdouts = HOLDOUT.findall(output)
        steps, loop = LOOP.search(output).groups()
        return {"workers": workers, "wall_s": wall, "loop_s": float(loop), "env_steps_per_s": int(steps) / float(loop),
                "startup_s": first_update, "updates": len(rows),
                "phases_pct": phases, "peak_rss_mib": peaks, "last10_reward": _last_reward(rows, episodes),
                "holdout_return_pct": float(holdouts[-1]) if holdouts else None}


def _rows(path: Path) -> int:
    try:
        with open(path) as handle:
            return max(0, sum(1 for _ in handle) - 1)
    except OSError:
        return 0


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _last_reward(rows: list[dict[str, str]], episodes: int) -> float:
    """Mean episode reward over the updates that finished the last 10 % of episodes."""
    cut = 0.9 * episodes
    total = count = 0.0
    for row in rows:
        n = float(row["episodes_finished"] or 0)
        if float(row["episodes"]) > cut and n:
            total += float(row["mean_reward"]) * n
            count += n
    return total / max(count, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each configuration (interleaved)")
    parser.add_argument("--workers", default="1,2", help="worker counts, comma-separated (1 is always run)")
    parser.add_argument("--threads-row", action="store_true", help="also run 1 worker with --threads 2")
    parser.add_argument("--market", default="regime")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--flags", default="", help="training flags added to every run, in one string")
    args = parser.parse_args()

    counts = sorted({1, *(int(w) for w in args.workers.split(","))})
    configs = [(f"{w} worker{'s' if w > 1 else ''}", w, []) for w in counts]
    if args.threads_row:
        configs.insert(1, ("1 worker, --threads 2", 1, ["--threads", "2"]))
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in configs}
    for _ in range(args.repeats):
        for name, workers, extra in configs:
            results[name].append(run_once(workers, args.episodes, args.market, args.seed,
                                          [*shlex.split(args.flags), *extra]))

    summary: dict[str, dict[str, Any]] = {}
    for name, workers, _ in configs:
        runs = results[name]
        phases = {rank: {p: statistics.median(r["phases_pct"][rank].get(p, 0.0) for r in runs)
                         for p in runs[0]["phases_pct"][rank]} for rank in runs[0]["phases_pct"]}
        summary[name] = {
            "workers": workers,
            "wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
            "loop_s": round(statistics.median(r["loop_s"] for r in runs), 2),
            "env_steps_per_s": round(statistics.median(r["env_steps_per_s"] for r in runs)),
            "startup_s": round(statistics.median(r["startup_s"] for r in runs), 2),
            "updates": runs[0]["updates"], "phases_pct": phases,
            "peak_rss_mib": [round(max(r["peak_rss_mib"][i] for r in runs)) for i in range(workers)],
            "last10_reward": round(statistics.median(r["last10_reward"] for r in runs), 3),
            "holdout_return_pct": runs[0]["holdout_return_pct"],
            "walls_s": [round(r["wall_s"], 2) for r in runs],
            "env_steps_per_s_runs": [round(r["env_steps_per_s"]) for r in runs],
        }
    base = summary[configs[0][0]]
    for s in summary.values():
        s["speedup"] = round(base["wall_s"] / s["wall_s"], 3)
        s["loop_speedup"] = round(s["env_steps_per_s"] / base["env_steps_per_s"], 3)

    phase_names = list(dict.fromkeys(p for s in summary.values() for ph in s["phases_pct"].values() for p in ph))
    header = (["configuration", "wall s (median)", "speed-up", "loop env-steps/s", "loop speed-up", "start-up s",
               "updates", "rank"] + [f"{p} %" for p in phase_names]
              + ["peak RSS MiB/worker", "reward, last 10 %", "hold-out return %"])
    print(f"Scaling: --episodes {args.episodes} --market {args.market} --seed {args.seed}, "
          f"{'flags ' + args.flags if args.flags else 'default flags'}, "
          f"{args.repeats} run(s) each, interleaved, {os.cpu_count()} CPUs")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, s in summary.items():
        for rank, phases in s["phases_pct"].items():
            cells = ([name, f"{s['wall_s']:.1f}", f"{s['speedup']:.2f}x", f"{s['env_steps_per_s']:,}",
                      f"{s['loop_speedup']:.2f}x", f"{s['startup_s']:.1f}", str(s["updates"])] if rank == 0
                     else [""] * 7)
            cells += [str(rank)] + [f"{phases.get(p, 0.0):.0f}" for p in phase_names]
            cells += ([" / ".join(map(str, s["peak_rss_mib"])), f"{s['last10_reward']:.2f}",
                       "-" if s["holdout_return_pct"] is None else f"{s['holdout_return_pct']:+.2f}"] if rank == 0
                      else [""] * 3)
            print("| " + " | ".join(cells) + " |")
    print(json.dumps({"bench": "scaling", "episodes": args.episodes, "market": args.market, "seed": args.seed,
                      "flags": args.flags, "repeats": args.repeats, "cpus": os.cpu_count(), "runs": summary}))


if __name__ == "__main__":
    main()
