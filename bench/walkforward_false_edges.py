"""Walk-forward on markets with no edge at all: how often does the verdict claim one?

``--histories`` driftless random walks (daily business-day bars, log returns N(0, 1 %), no
signal of any kind; history i drawn from seed i), each run through

    walkforward-ppo-lstm --data walk_<i>.csv --folds 2 --test-size 250 --seeds 1 --jobs 2 --fee-bps 10 ... (tiny training)

(``--parallel`` such walk-forwards at once).
The training is deliberately short (``--episodes 24`` of 32 bars, a 16-wide net): the claim
is about the verdict, which must hold whatever the agent learned, and on these markets
there is nothing to learn. With one seed there is one trial, so the verdict is the alpha
tests alone (no Deflated Sharpe Ratio), the rule's least guarded case. Beside ``--histories``
walks drawn at random, ``--falling`` walks whose two test windows fell by more than 40 % in
all, the first ``--never-trades`` of them trained at ``--fee-bps 500``. At 5 %, about one in 20
walks gets ``shown`` by chance; the claim holds when 0 to 2 of all the walks get ``shown`` and
none of those trained at 500 bps (where the agent learns not to trade, or loses by trading).
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


def falling_seeds(count: int, bars: int, test_bars: int, start: int = 1000) -> list[int]:
    """``count`` history seeds from ``start`` on whose last ``test_bars`` bars fell by more than 40 %."""
    found, seed = [], start
    while len(found) < count:
        rng = np.random.default_rng([0x4E554C4C, seed])
        log_close = np.cumsum(0.01 * rng.standard_normal(bars))
        if np.exp(log_close[-1] - log_close[-test_bars - 1]) - 1 < -0.40:
            found.append(seed)
        seed += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/wf_null")
    parser.add_argument("--histories", type=int, default=20, help="walks drawn at random (seeds 0, 1, ...)")
    parser.add_argument("--falling", type=int, default=6, help="more walks whose test windows fell by over 40 %%")
    parser.add_argument("--never-trades", type=int, default=2,
                        help="of the falling walks, this many trained at --fee-bps 500 (the agent learns not to trade)")
    parser.add_argument("--bars", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=2, help="walk-forwards (histories) run at once")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    falling = falling_seeds(args.falling, args.bars, 500)
    plan = [(i, "random", 10.0) for i in range(args.histories)]
    plan += [(seed, "falling", 500.0 if k < args.never_trades else 10.0) for k, seed in enumerate(falling)]
    print("# " + " ".join(["python bench/walkforward_false_edges.py", *sys.argv[1:]]))
    print(f"# each: walkforward-ppo-lstm --folds 2 --test-size 250 --seeds 1 --jobs {args.jobs} --fee-bps FEE "
          f"--slippage-bps 0 {' '.join(TRAINING)}")
    print(f"{'history':>7s} {'kind':>8s} {'fee':>4s} {'shown':>6s} {'p':>7s} {'alpha %/yr':>11s} {'lower %':>8s} "
          f"{'beta':>6s} {'agent %':>8s} {'B&H %':>7s}")

    def one(item: tuple[int, str, float]) -> dict:
        i, _, fee = item
        data = write_walk(out / f"walk_{i:04d}.csv", args.bars, i)
        command = [sys.executable, "-m", "ppo_lstm.walkforward", "--data", str(data),
                   "--out", str(out / f"wf_{i:04d}_fee{fee:g}"), "--folds", "2", "--test-size", "250", "--seeds", "1",
                   "--jobs", str(args.jobs), "--fee-bps", f"{fee:g}", "--slippage-bps", "0", "--no-progress",
                   *TRAINING]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"history {i}: walk-forward failed ({done.returncode}): {done.stderr[-2000:]}")
        return json.loads((out / f"wf_{i:04d}_fee{fee:g}" / "summary.json").read_text())

    with ThreadPoolExecutor(args.parallel) as pool:
        summaries = list(pool.map(one, plan))
    rows = []
    for (i, kind, fee), summary in zip(plan, summaries):
        s = summary["edge"]
        agent = summary["figures"]["ensemble"]["overall"]["total_return"]
        bh = summary["figures"]["buy_and_hold"]["overall"]["total_return"]
        rows.append({"history": i, "kind": kind, "fee_bps": fee, "shown": bool(summary["shown"]),
                     "p_value": s["p_value"], "alpha_annual": s["alpha_annual"], "lower_annual": s["lower_annual"],
                     "beta": s["beta"], "agent_total_return": agent, "buy_and_hold_total_return": bh,
                     "verdict": summary["verdict"]})
        print(f"{i:7d} {kind:>8s} {fee:4.0f} {str(summary['shown']):>6s} {s['p_value']:7.3f} "
              f"{100 * s['alpha_annual']:11.2f} {100 * s['lower_annual']:8.2f} {s['beta']:6.2f} {100 * agent:8.2f} "
              f"{100 * bh:7.2f}")
    shown = sum(r["shown"] for r in rows)
    random_shown = sum(r["shown"] for r in rows if r["kind"] == "random")
    falling_shown = sum(r["shown"] for r in rows if r["kind"] == "falling")
    never_shown = sum(r["shown"] for r in rows if r["fee_bps"] >= 500)
    holds = shown <= 2 and never_shown == 0
    wall = time.monotonic() - started
    print(f"edge claimed in {random_shown} of {args.histories} random walks and {falling_shown} of {len(falling)} "
          f"walks that fell by over 40 % ({never_shown} of the {args.never_trades} at 500 bps); claim (0 to 2 of all "
          f"{len(rows)}, none at 500 bps): {'holds' if holds else 'does NOT hold'}; wall {wall:.0f}s")
    print(json.dumps({"bench": "walkforward_false_edges", "histories": args.histories, "falling": len(falling),
                      "never_trades": args.never_trades, "bars": args.bars, "shown": shown,
                      "random_shown": random_shown, "falling_shown": falling_shown, "never_trades_shown": never_shown,
                      "claim_holds": holds,
                      "wall_s": wall, "rows": rows}))


if __name__ == "__main__":
    main()
