"""Walk-forward on markets with no edge at all: how often does the verdict claim one?

``--histories`` driftless random walks (daily business-day bars, log returns N(0, 1 %), no
signal of any kind; history i drawn from seed i), each run through

    walkforward-ppo-lstm --data walk_<i>.csv --folds 2 --test-size 250 --seeds 1 --jobs 2 ... (tiny training)

(``--parallel`` such walk-forwards at once).
The training is deliberately short (``--episodes 24`` of 32 bars, a 16-wide net): the claim
is about the verdict, which must hold whatever the agent learned, and on these markets
there is nothing to learn. With one seed there is one trial, so the verdict is the
bootstrap p-value alone (no Deflated Sharpe Ratio), the rule's least guarded case.
The claim holds when at most 10 % of the histories get ``shown`` at alpha = 5 %.
Prints a table and ONE JSON line.

    python bench/walkforward_false_edges.py --out /tmp/wf_null
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ["--episodes", "24", "--episode-length", "32", "--window", "16", "--num-envs", "4", "--update-interval",
            "128", "--minibatches", "2", "--hidden-size", "16", "--lstm-size", "16", "--checkpoint-interval", "8",
            "--device", "cpu"]


def write_walk(path: Path, bars: int, seed: int) -> Path:
    """A driftless random walk: log returns N(0, 0.01^2), opens at the previous close."""
    rng = np.random.default_rng([0x4E554C4C, seed])
    close = 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))
    open_ = np.r_[100.0, close[:-1]]
    wiggle = np.abs(0.003 * rng.standard_normal(bars))
    frame = pd.DataFrame({"Date": pd.bdate_range("2000-01-03", periods=bars).strftime("%Y-%m-%d"), "Open": open_,
                          "High": np.maximum(open_, close) * (1 + wiggle),
                          "Low": np.minimum(open_, close) * (1 - wiggle),
                          "Close": close, "Volume": 1000})
    frame.to_csv(path, index=False, float_format="%.10g")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/wf_null")
    parser.add_argument("--histories", type=int, default=20)
    parser.add_argument("--bars", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=3, help="walk-forwards (histories) run at once")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    rows = []
    print("# " + " ".join(["python bench/walkforward_false_edges.py", *sys.argv[1:]]))
    print(f"# each: walkforward-ppo-lstm --folds 2 --test-size 250 --seeds 1 --jobs {args.jobs} {' '.join(TRAINING)}")
    print(f"{'history':>7s} {'shown':>6s} {'p':>6s} {'excess %/yr':>12s} {'95 % CI':>20s} {'B&H %/yr':>9s}")
    def one(i: int) -> dict:
        data = write_walk(out / f"walk_{i:02d}.csv", args.bars, i)
        command = [sys.executable, "-m", "ppo_lstm.walkforward", "--data", str(data), "--out", str(out / f"wf_{i:02d}"),
                   "--folds", "2", "--test-size", "250", "--seeds", "1", "--jobs", str(args.jobs), "--no-progress",
                   *TRAINING]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"history {i}: walk-forward failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads((out / f"wf_{i:02d}" / "summary.json").read_text())

    with ThreadPoolExecutor(args.parallel) as pool:
        summaries = list(pool.map(one, range(args.histories)))
    for i, summary in enumerate(summaries):
        s = summary["edge"]
        bh = summary["figures"]["buy_and_hold"]["overall"]["annual_return"]
        rows.append({"history": i, "shown": bool(summary["shown"]), "p_value": s["p_value"],
                     "excess_annual": s["excess_annual"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                     "buy_and_hold_annual": bh, "verdict": summary["verdict"]})
        print(f"{i:7d} {str(summary['shown']):>6s} {s['p_value']:6.3f} {100 * s['excess_annual']:12.2f} "
              f"{100 * s['ci_low']:9.2f} to {100 * s['ci_high']:6.2f} {100 * bh:9.2f}")
    shown = sum(r["shown"] for r in rows)
    below = sum(r["p_value"] < 0.05 for r in rows)
    rate = shown / len(rows)
    wall = time.monotonic() - started
    print(f"edge claimed in {shown} of {len(rows)} histories ({100 * rate:.0f} %); p < 0.05 in {below}; "
          f"claim (at most 10 %): {'holds' if rate <= 0.10 else 'does NOT hold'}; wall {wall:.0f}s")
    print(json.dumps({"bench": "walkforward_false_edges", "histories": len(rows), "bars": args.bars,
                      "shown": shown, "rate": rate, "p_below_0.05": below, "claim_holds": rate <= 0.10,
                      "wall_s": wall, "rows": rows}))


if __name__ == "__main__":
    main()
