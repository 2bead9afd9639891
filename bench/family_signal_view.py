"""What the agent sees of a family signal variant's column (no training): the raw ``signal``
against its rolling z-score (``envs.data.features.feature_zscores``, the observation's own
rule) over each ``--windows`` length, on the variant's training file.

Per variant and window: the lag-1 and lag-``LAG`` autocorrelations and the half-life they imply
(``ln 0.5 / ln acf1``); ``absorbed``, the share of the column's variance its rolling mean holds
(``var(mean) / var(x)``: the level the z-score subtracts); ``corr``, the z-score's correlation
with the raw column; ``agree``, the share of bars whose z-score has the raw column's sign;
``ic``, the correlation with the next bar's log return, and ``ic kept``, z's over the raw's;
``rule``, the share of the variant's ceiling (``bench/family_ceiling.py``, the rule on the raw
column) that the same rule earns on the z-score instead, its band tuned on the training file and
the z-score computed on each file alone, as the agent's observation is: the observation's own
ceiling.
An AR(1) of half-life h has ``var(mean_N) / var(x) ~ (1 + phi) / ((1 - phi) N)`` for N >> h:
about 2.9 h / N, so a window a few times the half-life absorbs a large share of a slow signal.

    python bench/family_signal_view.py                             # the slow, weak tuning members
    python bench/family_signal_view.py --variants-list signal-00,signal-01 --windows 256,1024

Prints a table, then ONE JSON line.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.family_ceiling import ceiling  # noqa: E402
from bench.family_draw import FEATURES, TEST_WARMUP, draw_family, write_variant  # noqa: E402
from bench.market_family import pick_named  # noqa: E402
from envs.data import load_ohlcv  # noqa: E402
from envs.data.features import feature_zscores  # noqa: E402

SLOW_WEAK = "signal-02,signal-04,signal-06,signal-10,signal-12"  # tuning: half-life >= 36, strength <= 0.06
LAG = 10


def acf(x: np.ndarray, lag: int) -> float:
    """The lag-``lag`` autocorrelation of ``x``."""
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def half_life(a1: float) -> float:
    """The half-life (bars) of an AR(1) with lag-1 autocorrelation ``a1`` (inf if not in (0, 1))."""
    return math.log(0.5) / math.log(a1) if 0.0 < a1 < 1.0 else math.inf


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` values at every row from ``window - 1`` on."""
    c = np.concatenate(([0.0], np.cumsum(x)))
    return (c[window:] - c[:-window]) / window


def view(raw: np.ndarray, nxt: np.ndarray, windows: list[int], skip: int) -> list[dict[str, Any]]:
    """The rows of one column: the raw one (window None), then its z-score over each window;
    every figure over the bars from ``skip`` on (every window full)."""
    rows = []
    ic_raw = float(np.corrcoef(raw[skip:], nxt[skip:])[0, 1])
    for window in [None, *windows]:
        x = raw if window is None else feature_zscores(raw[:, None], window)[:, 0].astype(np.float64)
        a1 = acf(x[skip:], 1)
        ic = float(np.corrcoef(x[skip:], nxt[skip:])[0, 1])
        row = {"window": window, "acf1": a1, f"acf{LAG}": acf(x[skip:], LAG), "half_life": half_life(a1),
               "corr": float(np.corrcoef(x[skip:], raw[skip:])[0, 1]),
               "agree": float(np.mean(np.sign(x[skip:]) == np.sign(raw[skip:]))), "ic": ic, "ic_kept": ic / ic_raw}
        if window is not None:
            row["absorbed"] = float(np.var(rolling_mean(raw, window)[skip - window + 1:]) / np.var(raw[skip:]))
        rows.append(row)
    return rows


def rule_shares(v: Any, train: Any, test: Any, windows: list[int]) -> dict[str, float]:
    """The ceiling (bps per bar) and, per window, the rule's share of it on the z-scored column."""
    top = ceiling(v, train, test)["bps_per_bar"]
    out = {"ceiling": top}
    for w in windows:
        on_z = [replace(d, features=np.column_stack([feature_zscores(d.features[:, :1], w)[:, 0].astype(np.float64),
                                                     d.features[:, 1:]])) for d in (train, test)]
        out[str(w)] = ceiling(v, *on_z)["bps_per_bar"] / top
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants-list", default=SLOW_WEAK, help="comma list of signal variants (tuning split)")
    parser.add_argument("--no-rule", dest="rule", action="store_false",
                        help="skip the rule on the z-score (its ceilings take ~10 s a window)")
    parser.add_argument("--windows", default="256,1024,4096", help="z-score windows, comma list")
    args = parser.parse_args()
    windows = [int(w) for w in args.windows.split(",")]
    skip = max(TEST_WARMUP, *windows)
    chosen = pick_named(draw_family(kinds=("signal",)), args.variants_list, "tuning")
    report: dict[str, Any] = {"bench": "family_signal_view", "windows": windows, "skip": skip, "variants": []}
    print(f"{'variant':<11}{'half-life':>10}{'strength':>9}{'window':>8}{'acf1':>8}{f'acf{LAG}':>8}{'h-l':>7}"
          f"{'absorbed':>9}{'corr':>7}{'agree':>7}{'ic':>8}{'ic kept':>8}{'rule':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for v in chosen:
            train_csv, test_csv = write_variant(v, Path(tmp))
            data = load_ohlcv(train_csv, features=FEATURES.split(","))
            test = load_ohlcv(test_csv, features=FEATURES.split(",")) if args.rule else None
            assert data.features is not None
            close = np.asarray(data.close, np.float64)
            nxt = np.append(np.diff(np.log(close)), 0.0)  # bar t+1's log return beside bar t's column
            raw = np.asarray(data.features[:, 0], np.float64)
            rows = view(raw[:-1], nxt[:-1], windows, skip)
            shares = rule_shares(v, data, test, windows) if test is not None else {}
            for r in rows:
                r["rule"] = 1.0 if r["window"] is None and shares else shares.get(str(r["window"]))
            report["variants"].append({"name": v.name, "params": v.params, "rows": rows})
            for r in rows:
                w = "raw" if r["window"] is None else str(r["window"])
                print(f"{v.name:<11}{v.params['half_life']:10.0f}{v.params['strength']:9.3f}{w:>8}{r['acf1']:8.4f}"
                      f"{r[f'acf{LAG}']:8.3f}{r['half_life']:7.1f}{r.get('absorbed', 0.0):9.3f}{r['corr']:7.3f}"
                      f"{r['agree']:7.3f}{r['ic']:8.4f}{r['ic_kept']:8.2f}"
                      + (f"{r['rule']:6.2f}" if r.get("rule") is not None else ""))
    print(f"\n(training file, bars {skip}..; absorbed: var(rolling mean) / var(column); corr, agree: the z-score "
          f"against the raw column; ic: correlation with the next bar's log return; rule: the known-signal rule's "
          f"share of its ceiling when it reads the z-score instead of the raw column, out of sample)")
    print(json.dumps(report, default=float))


if __name__ == "__main__":
    main()
