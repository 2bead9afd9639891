"""Walk-forward on a market with a real edge: does the verdict find it?

The built-in regime market (hidden up/down trend, drift +-0.2 %/bar, vol 1 %/bar, ~50-bar
regimes; ``envs.markets.processes``) written out as ONE long hourly history (``--bars`` bars, the
same generator as ``bench/learning.py``'s regime CSV, seed ``--data-seed``), then

    walkforward-ppo-lstm --data regime.csv --folds 3 --test-size 2000 --seeds 3 --fee-bps 10 --slippage-bps 0
                         --episodes 300 --holdout 0.1 --jobs 2 --out <dir>

(300 episodes of 128 steps per job, 38,400 steps: under a third of the 131,072 that
bench/learning.py gives the regime market at 10 bps, to fit nine trainings on a shared
2-core machine; the hold-out lines show the agent finds the regimes well before that).
The claim holds when the verdict says ``shown``: the ensemble's alpha over buy-and-hold has a
one-sided 95 % lower bound above 0 (Newey-West), the bootstrap confirms it, and the Deflated
Sharpe Ratio over the seeds is above 0.95. Prints a table and ONE JSON line. Rerunning with the same
``--out`` resumes the walk-forward (finished jobs are kept).

    python bench/walkforward_edge.py --out /tmp/wf_edge
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs.markets.processes import paths_from_noise  # noqa: E402


def write_regime_history(path: Path, bars: int, seed: int) -> Path:
    """One continuous regime path of ``bars`` hourly bars (start price ~32) as a CSV."""
    rng = np.random.default_rng([0x57460000, seed])
    u = rng.random((1, 8))
    u[0, 0] = 0.5
    z = rng.standard_normal((1, bars))
    ext = rng.random((1, bars))
    aux = rng.standard_normal((1, 3, bars))
    p = paths_from_noise("regime", u, z, ext, aux=aux)
    stamps = pd.date_range("2001-01-01", periods=bars, freq="h")
    frame = pd.DataFrame({"Date": stamps.strftime("%Y-%m-%d %H:%M:%S"),
                          **{k.capitalize(): p[k][0] for k in ("open", "high", "low", "close", "volume")}})
    frame.to_csv(path, index=False, float_format="%.12g")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/wf_edge")
    parser.add_argument("--bars", type=int, default=26_000)
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--test-size", default="2000")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "regime.csv"
    if not data.exists():
        write_regime_history(data, args.bars, args.data_seed)
    command = [sys.executable, "-m", "ppo_lstm.walkforward", "--data", str(data), "--out", str(out / "wf"),
               "--folds", str(args.folds), "--test-size", args.test_size, "--seeds", str(args.seeds),
               "--fee-bps", "10", "--slippage-bps", "0", "--episodes", str(args.episodes), "--holdout", "0.1",
               "--jobs", str(args.jobs), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"walk-forward failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads((out / "wf" / "summary.json").read_text())
    stats = summary["edge"]
    holds = bool(summary["shown"])
    print("# " + " ".join(["python bench/walkforward_edge.py", *sys.argv[1:]]))
    print(f"# walk-forward: {' '.join(command[3:])}")
    print(f"{'series':22s} {'total %':>9s} {'annual %':>9s} {'Sharpe':>7s} {'max DD %':>9s}")
    for column, values in summary["figures"].items():
        o = values["overall"]
        fmt = (lambda v, s=100.0: f"{s * v:9.2f}" if v is not None else f"{'-':>9s}")
        print(f"{column:22s} {fmt(o['total_return'])} {fmt(o['annual_return'])} "
              f"{(o['sharpe'] if o['sharpe'] is not None else float('nan')):7.2f} {fmt(o['max_drawdown'])}")
    print(summary["verdict"])
    print(f"claim (the edge is shown): {'holds' if holds else 'does NOT hold'}; wall {wall:.0f}s "
          f"(a rerun that resumes finished jobs is shorter)")
    print(json.dumps({"bench": "walkforward_edge", "bars": args.bars, "folds": args.folds, "seeds": args.seeds,
                      "test_size": args.test_size, "episodes": args.episodes, "fee_bps": 10, "claim_holds": holds,
                      "verdict": summary["verdict"], "statistics": stats, "wall_s": wall,
                      "figures": {k: v["overall"] for k, v in summary["figures"].items()}}))


if __name__ == "__main__":
    main()
