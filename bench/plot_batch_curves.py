"""Plot learning curves per batch from ``bench/gpu_learning.py`` outputs: held-out score against
training seconds and against env steps, one colour per configuration, one line per seed
(from the first scored update on: the axes are logarithmic). The committed figure is drawn by

    python bench/plot_batch_curves.py bench/results/cpu_learning_envs.txt \\
        bench/results/gpu_learning_nvidia_h200.txt --market regime-10bps --out bench/results/batch_curves.png

Reads every JSON line whose ``bench`` is ``gpu_learning`` in the files given (a label
prefix per file: its device), writes ``--out`` (default: ``batch_curves.png`` in the current
directory) and prints one line per configuration plotted.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def configurations(paths: list[Path], market: str) -> list[tuple[str, list, float]]:
    """(label, curves, reference bps) for every configuration of ``market`` in ``paths``."""
    out = []
    for path in paths:
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            report = json.loads(line)
            if report.get("bench") != "gpu_learning" or market not in report["markets"]:
                continue
            device = "GPU" if report["device"] == "cuda" else "CPU"
            mk = report["markets"][market]
            for label, curves in mk["curves"].items():
                out.append((f"{device}: {label}", curves, mk["reference_bps"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--market", default="regime-10bps")
    parser.add_argument("--out", type=Path, default=Path("batch_curves.png"),
                        help="the PNG to write (default: batch_curves.png in the current directory)")
    args = parser.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = configurations(args.files, args.market)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    colors = plt.get_cmap("tab10")
    for i, (label, curves, ref) in enumerate(configs):
        for k, curve in enumerate(curves):
            steps, wall, score = zip(*[p for p in curve if p[0] > 0])  # log axes: the untrained point left out
            share = [100.0 * s / ref for s in score]
            axes[0].plot(wall, share, color=colors(i % 10), alpha=0.8, lw=1.2, label=label if k == 0 else None)
            axes[1].plot(steps, share, color=colors(i % 10), alpha=0.8, lw=1.2)
        print(f"{label}: {len(curves)} seeds")
    for ax, xlabel in zip(axes, ("training seconds (evaluation excluded)", "env steps")):
        ax.axhline(90, color="grey", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel + ", log scale")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out score, % of the reference rule")
    axes[0].set_ylim(-20, 105)
    axes[0].legend(loc="lower right", fontsize=7)
    fig.suptitle(f"{args.market}: learning curves per batch (16 steps x envs), the batch rule's rates")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
