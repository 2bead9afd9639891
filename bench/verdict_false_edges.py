"""The verdict on markets with no edge at all, without training: how often does it claim one?

Driftless random walks (business-day bars, log returns N(0, 1 %), no signal of any kind) are traded
through the walk-forward's own engine (``backtest_history`` with ``RulePolicy``, at ``--fee-bps``)
by five policies with no skill:

- ``flat``: cash throughout;
- ``long`` and ``short``: one lot long or short throughout (fixed exposures);
- ``random``: long, flat or short, re-drawn at random on about one bar in 20;
- ``ma_10_40``: the MA 10/40 crossover, long or short.

Each policy's per-bar P&L over the starting equity (the walk-forward's units,
``on_starting_capital``) goes through ``edge_verdict`` against buy-and-hold's (one trial: no
Deflated Sharpe Ratio, the rule's least guarded case; ``describe=False``). Beside the verdict, the
rule it replaced is computed on the simple returns, as it was: the one-sided stationary-bootstrap
p-value of the mean excess return below 5 % (999 draws).

The walks: ``--walks`` drawn at random, and ``--extreme`` more drawn until their test span's drift has
|t| > 2 (half falling, half rising), the markets where being out of (or short in) a falling market
used to pass for skill. The claim holds when, for every policy, the verdict says ``shown`` in at most
6.5 % of the random walks (5 % plus the sampling error of 1,000) and of the extreme ones, and a fixed
exposure (flat, long, short) never. Prints a table and ONE JSON line.

    python bench/verdict_false_edges.py --walks 1000 --extreme 300 --processes 2
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

POLICIES = ("flat", "long", "short", "random", "ma_10_40")
FIXED = ("flat", "long", "short")
WARMUP = 60  # bars before the test span: the MA's history and the observation window


def walk_close(seed: int, bars: int) -> np.ndarray:
    """Closes ``[bars]`` of a driftless geometric random walk, history ``seed``."""
    rng = np.random.default_rng([0x56455244, seed])
    return 100.0 * np.exp(np.cumsum(0.01 * rng.standard_normal(bars)))


def drift_t(close: np.ndarray) -> float:
    """The t-statistic of the mean log return over the test span (after the warm-up)."""
    r = np.diff(np.log(close[WARMUP - 1:]))
    return float(r.mean() / r.std(ddof=1) * np.sqrt(r.size))


def extreme_seeds(count: int, bars: int, start: int) -> list[int]:
    """``count`` seeds from ``start`` on whose test span has |t| > 2, half falling and half rising."""
    falling, rising, seed = [], [], start
    while len(falling) < count // 2 or len(rising) < count - count // 2:
        t = drift_t(walk_close(seed, bars))
        if t < -2 and len(falling) < count // 2:
            falling.append(seed)
        elif t > 2 and len(rising) < count - count // 2:
            rising.append(seed)
        seed += 1
    return falling + rising


def market(close: np.ndarray) -> Any:
    from envs.data import MarketData
    open_ = np.r_[100.0, close[:-1]]
    stamps = pd.bdate_range("2000-01-03", periods=close.size).values
    return MarketData(source="walk.csv", timestamps=stamps, open=open_, high=np.maximum(open_, close),
                      low=np.minimum(open_, close), close=close, volume=np.ones(close.size), bar_seconds=86400.0)


def policy_lots(name: str, close: np.ndarray, decisions: int, env: Any, seed: int) -> np.ndarray:
    from ppo_lstm.walkforward.policies import ma_crossover_lots
    k = env.max_position
    if name == "flat":
        return np.zeros(decisions, np.int64)
    if name in ("long", "short"):
        return np.full(decisions, k if name == "long" else -k, np.int64)
    if name == "ma_10_40":
        return ma_crossover_lots(close, WARMUP - 1, decisions, env)
    rng = np.random.default_rng([0x52414E44, seed])
    lots = np.empty(decisions, np.int64)
    current = 0
    for i in range(decisions):
        if i == 0 or rng.random() < 0.05:
            current = int(rng.integers(-k, k + 1))
        lots[i] = current
    return lots


def one_walk(task: tuple[int, str, int, float]) -> dict[str, Any]:
    """Every policy's verdict on walk ``seed`` (its test span: the bars after the warm-up)."""
    import torch

    from envs.config import EnvConfig
    from ppo_lstm.evaluation.backtest import backtest_history
    from ppo_lstm.stats import edge_verdict, mean_excess_test
    from ppo_lstm.walkforward.policies import RulePolicy
    from ppo_lstm.walkforward.results import on_starting_capital
    from ppo_lstm.walkforward.trading import returns_of
    torch.set_num_threads(1)
    seed, kind, bars, fee = task
    close = walk_close(seed, bars)
    data = market(close)
    env = EnvConfig(fee_bps=fee, slippage_bps=0.0)
    decisions = bars - WARMUP + 1
    ppy = float(data.periods_per_year)
    row: dict[str, Any] = {"seed": seed, "kind": kind, "t": drift_t(close),
                           "test_return": float(close[-1] / close[WARMUP - 1] - 1)}
    for name in POLICIES:
        lots = policy_lots(name, close, decisions, env, seed)
        result = backtest_history(RulePolicy(env, lots), env, data, WARMUP - 1, bars, greedy=True)
        agent, bench = returns_of(result.equity), returns_of(result.buy_and_hold_equity)
        one_fold = np.ones(agent.size)
        verdict = edge_verdict(on_starting_capital(agent, one_fold), on_starting_capital(bench, one_fold), ppy,
                               n_trials=1, describe=False)
        old = mean_excess_test(agent, bench, ppy, reps=999)
        row[name] = {"shown": verdict.shown, "p": verdict.p_value,
                     "boot_p": None if verdict.bootstrap is None else verdict.bootstrap.p_value,
                     "alpha": verdict.alpha.alpha_annual, "beta": verdict.alpha.beta,
                     "old_shown": bool(old.p_value < 0.05)}
    return row


def rates(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    return {name: float(np.mean([r[name][key] for r in rows])) if rows else float("nan") for name in POLICIES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walks", type=int, default=1000)
    parser.add_argument("--extreme", type=int, default=300)
    parser.add_argument("--bars", type=int, default=2060, help="bars per walk (the first 60 are the warm-up)")
    parser.add_argument("--fee-bps", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    tasks = [(s, "random", args.bars, args.fee_bps) for s in range(args.walks)]
    tasks += [(s, "extreme", args.bars, args.fee_bps) for s in extreme_seeds(args.extreme, args.bars, 10**6)]
    with Pool(args.processes) as pool:
        rows = pool.map(one_walk, tasks, chunksize=4)
    groups = {"random walks": [r for r in rows if r["kind"] == "random"],
              "extreme, falling (t < -2)": [r for r in rows if r["kind"] == "extreme" and r["t"] < 0],
              "extreme, rising (t > 2)": [r for r in rows if r["kind"] == "extreme" and r["t"] > 0],
              "random walks with |t| > 2": [r for r in rows if r["kind"] == "random" and abs(r["t"]) > 2]}
    print(f"# python bench/verdict_false_edges.py --walks {args.walks} --extreme {args.extreme} --bars {args.bars} "
          f"--fee-bps {args.fee_bps:g} --processes {args.processes}")
    print(f"# {args.bars - WARMUP} test bars a walk; one trial; share of walks where the edge is claimed")
    header = f"{'walks':28s} {'n':>5s} " + " ".join(f"{p:>9s}" for p in POLICIES)
    summary: dict[str, Any] = {}
    for label, group in groups.items():
        new, old = rates(group, "shown"), rates(group, "old_shown")
        summary[label] = {"n": len(group), "verdict": new, "old_rule": old,
                          "median_test_return": float(np.median([r["test_return"] for r in group])) if group else None}
        print(f"\n{label}: {len(group)} walks, median test-span return "
              f"{100 * summary[label]['median_test_return']:+.1f} %" if group else f"\n{label}: none")
        print(header)
        print(f"{'verdict: shown':28s} {len(group):5d} " + " ".join(f"{100 * new[p]:8.1f}%" for p in POLICIES))
        print(f"{'old rule (mean excess)':28s} {len(group):5d} " + " ".join(f"{100 * old[p]:8.1f}%" for p in POLICIES))
    limit = 0.065
    checked = [g for g in ("random walks", "extreme, falling (t < -2)", "extreme, rising (t > 2)")]
    holds = all(summary[g]["verdict"][p] <= limit for g in checked for p in POLICIES)
    fixed_never = all(not r[p]["shown"] for r in rows for p in FIXED)
    wall = time.perf_counter() - start
    print(f"\nclaim (every policy at most {100 * limit:.1f} % in each group, fixed exposures never): "
          f"{'holds' if holds and fixed_never else 'fails'}; wall {wall:.0f} s")
    print(json.dumps({"bench": "verdict_false_edges", "walks": args.walks, "extreme": args.extreme,
                      "test_bars": args.bars - WARMUP, "fee_bps": args.fee_bps, "groups": summary,
                      "fixed_exposures_never_shown": fixed_never, "claim_holds": bool(holds and fixed_never),
                      "wall_s": wall}))


if __name__ == "__main__":
    main()
