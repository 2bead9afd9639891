"""Learning on one GPU: held-out score against wall seconds at 512, 4,096 and 16,384 envs.

Trains ppo-lstm-trader in-process on ``--device`` (the CLI's loop, no hold-out, no
checkpoints) with the batch rule's defaults: ``--num-envs N`` alone, so each update
takes 16 steps of every env (a batch of 16 N), 4 epochs of 4 minibatches, and both
Adam rates x min(sqrt(16 N / 128), 4), the trainer's default ``--rate-cap``. This script's
``--rate-cap X`` adds runs at rates x min(sqrt(16 N / 128), X), given explicitly: X = 1000 is the
uncapped sqrt rule, X = 8 the cap the trainer had before (bench/results/gpu_learning_nvidia_h200.txt).

Every ``--eval-every`` updates (and at the start) the policy is scored GREEDILY on the
same ``--episodes`` held-out episodes (``evaluation_seeds(0, episodes)``), as
``bench/learning.py`` scores it: mean net log return per bar in bps, as a share of the
Bayes filter's (regime; the known-model rule on ou) on the same paths. Wall time is the
training time only: the clock stops (after a CUDA synchronize) for each evaluation.

    python bench/gpu_learning.py --out-dir $OUT            # on a CUDA machine
    python bench/gpu_learning.py --device cpu --num-envs 64 --updates 4 --seeds 1 --episodes 50   # smoke run
    python bench/gpu_learning.py --markets ou-10bps --env ema_spans=500 --out-dir $OUT   # an observation option

``--env FIELD=VALUE`` (repeatable) sets an ``EnvConfig`` field of the trained agent's env, as
``bench/learning.py --set env.FIELD=VALUE`` does; the reference is scored on the same paths.

Prints a table per market (time to 50/80/90 % of the reference, median and worst over
seeds, and the final score), then ONE JSON line. Each finished run is also written to
``<out-dir>/runs.jsonl`` at once, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.learning_ceiling import baselines  # noqa: E402
from bench.learning_jobs import _parse_value  # noqa: E402
from bench.learning_markets import EVAL_SEED, TUNE_EPISODES, env_config  # noqa: E402
from bench.learning_paths import score_backtest, simulated_paths  # noqa: E402
from bench.quality_curve import Point, reach_summary  # noqa: E402
from ppo_lstm.algo.seeding import env_seeds  # noqa: E402
from ppo_lstm.config.plan import BASE_RATES, STEPS_PER_ENV, rate_scale
from ppo_lstm.evaluation.backtest import backtest_simulated, evaluation_seeds  # noqa: E402

SHARES = (0.5, 0.8, 0.9)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def curve(market: str, num_envs: int, seed: int, updates: int, every: int, episodes: int, device: str,
          cap: Optional[float], env_fields: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """One training run's curve ``[(env_steps, train_s, bps_per_bar)]`` and its throughput; ``env_fields``
    override the market's ``EnvConfig`` fields."""
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker
    from ppo_lstm.distributed.cuda import configure_numerics
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer

    dev = torch.device(device)
    if dev.type == "cuda":
        configure_numerics(True)
    env = dataclasses.replace(env_config(market), **(env_fields or {}))
    rates: dict[str, float] = {}
    if cap is not None:
        scale = rate_scale(TrainConfig(num_envs=num_envs, rate_cap=cap))  # the rule's scale under this cap
        rates = {"learning_rate_actor": BASE_RATES[0] * scale, "learning_rate_critic": BASE_RATES[1] * scale}
    points: list[Point] = []
    clock = {"start": 0.0, "paused": 0.0}

    def probe(env_steps: int, agent: Any) -> None:
        _sync(dev)
        pause = time.perf_counter()
        score = score_backtest(backtest_simulated(agent, env, episodes, EVAL_SEED, device=dev))["bps_per_bar"]
        points.append((int(env_steps), pause - clock["start"] - clock["paused"], score))
        clock["paused"] += time.perf_counter() - pause

    class CurveTrainer(Trainer):
        def _log_episodes(self, records):  # once per update, after it
            totals = super()._log_episodes(records)
            if self.state.update % every == 0 or self.state.update == updates:
                probe(self.state.env_steps, self.agent)
            return totals

    steps = updates * STEPS_PER_ENV * num_envs
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
        config = TrainConfig(episodes=max(1, steps // env.episode_length), num_envs=num_envs, seed=seed,
                             progress=False, holdout_episodes=0, log_file=os.path.join(tmp, "log"),
                             checkpoint_dir=tmp, checkpoint_interval=10**9, log_interval=10**9, env=env, **rates)
        trainer = CurveTrainer(config, Worker(LocalComm(), 0, dev), None, StopRequest())
        clock["start"] = time.perf_counter()
        probe(0, trainer.agent)
        trainer.run()
        if points[-1][0] != trainer.state.env_steps:
            probe(trainer.state.env_steps, trainer.agent)
        _sync(dev)
        train_s = time.perf_counter() - clock["start"] - clock["paused"]
        rates_used = trainer.learning_rates
        env_steps = trainer.state.env_steps
    return {"market": market, "num_envs": num_envs, "batch": STEPS_PER_ENV * num_envs, "seed": seed, "cap": cap,
            "obs_dim": env.obs_dim,
            "rates": list(rates_used), "env_steps": env_steps, "train_s": train_s,
            "env_steps_per_s": env_steps / train_s, "curve": points}


def summary(runs: list[dict[str, Any]], ref: float) -> dict[str, Any]:
    """Times to each share of ``ref`` and the final scores of one configuration's seeds."""
    curves = [r["curve"] for r in runs]
    finals = [c[-1][2] / ref for c in curves]
    return {"reach": {f"{100 * s:.0f}": reach_summary(curves, s * ref) for s in SHARES},
            "final_mean": sum(finals) / len(finals), "final_worst": min(finals),
            "env_steps_per_s": sum(r["env_steps_per_s"] for r in runs) / len(runs),
            "train_s": max(r["train_s"] for r in runs), "rates": runs[0]["rates"]}


def _cell(x: Optional[float], spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(market: str, ref_label: str, ref: float, rows: dict[str, dict[str, Any]]) -> None:
    print(f"\n{market}: % of the {ref_label} ({ref:.3f} bps/bar); times are training seconds (median / worst seed)")
    print(f"{'configuration':<34}{'rates':>17}{'steps/s':>11}{'to 50 %':>15}{'to 80 %':>15}{'to 90 %':>15}"
          f"{'final mean':>11}{'worst':>7}")
    for label, s in rows.items():
        cells = [f"{_cell(s['reach'][k]['wall_median'], '.1f')} / {_cell(s['reach'][k]['wall_worst'], '.1f')}"
                 for k in ("50", "80", "90")]
        rates = f"{s['rates'][0]:.2g} / {s['rates'][1]:.2g}"
        print(f"{label:<34}{rates:>17}{s['env_steps_per_s']:>11,.0f}" + "".join(f"{c:>15}" for c in cells)
              + f"{100 * s['final_mean']:>11.1f}{100 * s['final_worst']:>7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--markets", default="regime-10bps", help="comma list: regime-10bps, ou-10bps, regime-1bp")
    parser.add_argument("--num-envs", default="512,4096,16384", help="comma list of env counts")
    parser.add_argument("--updates", type=int, default=48,
                        help="updates per run (env steps: 16 x envs x this; a run ends on whole episodes, so this "
                             "rounds up to a multiple of episode length / 16: 8 on regime)")
    parser.add_argument("--eval-every", type=int, default=4, help="updates between evaluations")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=500, help="held-out episodes per evaluation")
    parser.add_argument("--rate-cap", type=float, action="append", default=[],
                        help="also run with the rate scale capped at this (repeatable)")
    parser.add_argument("--cap-envs", default="4096,16384", help="env counts that get the --rate-cap runs")
    parser.add_argument("--env", action="append", default=[], metavar="FIELD=VALUE",
                        help="EnvConfig override for the trained agent, e.g. ema_spans=500 (repeatable)")
    parser.add_argument("--out-dir", type=Path, default=None, help="write runs.jsonl and result.json here")
    args = parser.parse_args()
    env_fields = {k: _parse_value(v) for k, v in (item.split("=", 1) for item in args.env)}
    torch.set_num_threads(1)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench/gpu_learning.py: no CUDA device; pass --device cpu for a smoke run", file=sys.stderr)
        raise SystemExit(2)
    start = time.perf_counter()
    markets = [m for m in args.markets.split(",") if m]
    counts = [int(n) for n in args.num_envs.split(",") if n]
    cap_counts = {int(n) for n in args.cap_envs.split(",") if n}
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"bench": "gpu_learning", "device": args.device, "updates": args.updates,
                              "eval_every": args.eval_every, "seeds": args.seeds, "episodes": args.episodes,
                              "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
                              "torch": torch.__version__, "env": env_fields, "markets": {}}
    for market in markets:
        env = env_config(market)
        test = simulated_paths(env, evaluation_seeds(EVAL_SEED, args.episodes))
        tune = simulated_paths(env, env_seeds(1, 0, 8), TUNE_EPISODES)
        base = baselines(market, test, tune)
        ref_label = "Bayes filter" if "Bayes filter" in base else "known-model rule"
        ref = base[ref_label]["bps_per_bar"]
        configs = [(n, None) for n in counts] + [(n, c) for c in args.rate_cap for n in counts if n in cap_counts]
        rows: dict[str, dict[str, Any]] = {}
        runs_out: dict[str, list[dict[str, Any]]] = {}
        for n, cap in configs:
            label = f"{n} envs, batch {STEPS_PER_ENV * n}" + ("" if cap is None else f", rates x{cap:g} cap")
            runs = []
            for seed in range(1, args.seeds + 1):
                run = curve(market, n, seed, args.updates, args.eval_every, args.episodes, args.device, cap,
                            env_fields)
                runs.append(run)
                if args.out_dir:
                    with open(args.out_dir / "runs.jsonl", "a") as f:
                        f.write(json.dumps({**run, "reference_bps": ref}) + "\n")
                print(f"  {market} {label} seed {seed}: final {100 * run['curve'][-1][2] / ref:.1f} %, "
                      f"{run['train_s']:.1f} s, {run['env_steps_per_s']:,.0f} env-steps/s", flush=True)
            rows[label] = summary(runs, ref)
            runs_out[label] = runs
        print_table(market, ref_label, ref, rows)
        report["markets"][market] = {"reference": ref_label, "reference_bps": ref, "rows": rows,
                                     "curves": {k: [r["curve"] for r in v] for k, v in runs_out.items()}}
    report["wall_s"] = time.perf_counter() - start
    line = json.dumps(report)
    print(line)
    if args.out_dir:
        (args.out_dir / "result.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
