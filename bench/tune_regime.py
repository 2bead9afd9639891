"""Does tune-ppo-lstm repair a poor configuration? The built-in regime market at 10 bps.

    python bench/tune_regime.py                               # the claim's scale: 1024 episodes, 24 trials
    python bench/tune_regime.py --episodes 256 --trials 8     # a smaller budget

It writes nothing but its output: the study's report, a table and one JSON line.

The market: one continuous regime path, the first HISTORY_BARS bars of ``bench/learning.py``'s
regime history (``write_regime_csv``), as ``--data`` with the default 20 % hold-out.

1. The default configuration trains once (seed 1, --episodes episodes of 128 bars; 1024, the budget
   of the learning benchmark, docs/benchmarks.md): its best hold-out return is the reference.
2. A study starts from a deliberately poor base, both learning rates 100 times too small,
   and runs at most --trials trials on --jobs processes (``--jobs 2``, TPE, median pruner, the
   built-in space). Its best trial's hold-out return is compared with the reference.

The claim checked: the study finds a configuration whose hold-out score is at least 90 % of
the default's. Both scores are the best hold-out return of a run's checkpoints, the study's
objective; the best of many trials on one hold-out is biased upwards (the walk-forward
command judges a tuned configuration on later data). The wall time and the pruned trials
are reported.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import optuna  # noqa: E402
import pandas as pd  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.learning import write_regime_csv  # noqa: E402

HISTORY_BARS = 24_000  # 19,200 to train on, 4,800 held out
EPISODES, TRIALS, JOBS = 1024, 24, 2
CHECKPOINTS = 8  # hold-out backtests per run, so 8 chances for the pruner
POOR = ["--learning-rate-actor", "3e-6", "--learning-rate-critic", "1e-5"]  # the defaults / 100


def run(command: list[str], cwd: Path) -> float:
    tic = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - tic


def best_holdout_return(metrics: Path) -> float:
    with open(metrics, newline="") as handle:
        values = [float(r["holdout_return_pct"]) for r in csv.DictReader(handle) if r["holdout_return_pct"]]
    return max(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=EPISODES, help="episodes of 128 bars per training run")
    parser.add_argument("--trials", type=int, default=TRIALS, help="trials of the study")
    parser.add_argument("--jobs", type=int, default=JOBS, help="processes of the study")
    args = parser.parse_args()
    common = ["--fee-bps", "10", "--episodes", str(args.episodes), "--checkpoint-interval",
              str(max(1, args.episodes // CHECKPOINTS)), "--device", "cpu", "--seed", "1", "--no-progress"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, _, _, _ = write_regime_csv(work, 0)
        data = work / "regime.csv"
        pd.read_csv(train).head(HISTORY_BARS).to_csv(data, index=False)
        common = ["--data", str(data), *common]
        default_s = run([sys.executable, str(ROOT / "train_ppo_lstm.py"), *common, "--checkpoint-dir", "default",
                         "--log-file", "default/training.log"], work)
        reference = best_holdout_return(work / "default" / "metrics.csv")
        study_s = run([sys.executable, "-m", "ppo_lstm.tune", *common, *POOR, "--out", "study",
                       "--trials", str(args.trials), "--jobs", str(args.jobs), "--sampler-seed", "0"], work)
        report = (work / "study" / "report.txt").read_text()
        study = optuna.load_study(study_name="study", storage=f"sqlite:///{work / 'study' / 'study.db'}")
        states = [t.state.name for t in study.trials]
        best = study.best_trial
    counts = {s: states.count(s) for s in ("COMPLETE", "PRUNED", "FAIL")}
    share = best.value / reference if reference > 0 else float("nan")
    command = " ".join(["python bench/tune_regime.py", *sys.argv[1:]])
    print(f"# {command}   (regime 10 bps, {HISTORY_BARS} bars, {args.episodes} episodes per run)")
    print(report)
    print(f"| run | hold-out return % | wall s |\n|---|---|---|\n| default configuration | {reference:.3f} | "
          f"{default_s:.0f} |\n| study from lr / 100 ({args.trials} trials, {args.jobs} processes): best trial "
          f"{best.number} | {best.value:.3f} | {study_s:.0f} |")
    print(f"best / default: {share:.1%} (claim: >= 90 %: {'holds' if share >= 0.9 else 'does not hold'}); "
          f"trials: {counts['COMPLETE']} complete, {counts['PRUNED']} pruned, {counts['FAIL']} failed")
    print(json.dumps({"bench": "tune_regime", "default_holdout_return_pct": reference,
                      "best_trial": best.number, "best_holdout_return_pct": best.value, "share": share,
                      "best_params": best.params, "trials": counts, "default_wall_s": round(default_s, 1),
                      "study_wall_s": round(study_s, 1), "episodes": args.episodes, "max_trials": args.trials,
                      "history_bars": HISTORY_BARS}))


if __name__ == "__main__":
    main()
