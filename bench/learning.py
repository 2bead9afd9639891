"""Learning quality at a fixed env-step budget, out of sample, beside baselines.

Trains ppo-lstm-trader (in-process, the CLI's loop; ``--seeds`` training seeds) and,
when installed, sb3-contrib's RecurrentPPO (same env, same sizes as
``bench/train_throughput.py``) on each market, then scores every policy GREEDILY on
held-out paths: ``--episodes`` fresh episodes from ``ppo_lstm.evaluation.backtest.evaluation_seeds``
(disjoint from every training seed) through ``backtest_simulated``; on the ``-csv``
market, the agent trains with ``--data`` on a long regime history and is scored on a
later, disjoint file with ``backtest_history`` (one continuous episode).

Score: mean net log return per bar, in bps (log of final over initial equity, summed
over episodes, divided by the bars), after the env's costs. Baselines trade the SAME
bars through the env's own ``TradingCore`` (fills at the next open, fee and slippage
per traded notional, K = 1 lot = the cash at the first decision):
buy-and-hold; MA crossover 10/40 (long / short); a uniformly random action per bar;
the regime oracle (holds the sign of the current bar's hidden drift); the Bayes filter
(HMM forward filter with the true p_stay 0.98, drift +-0.2 %, sigma 1 %, trading the
sign of its expected next-bar return with the hysteresis threshold that scores best on
the TRAINING paths, not the test paths); on ``ou`` the same known-model rule with the
OU's expected return (-theta x deviation from the path's start). "% Bayes" is each
score over that model rule's. Rules: ``bench/learning_baselines.py``; markets and their CSV files:
``bench/learning_markets.py``; scoring: ``bench/learning_paths.py``; the ceiling and the baselines'
scores: ``bench/learning_ceiling.py``; the training jobs: ``bench/learning_jobs.py``.

    python bench/learning.py                    # the benchmark (3 markets, 3 seeds; see below for time)
    python bench/learning.py --quick            # smoke run (~1 min)
    # a longer budget: 3,000 episodes of 128 steps
    python bench/learning.py --markets regime-10bps --steps 384000 --no-sb3
    python bench/learning.py --set ent_coef=0.03 --set update_interval=512    # TrainConfig overrides
    python bench/learning.py --no-sb3 --seeds 6 --workers 1,2   # 1 worker against 2 gloo workers (~9 min)
    python bench/learning.py --markets signal-5bps --no-sb3 --pick best   # score best.pt, the hold-out's pick
    python bench/learning.py --no-sb3 --seeds 8 --first-seed 9   # seeds 9-16, to add to a run of seeds 1-8

Markets: regime-1bp, regime-10bps, ou-10bps, regime-10bps-csv, signal-5bps (fee as named,
slippage 0, every other EnvConfig field at its default).

signal-5bps: the whole edge is in a column of the file (``write_signal_csv``): ``signal``
is an AR(1) (lag-1 autocorrelation 0.9, unit variance), the next bar's log return is
0.0015 x signal + 1 % noise, and ``noise`` is an independent AR(1) of the same law. The
agent trains with default flags plus ``--features signal,noise`` on a 60k-bar file and is
backtested on the 20k bars after it; beside it the same agent without ``--features``. The
reference is the known-model rule: a hysteresis band on 0.0015 x signal (long above +b,
short below -b, else hold), b tuned on the training file. Its score is the money made per
bar, in bps of the starting cash (a continuous backtest trades a fixed number of units, so
over 20k profitable bars equity grows by adding, and log growth per bar would understate
every profitable policy by a different amount); bench/results/learning_signal.txt.

Time: 12 training runs (9 x 131072 steps, 3 RecurrentPPO x 131072, the same budget) on ``--jobs 2``:
205 s on 2 otherwise idle AMD EPYC cores at 8 envs a run (``--set num_envs=8``, bench/results/learning.txt).
At the default 64 envs, the 6 runs of ``--markets regime-10bps,ou-10bps --no-sb3`` took 42 s
(bench/results/tune_wall_time_regime.txt). The csv market is one continuous
regime path (default parameters) cut into a 60k-bar training file and the 20k bars after
it as the test file. Its scores are not comparable with the simulated markets': a
continuous backtest keeps the lot size fixed in units, so the exposure drifts with the
price over 20k bars (and a policy losing steadily, like random, can go bust). Runs ``--jobs`` training
processes at once, one torch thread each. Prints a table, then ONE JSON line. A run of several
workers whose launch fails is reported as a FAILED seed (``failed_seeds`` in the JSON), the
other seeds as usual, and the bench then exits with code 1.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.job_pool import job_pool  # noqa: E402
from bench.learning_ceiling import baselines  # noqa: E402
from bench.learning_jobs import _parse_value, run_job  # noqa: E402
from bench.learning_markets import (DEFAULT_MARKETS, EVAL_SEED, MARKETS, TUNE_EPISODES, env_config,  # noqa: E402
                                    write_regime_csv, write_signal_csv)
from bench.learning_paths import history_paths, simulated_paths  # noqa: E402
from envs.data import load_ohlcv  # noqa: E402
from ppo_lstm.algo.seeding import env_seeds  # noqa: E402
from ppo_lstm.evaluation.backtest import evaluation_seeds  # noqa: E402

# ----------------------------------------------------------------------------- the table


def _fmt(x: Optional[float], spec: str = "8.2f") -> str:
    return f"{x:{spec}}" if x is not None and math.isfinite(x) else f"{'-':>{len(format(0.0, spec))}}"


def print_table(report: dict[str, Any]) -> None:
    print(f"{'market':<18}{'policy':<42}{'bps/bar':>9}{'% Bayes':>9}{'turnover':>10}  note")
    for name, mk in report["markets"].items():
        ref = mk["reference_bps"]
        for policy, row in mk["rows"].items():
            share = 100.0 * row["bps_per_bar"] / ref if ref and row["bps_per_bar"] is not None else None
            print(f"{name:<18}{policy:<42}{_fmt(row['bps_per_bar'], '9.3f')}{_fmt(share, '9.1f')}"
                  f"{_fmt(row.get('turnover'), '10.2f')}  {row.get('note', '')}")
        print()


def _shares(results: dict[str, Any], ref: float) -> dict[str, Optional[float]]:
    """Mean and worst score of one set of seeds as shares of the reference rule's."""
    if not results["scores"] or not ref:  # every seed failed, or no reference
        return {"ours_share_mean": None, "ours_share_worst": None}
    return {"ours_share_mean": float(np.mean(results["scores"])) / ref, "ours_share_worst": results["worst"] / ref}


def _run_launched(job: dict[str, Any]) -> dict[str, Any]:
    """A run of several gloo workers; one whose launch fails (the launcher has already said
    why on stderr) becomes a failed seed, so the seeds already trained are still reported."""
    try:
        return run_job(job)
    except RuntimeError as err:
        print(f"seed {job['seed']} with {job['workers']} workers failed ({err}); going on with the other seeds",
              file=sys.stderr, flush=True)
        return {**job, "failed": str(err)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markets", default=DEFAULT_MARKETS, help=f"comma list of {', '.join(MARKETS)}")
    parser.add_argument("--steps", type=int, default=131_072, help="env steps per ppo-lstm-trader training run")
    parser.add_argument("--sb3-steps", type=int,
                        help="env steps per RecurrentPPO run (default: --steps, the same budget)")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds of ppo-lstm-trader (from --first-seed)")
    parser.add_argument("--sb3-seeds", type=int, default=1, help="training seeds of RecurrentPPO")
    parser.add_argument("--first-seed", type=int, default=1,
                        help="ppo-lstm-trader trains seeds FIRST .. FIRST + --seeds - 1, so more seeds can be "
                             "added to an earlier run's (whose seeds repeat to the last digit) without rerunning them")
    parser.add_argument("--no-sb3", action="store_true", help="skip RecurrentPPO")
    parser.add_argument("--episodes", type=int, default=1000, help="held-out test episodes per market")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once (1 torch thread each)")
    parser.add_argument("--workers", default="1",
                        help="comma list of worker counts for ppo-lstm-trader, e.g. 1,2: a count above 1 trains "
                             "with that many gloo workers (as --distributed --device cpu), one run at a time")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="TrainConfig override for ppo-lstm-trader (env fields as env.NAME, which "
                             "RecurrentPPO's env takes too), repeatable")
    parser.add_argument("--pick", choices=("final", "best"), default="final",
                        help="which weights of a ppo-lstm-trader run to score: the final ones, or best.pt, the "
                             "hold-out's pick over the checkpoints every --checkpoint-interval episodes (what "
                             "evaluate-ppo-lstm --checkpoint DIR loads; its hold-out backtests count in the seconds)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, 1 seed, 100 test episodes")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.sb3_steps, args.seeds, args.sb3_seeds, args.episodes = 4096, 4096, 1, 1, 100
    if args.sb3_steps is None:
        args.sb3_steps = args.steps
    names = [m.strip() for m in args.markets.split(",") if m.strip()]
    worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    if args.first_seed < 1:
        parser.error(f"--first-seed must be 1 or more, not {args.first_seed}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for name in names:
        if name not in MARKETS:
            parser.error(f"unknown market {name!r}; choose from {', '.join(MARKETS)}")
    overrides = dict(item.split("=", 1) for item in args.set)
    overrides = {k: _parse_value(v) for k, v in overrides.items()}
    torch.set_num_threads(1)
    sb3 = not args.no_sb3
    if sb3:
        try:
            import sb3_contrib  # noqa: F401
        except ImportError:
            print("sb3-contrib not installed: skipping RecurrentPPO (pip install -e '.[bench]')")
            sb3 = False

    start = time.perf_counter()
    tmpdir = tempfile.TemporaryDirectory()
    jobs: list[dict[str, Any]] = []
    setups: dict[str, dict[str, Any]] = {}
    for name in names:
        setups[name] = {}
        common = {"market": name, "episodes": args.episodes}
        if MARKETS[name].get("csv"):
            write = write_signal_csv if MARKETS[name]["csv"] == "signal" else write_regime_csv
            train_csv, test_csv, train_drift, test_drift = write(Path(tmpdir.name), EVAL_SEED)
            common.update(train_csv=str(train_csv), test_csv=str(test_csv),
                          additive=bool(MARKETS[name].get("additive")))
            setups[name].update(train_drift=train_drift, test_drift=test_drift)
        jobs += [{**common, "kind": "ours", "seed": s, "steps": args.steps, "overrides": overrides, "workers": w,
                  "pick": args.pick} for w in worker_counts for s in seeds]
        if MARKETS[name].get("features"):  # the same agent blind to the columns
            jobs += [{**common, "kind": "ours", "seed": s, "steps": args.steps, "overrides": overrides, "workers": 1,
                      "no_features": True, "pick": args.pick} for s in seeds]
        if sb3:
            jobs += [{**common, "kind": "sb3", "seed": s, "steps": args.sb3_steps, "overrides": overrides}  # env.* only
                     for s in range(1, args.sb3_seeds + 1)]
    jobs.sort(key=lambda j: -(j["steps"] * (1.5 if j["kind"] == "sb3" else 1.0)))  # longest first
    launched = [job for job in jobs if job.get("workers", 1) > 1]  # each starts its own workers: in this process
    with job_pool(args.jobs) as pool:
        futures = [pool.submit(run_job, job) for job in jobs if job not in launched]
        # the baselines, in this process while the workers train
        for name in names:
            env = env_config(name)
            if MARKETS[name].get("csv"):
                job = next(j for j in jobs if j["market"] == name)
                features = env.feature_names
                additive = bool(MARKETS[name].get("additive"))
                test = history_paths(env, load_ohlcv(job["test_csv"], features=features), setups[name]["test_drift"],
                                     additive)
                tune = history_paths(env, load_ohlcv(job["train_csv"], features=features),
                                     setups[name]["train_drift"], additive)
            else:
                test = simulated_paths(env, evaluation_seeds(EVAL_SEED, args.episodes))
                tune = simulated_paths(env, env_seeds(1, 0, 8), TUNE_EPISODES)
            setups[name]["baselines"] = baselines(name, test, tune)
            setups[name]["bars"] = int(test.close.shape[0] * test.env.episode_length)
        done = [f.result() for f in futures]
    done += [_run_launched(job) for job in launched]  # one at a time, after the pool: each uses every core

    report: dict[str, Any] = {"bench": "learning", "steps": args.steps, "sb3_steps": args.sb3_steps if sb3 else None,
                              "seeds": args.seeds, "first_seed": args.first_seed, "episodes": args.episodes,
                              "overrides": overrides, "pick": args.pick,
                              "quick": args.quick, "markets": {}}
    for name in names:
        base = setups[name]["baselines"]
        ref_label = "Bayes filter" if "Bayes filter" in base else "known-model rule"
        ref = base[ref_label]["bps_per_bar"]
        theirs = [d["result"] for d in done if d["market"] == name and d["kind"] == "sb3"]
        rows: dict[str, dict[str, Any]] = {}
        by_workers: dict[int, dict[str, Any]] = {}
        for workers in worker_counts:
            mine = [d for d in done if d["market"] == name and d["kind"] == "ours"
                    and d.get("workers", 1) == workers and not d.get("no_features")]
            failed_seeds = sorted(d["seed"] for d in mine if "failed" in d)
            ours = sorted((d["result"] for d in mine if "failed" not in d), key=lambda r: r["seed"])
            scores = [r["bps_per_bar"] for r in ours]
            by_workers[workers] = {"scores": scores, "worst": min(scores, default=None), "per_seed": ours,
                                   "failed_seeds": failed_seeds}
            failed_rows = {f"  seed {seed}, {workers} workers": {
                "bps_per_bar": None, "turnover": None, "note": "FAILED: its launch did not finish (stderr)"}
                for seed in failed_seeds}
            if not ours:
                rows.update(failed_rows)
                continue
            label = "ppo-lstm-trader" + (f", {workers} workers," if workers > 1 else "")
            if MARKETS[name].get("features"):
                label += f" --features {MARKETS[name]['features']}"
            rows[f"{label} mean of {len(ours)}"] = {
                "bps_per_bar": float(np.mean(scores)), "turnover": float(np.mean([r["turnover"] for r in ours])),
                "note": f"{args.steps} steps/seed{', best.pt' if args.pick == 'best' else ''}, entropy at end {np.mean([r['final_entropy'] for r in ours]):.2f}"}
            worst = min(ours, key=lambda r: r["bps_per_bar"])
            rows[f"{label} worst seed"] = {"bps_per_bar": worst["bps_per_bar"], "turnover": worst["turnover"],
                                           "note": f"seed {worst['seed']}"}
            for r in ours:
                rows[f"  seed {r['seed']}" + (f", {workers} workers" if workers > 1 else "")] = {
                    "bps_per_bar": r["bps_per_bar"], "turnover": r["turnover"],
                    "note": f"entropy {r['final_entropy']:.2f}, train {r['wall_s']:.0f}s"
                            + (f", best.pt at {r['picked_env_steps']} steps" if args.pick == "best" else "")}
            rows.update(failed_rows)
        blind = sorted((d["result"] for d in done if d["market"] == name and d.get("no_features")),
                       key=lambda r: r["seed"])
        if blind:
            rows[f"ppo-lstm-trader without --features mean of {len(blind)}"] = {
                "bps_per_bar": float(np.mean([r["bps_per_bar"] for r in blind])),
                "turnover": float(np.mean([r["turnover"] for r in blind])),
                "note": f"{args.steps} steps/seed; seeds {', '.join(format(r['bps_per_bar'], '.3f') for r in blind)}"}
        if theirs:
            rows[f"RecurrentPPO mean of {len(theirs)}"] = {
                "bps_per_bar": float(np.mean([r["bps_per_bar"] for r in theirs])),
                "turnover": float(np.mean([r["turnover"] for r in theirs])),
                "note": f"{args.sb3_steps} steps/seed" + (" (FEWER than ours)"
                                                          if args.sb3_steps < args.steps else "")}
        for label, row in base.items():
            note = f"threshold {row['threshold_bps']:g} bps (tuned on training paths)" if "threshold_bps" in row else ""
            rows[label] = {"bps_per_bar": row["bps_per_bar"], "turnover": row["turnover"], "note": note}
        report["markets"][name] = {
            "env": {k: v for k, v in MARKETS[name].items()}, "test_bars": setups[name]["bars"],
            "reference": ref_label, "reference_bps": ref, "rows": rows,
            **_shares(by_workers[worker_counts[0]], ref), "ours_per_seed": by_workers[worker_counts[0]]["per_seed"],
            "by_workers": {w: {**_shares(b, ref), "per_seed": b["per_seed"], "failed_seeds": b["failed_seeds"]}
                           for w, b in by_workers.items()},
            "sb3_per_seed": theirs, "without_features_per_seed": blind,
            "threshold_grid_bps": base[ref_label]["tuning_grid"]}
    report["wall_s"] = time.perf_counter() - start
    tmpdir.cleanup()
    print_table(report)
    print(f"wall time {report['wall_s']:.0f}s; score = mean net log return per bar (bps) on held-out bars; "
          f"turnover = lots traded per 100 bars")
    for name in names:
        if MARKETS[name].get("additive"):
            print(f"{name}: score = money made per bar in bps of the starting cash, not log growth (score_backtest)")
    line = json.dumps(report, default=float)
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    failed = [d for d in done if "failed" in d]
    if failed:
        print(f"{len(failed)} training run(s) failed: " + ", ".join(
            f"{d['market']} seed {d['seed']} on {d['workers']} workers" for d in failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
