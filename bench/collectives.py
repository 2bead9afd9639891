"""What travels between W gloo workers in one training iteration, and what each collective costs.

Starts W real CPU workers (the trainer's launcher and ``TorchComm``, gloo over loopback) with a
default-sized agent and rollout, and times each collective of an iteration, as the trainer
calls it:

* the exchange: one ``all_gather`` of every rank's rollout rows and agreement row
  (``ppo_lstm.train.agreement.exchange``), once per iteration;
* the gradient step's sum: one ``all_reduce`` of the flat gradient and the step's
  statistics (``FlatGradients.flat``, ``comm.sum_``), once per gradient step, epochs x
  minibatches times per iteration;
* the output check's verdict: one ``all_reduce`` of one float, once per iteration.

Each is called back to back ``--calls`` times after a warm-up; the table gives the bytes
each rank sends in, the median and 90th-percentile seconds per call on rank 0, and the
collectives' total per iteration at the default 4 epochs x 4 minibatches. Prints a table
and one JSON line.

    python bench/collectives.py [--workers 2] [--num-envs 64] [--calls 300]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ppo_lstm.algo.ppo import STEP_STATS, FlatGradients  # noqa: E402
from ppo_lstm.algo.rollout import RolloutCollector  # noqa: E402
from ppo_lstm.batch_rule import minibatches, steps_per_env  # noqa: E402
from ppo_lstm.config import TrainConfig  # noqa: E402
from ppo_lstm.distributed import launch  # noqa: E402
from ppo_lstm.train.agreement import exchange  # noqa: E402
from ppo_lstm.train.build import build_agent  # noqa: E402


def timed(call, calls: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``call``, after 20 untimed ones."""
    for _ in range(20):
        call()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds


def worker(config: TrainConfig, w) -> int:
    comm, calls = w.comm, int(os.environ["BENCH_CALLS"])
    steps = steps_per_env(config, comm.world_size)
    torch.manual_seed(config.seed)
    agent = build_agent(config)
    collector = RolloutCollector(config, agent, comm.rank, steps, torch.device("cpu"), None)
    collector.collect(0)
    local = collector.finish()  # [T, N]
    records = np.zeros((0, 6))
    capacity = steps * config.num_envs
    gradients = FlatGradients(list(agent.parameters()), extra=STEP_STATS)
    flag = torch.zeros(1)
    rows = local.packed()
    cases = {
        "exchange (all_gather)": (lambda: exchange(comm, local, records, False, 0, 1.0, capacity),
                                  rows.numel() * 4 + (7 + capacity * 6) * 8, 1),
        "gradient step (all_reduce)": (lambda: comm.sum_(gradients.flat), gradients.flat.numel() * 4,
                                       config.epochs * minibatches(config, comm.world_size)),
        "output check (all_reduce)": (lambda: comm.sum(flag), 4, 1),
    }
    out = {}
    for name, (call, size, per_iteration) in cases.items():
        seconds = timed(call, calls)
        out[name] = {"bytes_per_rank": size, "per_iteration": per_iteration,
                     "median_ms": 1e3 * statistics.median(seconds),
                     "p90_ms": 1e3 * float(np.percentile(seconds, 90))}
    if comm.rank == 0:
        print(json.dumps(out), file=open(os.environ["BENCH_OUT"], "w"))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    out_file = Path(f"/tmp/bench_collectives_{os.getpid()}.json")
    os.environ.update(BENCH_CALLS=str(args.calls), BENCH_OUT=str(out_file), OMP_NUM_THREADS="1")
    config = TrainConfig(distributed=True, num_workers=args.workers, device="cpu", num_envs=args.num_envs)
    code = launch(config, "cpu", worker)
    if code != 0:
        raise SystemExit(code)
    result = json.loads(out_file.read_text())
    out_file.unlink()
    per_iteration = sum(r["median_ms"] * r["per_iteration"] for r in result.values())
    print(f"Collectives of one iteration: {args.workers} gloo workers x {args.num_envs} envs, default flags, "
          f"{args.calls} calls each, {os.cpu_count()} CPUs")
    print("| collective | bytes per rank | per iteration | median ms | p90 ms | ms per iteration |")
    print("|---|---|---|---|---|---|")
    for name, r in result.items():
        print(f"| {name} | {r['bytes_per_rank']:,} | {r['per_iteration']} | {r['median_ms']:.3f} | "
              f"{r['p90_ms']:.3f} | {r['median_ms'] * r['per_iteration']:.1f} |")
    print(f"| all | | | | | {per_iteration:.1f} |")
    print(json.dumps({"bench": "collectives", "workers": args.workers, "num_envs": args.num_envs,
                      "calls": args.calls, "cpus": os.cpu_count(), "collectives": result,
                      "ms_per_iteration": round(per_iteration, 2)}))


if __name__ == "__main__":
    main()
