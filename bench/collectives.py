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
collectives' total per iteration at the default 4 epochs x 4 minibatches. A last row times
the gradient step's sum where training calls it, inside ``--updates`` real PPO updates on
the combined batch, so it includes the wait for the slower rank's share. Prints a table
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

from ppo_lstm.algo.ppo import STEP_STATS, FlatGradients, PPOSettings, ppo_update  # noqa: E402
from ppo_lstm.algo.rollout import RolloutCollector  # noqa: E402
from ppo_lstm.config.plan import minibatches, steps_per_env
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import launch  # noqa: E402
from ppo_lstm.train.agreement import RankReport, exchange  # noqa: E402
from ppo_lstm.train.build import build_agent, build_optimizer  # noqa: E402
from ppo_lstm.config.plan import learning_rates


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
        "exchange (all_gather)": (lambda: exchange(comm, local, RankReport(records, capacity)),
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
    combined = exchange(comm, local, RankReport(records, capacity))[0]
    out["gradient step, inside an update"] = in_updates(config, comm, combined)
    if comm.rank == 0:
        Path(os.environ["BENCH_OUT"]).write_text(json.dumps(out) + "\n")
    return 0


def in_updates(config: TrainConfig, comm, batch) -> dict:
    """The gradient step's sum timed inside real PPO updates on the combined ``batch`` ``[T, N*W]``."""
    updates = int(os.environ["BENCH_UPDATES"])
    torch.manual_seed(config.seed)  # the same weights on every rank, as the trainer's
    agent = build_agent(config)
    optimizer = build_optimizer(agent, learning_rates(config, comm.world_size))
    count = minibatches(config, comm.world_size)
    settings = PPOSettings(config.clip, config.epochs, count, config.ent_coef, config.vf_coef, config.max_grad_norm,
                           config.clip_vloss, config.norm_adv, config.target_kl, False, config.micro_batches)
    generator = torch.Generator().manual_seed(1)
    starts = batch.episode_starts.cpu()
    seconds: list[float] = []
    plain_sum = comm.sum_

    def timed_sum(tensor: torch.Tensor) -> None:
        start = time.perf_counter()
        plain_sum(tensor)
        seconds.append(time.perf_counter() - start)

    comm.sum_ = timed_sum
    ppo_update(agent, optimizer, batch, settings, generator, comm, starts).fetch()  # warm-up
    seconds.clear()
    start = time.perf_counter()
    for _ in range(updates):
        ppo_update(agent, optimizer, batch, settings, generator, comm, starts).fetch()
    update_ms = 1e3 * (time.perf_counter() - start) / updates
    comm.sum_ = plain_sum
    return {"bytes_per_rank": (sum(p.numel() for p in agent.parameters()) + STEP_STATS) * 4,
            "per_iteration": config.epochs * count, "median_ms": 1e3 * statistics.median(seconds),
            "p90_ms": 1e3 * float(np.percentile(seconds, 90)), "mean_ms": 1e3 * statistics.mean(seconds),
            "update_ms": update_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--updates", type=int, default=20, help="PPO updates of the last row")
    args = parser.parse_args()
    out_file = Path(f"/tmp/bench_collectives_{os.getpid()}.json")
    os.environ.update(BENCH_CALLS=str(args.calls), BENCH_UPDATES=str(args.updates), BENCH_OUT=str(out_file),
                      OMP_NUM_THREADS="1")
    config = TrainConfig(distributed=True, num_workers=args.workers, device="cpu", num_envs=args.num_envs)
    code = launch(config, "cpu", worker)
    if code != 0:
        raise SystemExit(code)
    result = json.loads(out_file.read_text())
    out_file.unlink()
    inside = result["gradient step, inside an update"]
    per_iteration = sum(r["median_ms"] * r["per_iteration"] for name, r in result.items() if r is not inside)
    print(f"Collectives of one iteration: {args.workers} gloo workers x {args.num_envs} envs, default flags, "
          f"{args.calls} calls each, {os.cpu_count()} CPUs")
    print("| collective | bytes per rank | per iteration | median ms | p90 ms | ms per iteration (medians) |")
    print("|---|---|---|---|---|---|")
    for name, r in result.items():
        print(f"| {name} | {r['bytes_per_rank']:,} | {r['per_iteration']} | {r['median_ms']:.3f} | "
              f"{r['p90_ms']:.3f} | {r['median_ms'] * r['per_iteration']:.1f} |")
    print(f"| all, back to back | | | | | {per_iteration:.1f} |")
    print(f"The gradient step's sum inside {args.updates} updates: mean {inside['mean_ms']:.3f} ms, "
          f"{inside['mean_ms'] * inside['per_iteration']:.1f} ms of an update's {inside['update_ms']:.1f} ms")
    print(json.dumps({"bench": "collectives", "workers": args.workers, "num_envs": args.num_envs,
                      "calls": args.calls, "cpus": os.cpu_count(), "collectives": result,
                      "ms_per_iteration": round(per_iteration, 2)}))


if __name__ == "__main__":
    main()
