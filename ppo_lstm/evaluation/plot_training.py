"""Draw a run's training curves from ``<checkpoint-dir>/metrics.csv`` into a PNG.

    python -m ppo_lstm.plot_training --checkpoint-dir checkpoints --out curves.png

One row of metrics.csv per PPO update (written by the trainer); the x axis is the
``episodes`` column. Needs matplotlib (``pip install 'ppo-lstm-trader[plot]'``).
Bad input ends with one ``error: ...`` line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from ..errors import EXIT_USAGE, OneLineParser, UsageError, one_line
from .plots import import_pyplot, save_png

X_COLUMN = "episodes"
HOLDOUT = "holdout_return_pct"
HOLDOUT_REFERENCE = "holdout_buy_and_hold_pct"
# (column, panel title, y label, scale), in reading order over a 4 x 2 grid
PANELS = (
    ("mean_reward", "Mean episode reward", "reward", 1.0),
    ("mean_return", "Mean episode return", "$", 1.0),
    ("win_rate", "Win rate (closed trades)", "%", 100.0),
    (HOLDOUT, "Hold-out return", "%", 1.0),
    ("entropy", "Policy entropy", "nats", 1.0),
    ("approx_kl", "Approx. KL", "KL", 1.0),
    ("sps_global", "Throughput", "env steps/s", 1.0),
)
REQUIRED = (X_COLUMN,) + tuple(column for column, *_ in PANELS if column != HOLDOUT)
DPI = 100
FIGSIZE = (11.0, 10.0)  # inches: 1100 x 1000 px at DPI


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    """The flags; a bad one exits 2 with one line. An unknown flag is named before a missing
    ``--checkpoint-dir``, as the other commands do."""
    parser = OneLineParser(prog="python -m ppo_lstm.plot_training",
                           description="Plot a training run's metrics.csv (one row per PPO update).")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="the run's checkpoint directory, holding metrics.csv (required)")
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG to write (default: <checkpoint-dir>/training_curves.png)")
    args = parser.parse_args(argv)
    if args.checkpoint_dir is None:
        parser.error("the following arguments are required: --checkpoint-dir")
    return args


def read_metrics(checkpoint_dir: Path) -> pd.DataFrame:
    """The numeric columns of ``checkpoint_dir/metrics.csv`` (one row per update); UsageError if unusable."""
    if not checkpoint_dir.is_dir():
        raise UsageError(f"checkpoint dir {checkpoint_dir} does not exist (or is not a directory)")
    path = checkpoint_dir / "metrics.csv"
    if not path.is_file():
        raise UsageError(f"no metrics.csv in {checkpoint_dir}: not a training checkpoint dir, "
                         "or no update finished yet")
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise UsageError(f"{path} is empty: no update finished yet") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as err:
        raise UsageError(f"cannot read {path}: {one_line(err, 200)}") from None
    missing = [column for column in REQUIRED if column not in frame.columns]
    if missing:
        raise UsageError(f"{path} lacks column(s) {', '.join(missing)}: not a metrics.csv of this trainer?")
    if frame.empty:
        raise UsageError(f"{path} has a header but no rows: no update finished yet")
    columns = list(REQUIRED) + [c for c in (HOLDOUT, HOLDOUT_REFERENCE) if c in frame.columns]
    try:
        numeric = frame[columns].apply(pd.to_numeric)
    except (ValueError, TypeError) as err:
        raise UsageError(f"cannot read {path}: a column is not numeric ({one_line(err, 200)})") from None
    if numeric[X_COLUMN].isna().any():
        raise UsageError(f"cannot read {path}: column {X_COLUMN} has empty cells")
    return numeric


def smoothing_window(points: int) -> int:
    """Rolling-mean window for a series of ``points`` values: ~1/10 of them, 1 (none) below 50."""
    return 1 if points < 50 else min(50, points // 10)


def draw_series(ax: Any, x: pd.Series, y: pd.Series) -> None:
    """Plot ``y`` ``[n]`` against ``x`` ``[n]``, skipping empty cells; long series get a rolling mean."""
    keep = y.notna()
    x, y = x[keep], y[keep]
    if y.empty:
        note(ax, "no finished episodes yet")
        return
    window = smoothing_window(len(y))
    if window == 1:
        ax.plot(x, y, color="C0", linewidth=1.2, marker="." if len(y) < 50 else None)
        return
    ax.plot(x, y, color="C0", linewidth=0.8, alpha=0.3, label="per update")
    ax.plot(x, y.rolling(window, min_periods=1).mean(), color="C0", linewidth=1.6,
            label=f"rolling mean ({window} updates)")
    ax.legend(fontsize=7, loc="best")


def note(ax: Any, text: str) -> None:
    """A grey note in the middle of an empty panel (no y ticks)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_yticks([])
    ax.set_ylabel("")


def draw_holdout(ax: Any, frame: pd.DataFrame) -> None:
    """Hold-out return against episodes, buy-and-hold dashed; a note when there is none."""
    rows = frame[HOLDOUT].notna() if HOLDOUT in frame.columns else pd.Series(False, index=frame.index)
    if not rows.any():
        note(ax, "no hold-out evaluations")
        return
    ax.plot(frame.loc[rows, X_COLUMN], frame.loc[rows, HOLDOUT], color="C0", marker="o", markersize=3,
            linewidth=1.4, label="agent")
    if HOLDOUT_REFERENCE in frame.columns and frame.loc[rows, HOLDOUT_REFERENCE].notna().any():
        reference = frame.loc[rows & frame[HOLDOUT_REFERENCE].notna()]
        ax.plot(reference[X_COLUMN], reference[HOLDOUT_REFERENCE], color="C1", linestyle="--",
                linewidth=1.2, label="buy and hold")
    ax.axhline(0.0, color="gray", linewidth=0.6)
    ax.legend(fontsize=7, loc="best")


def plot(frame: pd.DataFrame, title: str, out: Path, plt: Any) -> None:
    """Write the grid of panels for ``frame`` (one row per update) to the PNG ``out``."""
    fig, axes = plt.subplots(4, 2, figsize=FIGSIZE, dpi=DPI, sharex=True)
    flat = axes.ravel()
    for ax, (column, name, unit, scale) in zip(flat, PANELS):
        ax.set_title(name, fontsize=10)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(True, linewidth=0.4, alpha=0.5)
        ax.ticklabel_format(axis="y", useOffset=False)  # entropy near ln 3: 1.0986, not 1e-5+1.098
        if column == HOLDOUT:
            draw_holdout(ax, frame)
        else:
            draw_series(ax, frame[X_COLUMN], frame[column] * scale)
        if column == "mean_return":
            ax.axhline(0.0, color="gray", linewidth=0.6)
    flat[-1].remove()  # 7 panels in a 4 x 2 grid: the one above the gap shows the x ticks
    flat[-3].xaxis.set_tick_params(labelbottom=True)
    for ax in (flat[-2], flat[-3]):
        ax.set_xlabel("episodes", fontsize=8)
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    try:
        save_png(fig, out)
    finally:
        plt.close(fig)


def figure_title(checkpoint_dir: Path, frame: pd.DataFrame) -> str:
    parts = checkpoint_dir.resolve().parts[-2:]
    return f"Training curves: {'/'.join(parts)} ({len(frame)} updates, {int(frame[X_COLUMN].max())} episodes)"


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    out = args.out if args.out is not None else args.checkpoint_dir / "training_curves.png"
    try:
        frame = read_metrics(args.checkpoint_dir)
        if not out.parent.is_dir():
            raise UsageError(f"cannot write {out}: no directory {out.parent}")
        plt = import_pyplot()
        plot(frame, figure_title(args.checkpoint_dir, frame), out, plt)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
