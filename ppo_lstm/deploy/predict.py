"""The decision for the bar after a data file's last bar, from a checkpoint or an exported ONNX model.

    predict-ppo-lstm --checkpoint checkpoints/best.pt --data prices.csv --start 2024-01-02
    predict-ppo-lstm --checkpoint checkpoints/best.pt --data prices.csv --state state.json --json
    predict-ppo-lstm --model policy.onnx --data prices.csv

(also ``python -m ppo_lstm.predict``). The file's bars are fed to a ``TradingPolicy``
one at a time, so the decisions are the ones ``evaluate-ppo-lstm`` takes on the same
file from the same ``--start``; the last one is printed. With ``--state FILE`` the
stream's state is saved there, and a later call on the same file with new bars
appended consumes only the new bars (and prints what a call from scratch prints). A
state is refused (one line, exit 2) by another checkpoint or route, other costs or
``--start``, a file whose earlier bars are not the ones it consumed, or a state edited
after it was written. Two calls on one ``--state`` take turns (``<state>.lock``); one
that waits more than 10 s is refused.

A policy trained with ``--features`` reads those columns of the file (by name, as
training did; a file lacking one is refused, naming it), and decides from the first bar
where every one is defined, as ``evaluate-ppo-lstm`` does. A policy trained with
``--ema-spans`` reads nothing more: its EMAs start at the file's first bar, as
``evaluate-ppo-lstm``'s do, and a ``--state`` carries them on.

With ``--model`` nothing here imports torch (``TradingPolicy``'s ONNX route); ``--checkpoint``
imports it when it loads the checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from ..config.flags import add_config_options, settings_or_exit
from ..errors import EXIT_USAGE, OneLineParser, Switch, UsageError, one_line
from .bars import check_start
from .policy import Decision, TradingPolicy, as_market_data, parse_start
from .state import STATE_VERSION, state_lock
from .times import iso


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=prog or "python -m ppo_lstm.predict",
        description="Print a trained policy's decision for the bar after the data file's last bar: the target "
                    "position in signed lots (traded at that bar's open), the action probabilities and the value.",
        epilog="The decisions are evaluate-ppo-lstm's on the same file and --start (fills at the next open, with the "
               "checkpoint's slippage and fee). Bad input: one 'error:' line on stderr, exit code 2.")
    add_config_options(parser)
    policy = parser.add_mutually_exclusive_group(required=True)
    policy.add_argument("--checkpoint", type=Path, metavar="PATH",
                        help="a .pt file, or a checkpoint dir (its best.pt, else the checkpoint 'latest' names)")
    policy.add_argument("--model", type=Path, metavar="FILE",
                        help="an ONNX file written by export-ppo-lstm (run with onnxruntime: the 'onnx' extra)")
    parser.add_argument("--data", required=True, type=Path, metavar="PATH", help="OHLCV history (CSV or Parquet), "
                        "with the feature columns of a checkpoint trained with --features")
    parser.add_argument("--start", metavar="DATE", help="the first decision is taken at the first bar at or after "
                        "DATE, as evaluate-ppo-lstm --start; its window comes from the bars before it (default: "
                        "the file's first bar, then the first bar with a full window before it)")
    parser.add_argument("--date-format", metavar="FMT", help="strftime format of the time column (default: detected)")
    parser.add_argument("--state", type=Path, metavar="FILE", help="JSON state file: written on the first call; "
                        "later calls on the file with new bars appended consume only the new bars")
    parser.add_argument("--fill", nargs=2, type=float, metavar=("PRICE", "LOTS"), help="with an existing --state: "
                        "the real fill of its last decision, at the open of the first new bar (LOTS: signed lots "
                        "held after it; PRICE: slippage included); default: the book assumes the decision filled "
                        "at that open with --slippage-bps")
    parser.add_argument("--fee-bps", type=float, metavar="BPS", help="fee per traded notional, overriding the "
                        "checkpoint's")
    parser.add_argument("--slippage-bps", type=float, metavar="BPS", help="adverse fill slippage, overriding the "
                        "checkpoint's")
    parser.add_argument("--device", default="cpu", metavar="DEV", help="with --checkpoint: torch device (cpu, "
                        "cuda, ...)")
    parser.add_argument("--json", action=Switch, help="print one JSON object instead of the text")
    return parser


def load(args: argparse.Namespace) -> TradingPolicy:
    """The policy of --checkpoint or --model, with the cost overrides."""
    if args.model is not None:
        if args.device != "cpu":
            raise UsageError("--device is for --checkpoint; --model runs on onnxruntime's CPU provider")
        return TradingPolicy.from_onnx(args.model, args.fee_bps, args.slippage_bps)
    from ..evaluation.loading import policy_device as resolve_device

    return TradingPolicy.load(args.checkpoint, resolve_device(args.device), args.fee_bps, args.slippage_bps)


def check_state_path(path: Path) -> None:
    if path.is_dir():
        raise UsageError(f"--state {path} is a directory; name a file")
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise UsageError(f"cannot write --state {path}: no directory {path.parent}")


def too_few(policy: TradingPolicy, source: str, bars: int) -> UsageError:
    """No decision yet: fewer than window + 1 bars in all. (A bar at or after --start exists:
    ``check_start`` checked it; a file whose feature column has no value yet at its last bar
    holds no value in it at all: the loader refuses it, naming the column.)"""
    W = policy.env.window
    return UsageError(f"{source}: has {bars} bars; a decision needs at least window + 1 = {W + 1} (the policy's "
                      f"{W}-bar window and the decision bar)")


def run(args: argparse.Namespace) -> tuple[TradingPolicy, Decision, int]:
    """The policy after the file's bars, its last decision and how many bars this call consumed
    (with --state: under its lock, so two calls never interleave their reads and writes)."""
    if args.state is None:
        return _run(args)
    check_state_path(args.state)
    with state_lock(args.state):
        return _run(args)


def _run(args: argparse.Namespace) -> tuple[TradingPolicy, Decision, int]:
    policy = load(args)
    data = as_market_data(args.data, args.date_format, policy.spec.features)
    if args.state is not None and args.state.exists():
        if policy.load_state(args.state) < STATE_VERSION:
            print(f"note: --state {args.state} is an unsealed version-1 state; it is written back as version "
                  f"{STATE_VERSION}, sealed", file=sys.stderr)
        start = None if args.start is None else parse_start(args.start)
        if start != policy.start:
            was = "no --start" if policy.start is None else f"--start {iso(policy.start)}"
            raise UsageError(f"--state {args.state} was started with {was}; pass the same, or a new --state file")
        try:
            policy.verify_history(data)
        except UsageError as err:
            raise UsageError(f"--state {args.state} does not match: {err}") from None
        consumed = policy.bars
        if args.fill is not None:
            if len(data) == consumed:
                raise UsageError(f"--fill is the fill at the open of the first new bar; {args.data} has no bar "
                                 f"after {policy.last_time}")
            policy.fill(args.fill[0], args.fill[1])
        decision = policy.feed(data, first=consumed)
        new = len(data) - consumed
    else:
        if args.fill is not None:
            raise UsageError("--fill reports the fill of a decision a --state file holds; pass the --state of "
                             "the call that took it")
        check_start(data, args.start)  # a bar at or after --start
        decision = policy.warm_up(data, args.start, warn=False)  # said in one line below
        new = len(data)
    if decision is None:
        raise too_few(policy, str(args.data), policy.bars)
    if policy.warm_up_warning is not None:
        print(f"warning: {policy.warm_up_warning}", file=sys.stderr)
    if args.state is not None:
        policy.save_state(args.state)
    return policy, decision, new


def _lots(n: int) -> str:
    return f"{n:+d}" if n else "0"


def format_text(decision: Decision, policy: TradingPolicy, source: str) -> str:
    """The decision as a few aligned lines."""
    move = decision.target_position - decision.position
    if move == 0:
        trade = "no trade"
    else:
        trade = f"{'buy' if move > 0 else 'sell'} {abs(move)} at the next open"
    probabilities = "  ".join(f"{_lots(p)}: {q:.4f}" for p, q in zip(decision.positions, decision.probabilities))
    lines = [
        f"Decision after the bar of {iso(decision.time)} (bar {decision.bar + 1} of {source}), "
        f"for the next bar:",
        f"  target position  {_lots(decision.target_position)} lots (holding {_lots(decision.position)}: {trade})",
        f"  probabilities    {probabilities}",
        f"  value            {decision.value:.6g}",
        f"  paper equity     {decision.equity:,.2f} ({_opened(policy.opened_at)}fills at the next open)"
        + ("; bust: kept flat" if decision.bust else ""),
    ]
    return "\n".join(lines)


def _opened(stamp: Optional[np.datetime64]) -> str:
    """``account opened at the close of <stamp>, `` (nothing for a state of an older version, which has no record)."""
    return "" if stamp is None else f"account opened at the close of {iso(stamp)}, "


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """The CLI; returns the exit code (2 for bad input, one line on stderr)."""
    if prog is None and os.path.basename(sys.argv[0]) == "predict-ppo-lstm":
        prog = "predict-ppo-lstm"
    args, code = settings_or_exit(build_parser(prog), argv, "predict")
    if args is None:
        return code
    try:
        policy, decision, new = run(args)
    except UsageError as err:
        print(f"error: {one_line(err, 1000)}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        report = {**decision.to_dict(), "bars": policy.bars, "new_bars": new,
                  "start": None if policy.opened_at is None else iso(policy.opened_at),
                  "route": policy.spec.backend}
        print(json.dumps(report, allow_nan=False))
    else:
        print(format_text(decision, policy, str(args.data)))
        if args.state is not None:
            print(f"state: {args.state} ({new} new bar{'s' if new != 1 else ''} consumed, {policy.bars} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
