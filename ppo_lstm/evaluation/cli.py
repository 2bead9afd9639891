"""Evaluate a checkpoint: a backtest beside buy-and-hold, on a data file or on simulated markets.

    python -m ppo_lstm.evaluate --checkpoint checkpoints --data prices.csv --start 2023-01-01
    python -m ppo_lstm.evaluate --checkpoint checkpoints/best.pt --episodes 100 --seed 1 --json
    python -m ppo_lstm.evaluate --config backtest.yaml --seed 2

(also installed as ``evaluate-ppo-lstm``; ``--config`` reads its flags from a YAML or TOML
file, see :mod:`ppo_lstm.config.files`). The engine is ``ppo_lstm.evaluation.backtest``, the
outputs ``ppo_lstm.evaluation.report``. Bad input ends with one ``error: ...`` line on stderr and
exit code 2. ``evaluate()`` below plays one episode per seed (the learning test uses it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, Optional

import torch

from envs.config import MARKETS, EnvConfig
from envs.data import DataError, MarketData, date_span, load_ohlcv
from envs.data.instruments import data_paths, instrument_name

from ..algo.agent import RecurrentActorCritic
from .backtest import BacktestResult, backtest_history, backtest_simulated, first_decision_bar
from .loading import checkpoint_file, load_policy_and_data, mark_training_bars, policy_device
from ..config.schema import TrainConfig
from ..config.flags import add_config_options, settings_or_exit
from ..errors import EXIT_USAGE, OneLineParser, Switch, UsageError
from .report import (format_instruments_table, format_table, instruments_dict, plot, report_dict, write_equity_csv,
                     write_instruments_csv)

DEFAULT_EPISODES = 100
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@torch.no_grad()
def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog or "python -m ppo_lstm.evaluate",
        description="Backtest a trained checkpoint beside buy-and-hold (same bars, costs and lot size): on a "
                    "data file as one continuous episode, or on the checkpoint's simulated market.",
        epilog="Final positions are marked to market at the last close, without exit costs, for the agent and "
               "buy-and-hold alike. Bad input: one 'error:' line on stderr, exit code 2.")
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, type=Path, metavar="PATH",
                        help="a .pt file, or a checkpoint dir (its best.pt, else the checkpoint 'latest' names)")
    where = parser.add_argument_group("market: a data file, or the checkpoint's simulated market")
    where.add_argument("--data", type=Path, metavar="PATH", nargs="+",
                       help="OHLCV history (CSV, CSV.gz or Parquet), traded as one continuous episode; several files "
                            "(or directories of them) are several instruments, each backtested on its own and "
                            "reported in one row, beside an equal-weight mean row")
    where.add_argument("--start", metavar="DATE", help="with --data: first bar of the slice (inclusive)")
    where.add_argument("--end", metavar="DATE", help="with --data: last bar of the slice (inclusive; a date "
                       "without a time of day includes that whole day)")
    where.add_argument("--date-format", metavar="FMT", help="with --data: strftime format of the time column "
                       "(default: detected)")
    where.add_argument("--episodes", type=int, metavar="N", help="without --data: simulated episodes of the "
                       f"training length, chained into one curve (default: {DEFAULT_EPISODES})")
    where.add_argument("--market", choices=MARKETS, metavar="NAME", help="without --data: the simulated market, "
                       f"one of {', '.join(MARKETS)} (default: the checkpoint's; a checkpoint trained on --data "
                       "needs it named, or --data)")
    where.add_argument("--seed", type=int, default=0, metavar="S",
                       help="seed of the simulated paths (disjoint from training's) and of --sample (default: 0)")
    policy = parser.add_argument_group("policy and costs")
    policy.add_argument("--sample", action=Switch,
                        help="sample actions from the policy (default: greedy, the most likely action)")
    policy.add_argument("--fee-bps", type=float, metavar="BPS", help="fee per traded notional, overriding "
                        "the checkpoint's")
    policy.add_argument("--slippage-bps", type=float, metavar="BPS", help="adverse fill slippage, overriding "
                        "the checkpoint's")
    policy.add_argument("--device", default="cpu", metavar="DEV", help="torch device to run the policy on "
                        "(cpu, cuda, cuda:1, ...)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action=Switch, help="print one JSON object instead of the table")
    out.add_argument("--equity-csv", type=Path, metavar="PATH",
                     help="write time,close,position,equity,buy_and_hold_equity, one row per bar (several "
                          "instruments: one file, an instrument column first, each instrument's rows in turn)")
    out.add_argument("--plot", type=Path, metavar="PNG", help="draw price with trades, equity and drawdown "
                     "(needs matplotlib: the 'plot' extra; several instruments: one PNG each, named "
                     "<PNG stem>-<instrument file stem>.png, or -<file name>.png where two share a stem)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """UsageError (one line) for flags that do not go together or cannot work."""
    if args.data is None:
        for flag in ("start", "end", "date_format"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} selects bars of --data; pass --data too")
    elif args.episodes is not None:
        raise UsageError("--episodes is for simulated evaluation; with --data the whole slice is one episode")
    elif args.market is not None:
        raise UsageError("--market is for simulated evaluation; with --data the file is the market")
    if args.episodes is not None and args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
    for flag in ("fee_bps", "slippage_bps"):
        value = getattr(args, flag)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"--{flag.replace('_', '-')} must be a number >= 0, got {value}")
    for flag in ("equity_csv", "plot"):
        path = getattr(args, flag)
        if path is not None and not (path.parent if str(path.parent) else Path(".")).is_dir():
            raise UsageError(f"cannot write --{flag.replace('_', '-')} {path}: no directory {path.parent}")
        if path is not None and path.is_dir():
            raise UsageError(f"--{flag.replace('_', '-')} {path} is a directory; name a file")


def _plain(text: str) -> str:
    """``text`` as one line without terminal escapes (torch's load errors carry bold markers)."""
    return " ".join(_ANSI.sub("", text).split())


def env_for_evaluation(config: TrainConfig, args: argparse.Namespace) -> EnvConfig:
    """The checkpoint's env settings with --fee-bps / --slippage-bps applied."""
    env = config.env
    if args.fee_bps is not None:
        env = replace(env, fee_bps=args.fee_bps)
    if args.slippage_bps is not None:
        env = replace(env, slippage_bps=args.slippage_bps)
    return env


def load_slice(args: argparse.Namespace, window: int,
               features: tuple[str, ...] = ()) -> tuple[MarketData, int, int]:
    """The --data file (with the checkpoint's ``features`` columns) and the bars ``lo..hi-1``
    of --start/--end (``lo``: the first bar at or after --start, where the backtest decides
    first when the file has the history); UsageError when unusable."""
    try:
        data = load_ohlcv(args.data, args.date_format, features=features)
        lo, hi = date_span(data, args.start, args.end)
    except DataError as err:
        raise UsageError(str(err)) from None
    first, late = first_decision_bar(data, lo, window, bool(features))
    if hi - first < 2:
        chosen = "--start/--end select" if args.start or args.end else "the file has"
        why = f"; {late}" if late else ""
        raise UsageError(f"{args.data}: {chosen} {hi - lo} bar{'s' if hi - lo != 1 else ''}, {max(0, hi - first)} "
                         f"of them from the first bar "
                         f"a decision can be taken at; a backtest needs at least 2 (the first decision bar and a "
                         f"bar to trade){why}; widen --start/--end or use a longer file")
    return data, lo, hi


class Prepared(NamedTuple):
    """What every backtest of the flags needs (:func:`prepare`)."""

    path: Path  # the checkpoint file
    agent: RecurrentActorCritic  # on --device
    env: EnvConfig  # the checkpoint's env settings with the cost overrides (and --market)
    device: torch.device
    config: TrainConfig  # the checkpoint's training config
    trained_on: Optional[list[dict]]  # the fingerprint of its training data, when it records one


def prepare(args: argparse.Namespace) -> Prepared:
    """The checkpoint of the flags, loaded; UsageError when unusable."""
    check_args(args)
    device = policy_device(args.device)
    path = checkpoint_file(args.checkpoint)
    agent, config, trained_on = load_policy_and_data(path, device)
    env = env_for_evaluation(config, args)
    if args.market is not None:
        env = replace(env, market=args.market)
    return Prepared(path, agent, env, device, config, trained_on)


def run(args: argparse.Namespace) -> tuple[BacktestResult, str]:
    """The backtest the flags ask for, and the report's title."""
    path, agent, env, device, config, trained_on = prepare(args)
    actions = "sampled actions" if args.sample else "greedy actions"
    if args.data is not None:
        data, lo, hi = load_slice(args, env.window, env.feature_names)
        result = backtest_history(agent, env, data, lo, hi, greedy=not args.sample, seed=args.seed, device=device)
        result = mark_training_bars(result, trained_on, instrument_name(str(args.data)), data)
        return result, f"Backtest of {path} on {args.data} ({actions})"
    if env.features:
        raise UsageError(f"{path} was trained with --features {env.features}, columns of a data file; a simulated "
                         f"market has none: pass --data with a file holding those columns")
    if config.data is not None and args.market is None:
        trained = " ".join(config.data) if isinstance(config.data, (list, tuple)) else str(config.data)
        raise UsageError(f"{path} was trained on --data {trained}, and a simulated market is a market it never saw: "
                         f"pass --data with a file to backtest it on, or name --market to backtest it on simulated "
                         f"paths all the same")
    episodes = DEFAULT_EPISODES if args.episodes is None else args.episodes
    result = backtest_simulated(agent, env, episodes, args.seed, greedy=not args.sample, device=device)
    return result, (f"Backtest of {path} on {episodes} simulated '{env.market}' episodes of "
                    f"{env.episode_length} bars, seed {args.seed} ({actions})")


def run_several(args: argparse.Namespace, files: list[str]) -> tuple[dict[str, BacktestResult], str]:
    """The backtest of each instrument (the same checkpoint, slice dates and costs), by name."""
    path, agent, env, device, _, trained_on = prepare(args)
    results = {}
    for file in files:
        one = argparse.Namespace(**{**vars(args), "data": Path(file)})
        data, lo, hi = load_slice(one, env.window, env.feature_names)
        name = instrument_name(file)
        results[name] = mark_training_bars(backtest_history(agent, env, data, lo, hi, greedy=not args.sample,
                                                            seed=args.seed, device=device), trained_on, name, data)
    actions = "sampled actions" if args.sample else "greedy actions"
    return results, f"Backtest of {path} on {len(files)} instruments ({actions})"


def plot_paths(base: Path, names: list[str]) -> dict[str, Path]:
    """Where --plot draws each of several instruments: ``<stem>-<instrument stem>.png`` beside
    ``base``; an instrument whose stem another shares (``X.csv`` and ``X.csv.gz``) keeps its
    whole file name (``<stem>-X.csv.png``, ``<stem>-X.csv.gz.png``), so no plot overwrites another."""
    stems = {}
    for name in names:
        stem = name
        for suffix in (".csv.gz", ".csv", ".parquet", ".pq"):
            if stem.lower().endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        stems[name] = stem
    shared = {stem.lower() for stem in stems.values() if sum(s.lower() == stem.lower() for s in stems.values()) > 1}
    return {name: base.with_name(f"{base.stem}-{name if stem.lower() in shared else stem}{base.suffix or '.png'}")
            for name, stem in stems.items()}


def default_prog() -> Optional[str]:
    return "evaluate-ppo-lstm" if os.path.basename(sys.argv[0]) == "evaluate-ppo-lstm" else None


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """The CLI; returns the exit code (2 for bad input, one line on stderr)."""
    args, code = settings_or_exit(build_parser(prog or default_prog()), argv, "evaluate")
    if args is None:
        return code
    try:
        if args.data is not None:
            try:
                files = data_paths(args.data)
            except DataError as err:
                raise UsageError(str(err)) from None
            if len(files) > 1:
                return _report_several(args, files)
            args.data = args.data[0] if Path(files[0]) == args.data[0] else Path(files[0])
        result, title = run(args)
        if result.foreign_data:
            print(f"warning: {result.foreign_data}", file=sys.stderr)
        if args.json:
            print(json.dumps(report_dict(result), allow_nan=False))
        else:
            print(format_table(result, title))
        if args.equity_csv is not None:
            write_equity_csv(result, args.equity_csv)
            if not args.json:
                print(f"equity curve: {args.equity_csv}")
        if args.plot is not None:
            plot(result, title, args.plot)
            if not args.json:
                print(f"plot: {args.plot}")
    except UsageError as err:
        sys.stdout.flush()
        print(f"error: {_plain(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _report_several(args: argparse.Namespace, files: list[str]) -> int:
    """main()'s outputs for several instruments (UsageError propagates to main)."""
    results, title = run_several(args, files)
    for name, result in results.items():
        if result.foreign_data:
            print(f"warning: {name}: {result.foreign_data}", file=sys.stderr)
    if args.json:
        print(json.dumps(instruments_dict(results), allow_nan=False))
    else:
        print(format_instruments_table(results, title))
    if args.equity_csv is not None:
        write_instruments_csv(results, args.equity_csv)
        if not args.json:
            print(f"equity curves: {args.equity_csv}")
    if args.plot is not None:
        for name, out in plot_paths(args.plot, list(results)).items():
            plot(results[name], f"{title}: {name}", out)
            if not args.json:
                print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
