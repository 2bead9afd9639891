"""Defaults measured on a family of markets: each flag set's share of every variant's ceiling,
out of sample, as a distribution (median and worst decile), per market kind and over all.

The family (``bench/family_draw.py``): variants of the regime, ou and signal markets with
their parameters drawn from a fixed seed, costs 1 to 20 bps; every 4th variant of a kind is
HELD OUT (no default may be chosen on it), the rest are the tuning set (``--split``). Each
variant is a CSV training file and a later, disjoint test file of the same path.

The ceiling (``bench/family_ceiling.py``): the known-model rule (the Bayes filter on regime,
the OU's expected return on ou, the column on signal) with its hysteresis band tuned on
the training file, scored on the test file. The agent: ``train-ppo-lstm --data TRAIN`` with
the market's flags (``--fee-bps F --slippage-bps 0``, and ``--features signal,noise`` on the
signal kind), the flag set's and the budget's, in-process (``bench/family_jobs.py``), scored
greedily on the test file. Both are scored on the test file's 160 episodes of 128 bars (each
from flat, after 4,096 bars of warm-up): net log return per bar, bps, after the fee. A run's
share is its score over the variant's ceiling's; the median and worst decile (10th
percentile) are over every (variant, seed) run of a kind, or of the whole family.

Budget: ``--train-for`` (equal wall time, the default: flags that change the speed are
compared at what they do in the same time) or ``--episodes`` (equal episodes).

    python bench/market_family.py                          # today's defaults, 4 tuning variants per kind (~30 min)
    python bench/market_family.py --variants 4 --seeds 2 --train-for 45s \\
        --flags defaults="" --flags fw256="--feature-window 256"   # 27 min: bench/results/market_family.txt
    python bench/market_family.py --split held-out         # the test set: for checking a choice, never making it
    python bench/market_family.py --quick                  # smoke run: 1 variant per kind, 1 seed, 10 s
    python bench/market_family.py --kinds signal --variants-list signal-02,signal-04 \
        --flags defaults="" --flags x2="--train-for 120s"  # named variants; a set's own budget wins
    python bench/market_family.py --episodes 1000 --flags defaults="" \
        --flags fee2="--train-fee-mult 2"                  # the bench's own: train at 2x the fee, score at it

On the signal kind each run also reports how its positions follow the ``signal`` column on the
test file (``family_jobs.position_vs_column``: exposure, sign agreement, correlation); the table
prints the median correlation.

Runs ``--jobs`` training processes at once (one torch thread each), the ceilings first.
Prints a table, then ONE JSON line. Exits 1 if a training run failed (the others are reported).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import as_completed  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.family_ceiling import ceiling  # noqa: E402
from bench.family_draw import (CHUNKS, FAMILY_SEED, FEATURES, KINDS, VARIANTS_PER_KIND, draw_family,  # noqa: E402
                               pick, write_extra_tests, write_variant)
from bench.family_jobs import run_family_job  # noqa: E402
from bench.job_pool import job_pool  # noqa: E402
from envs.data import load_ohlcv  # noqa: E402

WORST = 10  # the worst decile: the 10th percentile of the shares
PAIRED_MARGIN = 0.02  # a paired run counts as better or worse beyond this difference of shares


def parse_flag_sets(items: list[str]) -> dict[str, list[str]]:
    """``NAME="--flag value ..."`` pairs to {name: argv}; today's defaults alone without any."""
    if not items:
        return {"defaults": []}
    sets: dict[str, list[str]] = {}
    for item in items:
        name, sep, flags = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--flags takes NAME=\"--flag value ...\", not {item!r}")
        if name.strip() in sets:
            raise ValueError(f"flag set {name.strip()!r} is given twice")
        sets[name.strip()] = shlex.split(flags)
    return sets


def distribution(shares: list[float]) -> dict[str, Optional[float]]:
    """Median, worst decile (10th percentile), worst and mean of a list of shares."""
    if not shares:
        return {"runs": 0, "median": None, "worst_decile": None, "worst": None, "mean": None}
    a = np.asarray(shares, np.float64)
    return {"runs": len(a), "median": float(np.median(a)), "worst_decile": float(np.percentile(a, WORST)),
            "worst": float(a.min()), "mean": float(a.mean())}


def summarise(variants: list[dict[str, Any]], flag_sets: dict[str, list[str]]) -> dict[str, Any]:
    """Per flag set: the distribution of shares per kind and over all, and the mean steps and seconds."""
    out: dict[str, Any] = {}
    for name in flag_sets:
        runs = [(v["kind"], r) for v in variants for r in v["runs"].get(name, []) if "share" in r]
        kinds = list(dict.fromkeys(v["kind"] for v in variants))
        out[name] = {kind: distribution([r["share"] for k, r in runs if k == kind]) for kind in kinds}
        out[name]["all"] = distribution([r["share"] for _, r in runs])
        out[name]["mean_env_steps"] = float(np.mean([r["env_steps"] for _, r in runs])) if runs else None
        out[name]["mean_train_s"] = float(np.mean([r["wall_s"] for _, r in runs])) if runs else None
        ses = [r["share_se"] for _, r in runs if "share_se" in r]
        out[name]["median_share_se"] = float(np.median(ses)) if ses else None
        corr = [r["corr"] for _, r in runs if "corr" in r]  # the signal kind's: position against the column
        out[name]["median_corr"] = float(np.median(corr)) if corr else None
    return out


def paired(variants: list[dict[str, Any]], flag_sets: dict[str, list[str]]) -> dict[str, Any]:
    """Each flag set after the first against the first, run by run (same variant and seed): per kind
    and over all, the median of the share's differences and how many runs are better or worse by
    more than :data:`PAIRED_MARGIN`."""
    names = list(flag_sets)
    out: dict[str, Any] = {}
    for name in names[1:]:
        diffs: dict[str, list[float]] = {}
        for v in variants:
            base = {r["seed"]: r["share"] for r in v["runs"].get(names[0], []) if "share" in r}
            for r in v["runs"].get(name, []):
                if "share" in r and r["seed"] in base:
                    diffs.setdefault(v["kind"], []).append(r["share"] - base[r["seed"]])
        diffs["all"] = [d for kind in list(diffs) for d in diffs[kind]]
        out[name] = {kind: {"runs": len(d), "median_diff": float(np.median(d)) if d else None,
                            "better": sum(x > PAIRED_MARGIN for x in d), "worse": sum(x < -PAIRED_MARGIN for x in d)}
                     for kind, d in diffs.items()}
    return out


def pick_named(variants: list[Any], names: str, split: str) -> list[Any]:
    """The variants named in the comma list ``names``, in the family's order; ValueError for an
    unknown name or one outside ``split`` (a held-out name needs ``--split held-out`` or ``all``)."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = {v.name: v for v in variants}
    for n in wanted:
        if n not in known:
            raise ValueError(f"unknown variant {n!r} (drawn: {', '.join(known)})")
        if split not in ("all", known[n].split):
            raise ValueError(f"{n} is {known[n].split}, not in --split {split}")
    return [v for v in variants if v.name in wanted]


def _f(x: Optional[float], spec: str) -> str:
    return format(x, spec) if x is not None else "-".rjust(len(format(0.0, spec)))


def print_table(report: dict[str, Any]) -> None:
    names = list(report["flag_sets"])
    print(f"{'variant':<11}{'split':<10}{'parameters':<54}{'ceiling':>8}{'band':>7}  "
          + "  ".join(f"{n[:22]:>22}" for n in names))
    for v in report["variants"]:
        cells = []
        for n in names:
            shares = [r.get("share") for r in v["runs"].get(n, [])]
            cells.append(" ".join("FAIL" if s is None else f"{s:.2f}" for s in shares).rjust(22))
        print(f"{v['name']:<11}{v['split']:<10}{v['describe']:<54}{v['ceiling']['bps_per_bar']:8.2f}"
              f"{v['ceiling']['threshold_bps']:7.1f}  " + "  ".join(cells))
    print("\n(ceiling: the known-model rule's net bps per bar on the test episodes; band: its hysteresis band, "
          "bps of expected return, tuned on the training file; cells: each seed's share of the ceiling)\n")
    print(f"{'flags':<24}{'kind':<8}{'runs':>5}{'median':>8}{'worst 10%':>10}{'worst':>7}{'steps':>10}{'train s':>8}"
          f"{'corr':>7}")
    for n in names:
        s = report["summary"][n]
        for kind in [k for k in s if k not in ("mean_env_steps", "mean_train_s", "median_corr", "median_share_se")]:
            d = s[kind]
            steps = _f(s["mean_env_steps"], "10.0f") if kind == "all" else " " * 10
            secs = _f(s["mean_train_s"], "8.1f") if kind == "all" else " " * 8
            corr = _f(s.get("median_corr"), "7.2f") if kind == "signal" else ""
            print(f"{n[:23]:<24}{kind:<8}{d['runs']:5d}{_f(d['median'], '8.3f')}{_f(d['worst_decile'], '10.3f')}"
                  f"{_f(d['worst'], '7.3f')}{steps}{secs}{corr}")
        print(f"{'':<24}flags: {' '.join(report['flag_sets'][n]) or '(none: the defaults)'}")
    if report["paired"]:
        print(f"\npaired with {names[0]} (same variant and seed): the median difference of the shares, and the "
              f"runs better / worse by more than {PAIRED_MARGIN}")
        for n, kinds in report["paired"].items():
            print(f"{n[:23]:<24}" + "  ".join(f"{k} {_f(d['median_diff'], '+.3f')} ({d['better']}/{d['worse']})"
                                             for k, d in kinds.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma list of {', '.join(KINDS)}")
    parser.add_argument("--variants", type=int, default=4, help="variants per kind: the first N of --split")
    parser.add_argument("--variants-list", metavar="NAMES",
                        help="comma list of variant names instead of the first --variants, e.g. signal-02,signal-04")
    parser.add_argument("--split", choices=("tuning", "held-out", "all"), default="tuning",
                        help="which variants: the tuning set, the held-out test set, or both")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per variant and flag set")
    parser.add_argument("--first-seed", type=int, default=1)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--train-for", default=None, help="wall time per training run (equal wall time; default 60s)")
    budget.add_argument("--episodes", type=int, help="episodes per training run (equal episodes) instead")
    parser.add_argument("--flags", action="append", default=[], metavar='NAME="FLAGS"',
                        help='a flag set to compare, e.g. fw256="--feature-window 256" (repeatable; default: '
                             'defaults="", today\'s defaults)')
    parser.add_argument("--family-seed", type=int, default=FAMILY_SEED)
    parser.add_argument("--pick", choices=("final", "best"), default="final",
                        help="which weights of a run to score: the final ones, or best.pt, the trainer's pick on its "
                             "own hold-out (the training file's last 20 %%) over the checkpoints every "
                             "--checkpoint-interval episodes, as a user's run keeps it (the final score beside it)")
    parser.add_argument("--test-files", type=int, default=1, metavar="K",
                        help=f"score on K test files of each variant, {CHUNKS} episodes each: the first after the "
                             f"training file, K-1 more on fresh paths of the same law (a run's share is then "
                             f"about sqrt(K) times less noisy)")
    parser.add_argument("--jobs", type=int, default=2, help="training processes at once (1 torch thread each)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 variant per kind, 1 seed, 10 s each")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line here")
    args = parser.parse_args()
    if args.quick:
        args.variants, args.seeds, args.train_for, args.episodes = 1, 1, "10s", None
    if args.episodes is None and args.train_for is None:
        args.train_for = "60s"
    try:
        flag_sets = parse_flag_sets(args.flags)
    except ValueError as err:
        parser.error(str(err))
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    for kind in kinds:
        if kind not in KINDS:
            parser.error(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    if not 1 <= args.variants <= VARIANTS_PER_KIND:
        parser.error(f"--variants must be 1..{VARIANTS_PER_KIND}")
    if args.test_files < 1:
        parser.error(f"--test-files must be at least 1, got {args.test_files}")
    budget_argv = ["--train-for", args.train_for] if args.train_for else ["--episodes", str(args.episodes)]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))

    start = time.perf_counter()
    family = draw_family(args.family_seed, VARIANTS_PER_KIND, kinds)
    try:
        chosen = (pick_named(family, args.variants_list, args.split) if args.variants_list
                  else pick(family, args.split, args.variants))
    except ValueError as err:
        parser.error(str(err))
    tmp = tempfile.TemporaryDirectory()
    rows: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for v in chosen:  # the files and the ceilings first, before any training shares the cores
        train_csv, test_csv = write_variant(v, Path(tmp.name))
        extra_csvs = write_extra_tests(v, Path(tmp.name), args.test_files - 1)
        features = FEATURES.split(",") if v.kind == "signal" else ()
        rule = ceiling(v, load_ohlcv(train_csv, features=features), load_ohlcv(test_csv, features=features),
                       [load_ohlcv(path, features=features) for path in extra_csvs])
        rule_bps = rule.pop("episode_bps")  # [episodes]: each run's paired noise, not the report's
        print(f"{v.name} ({v.split}): {v.describe()}; ceiling {rule['bps_per_bar']:.3f} bps/bar "
              f"(band {rule['threshold_bps']:g} bps)", file=sys.stderr, flush=True)
        rows.append({**v.to_dict(), "describe": v.describe(), "ceiling": rule, "runs": {}})
        for seed in seeds:  # flag sets side by side, so each pair trains beside the same load; a set's own
            # --train-for or --episodes comes after the budget's and so overrides it (e.g. x2="--train-for 90s")
            jobs += [{"variant": v.name, "flags": name, "seed": seed, "train_csv": str(train_csv),
                      "test_csv": str(test_csv), "test_csvs": [str(test_csv), *map(str, extra_csvs)],
                      "rule_bps": rule_bps, "argv": [*v.flags(), *budget_argv, *extra], "pick": args.pick}
                     for name, extra in flag_sets.items()]
    ceilings_s = time.perf_counter() - start
    done: list[dict[str, Any]] = []
    with job_pool(args.jobs) as pool:
        for future in as_completed([pool.submit(run_family_job, job) for job in jobs]):
            d = future.result()
            done.append(d)
            said = d.get("failed") or f"{d['result']['bps_per_bar']:.3f} bps/bar, {d['result']['env_steps']} steps"
            print(f"[{len(done)}/{len(jobs)}] {d['variant']} {d['flags']} seed {d['seed']}: {said}", file=sys.stderr,
                  flush=True)
    done.sort(key=lambda d: (d["variant"], d["flags"], d["seed"]))
    tmp.cleanup()

    by_name = {r["name"]: r for r in rows}
    for d in done:
        row = by_name[d["variant"]]
        run = {"seed": d["seed"], "failed": d["failed"]} if "failed" in d else dict(d["result"])
        ref = row["ceiling"]["bps_per_bar"]
        if "failed" not in d and ref > 0:
            run["share"] = run["bps_per_bar"] / ref
            run["share_se"] = run["diff_se_bps"] / ref  # the share's noise against the ceiling's on these bars
        row["runs"].setdefault(d["flags"], []).append(run)
    report: dict[str, Any] = {
        "bench": "market_family", "family_seed": args.family_seed, "split": args.split,
        "held_out": [r["name"] for r in rows if r["split"] == "held-out"], "variants_per_kind": args.variants,
        "variants_list": [r["name"] for r in rows] if args.variants_list else None,
        "seeds": seeds, "test_files": args.test_files, "test_episodes": args.test_files * CHUNKS, "budget": {"train_for": args.train_for} if args.train_for else {"episodes": args.episodes},
        "flag_sets": flag_sets, "pick": args.pick, "quick": args.quick, "variants": rows,
        "summary": summarise(rows, flag_sets), "paired": paired(rows, flag_sets),
        "ceilings_s": ceilings_s, "wall_s": time.perf_counter() - start}
    print_table(report)
    how = f"--train-for {args.train_for} (equal wall time)" if args.train_for else f"--episodes {args.episodes}"
    how += "; best.pt scored" if args.pick == "best" else ""
    print(f"\n{len(rows)} variants ({args.split}), seeds {seeds}, {how}; wall time {report['wall_s']:.0f}s "
          f"(files and ceilings {ceilings_s:.0f}s); share = net log return per bar over the ceiling's, on "
          f"{args.test_files * CHUNKS} test episodes ({args.test_files} test file(s)); median standard error of a "
          f"run's share: " + ", ".join(f"{n} {_f(report['summary'][n]['median_share_se'], '.3f')}" for n in flag_sets))
    line = json.dumps(report, default=float)
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    failed = [d for d in done if "failed" in d]
    if failed:
        print(f"{len(failed)} training run(s) failed: " + "; ".join(
            f"{d['variant']} {d['flags']} seed {d['seed']}: {d['failed']}" for d in failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
