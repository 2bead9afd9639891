"""Learning against the batch: how minibatch count and learning rate must follow the batch size.

Runs ``bench/learning.py`` once per configuration (one market, ``--seeds`` seeds on ``--jobs``
processes, ``--steps`` env steps per seed, RecurrentPPO off) and tabulates the share of the
market's ceiling each reaches (mean and worst seed) beside its training seconds per seed.
Every configuration is a list of ``TrainConfig`` overrides, always with both learning rates
given, so the batch rule's own rates never enter: the grid holds the base (batch 128: 8 envs x
16 steps, 4 minibatches, rates 3e-4 / 1e-3, the defaults before the batch rule) and, at batch
1,024 (32 envs x 32 steps), 4 to 32 minibatches (minibatch size 256 down to 32 transitions)
with both rates x1 and x2. Prints a table and ONE JSON line.

    python bench/batch_sweep.py                          # regime at 10 bps, 2 seeds, 131,072 steps
    python bench/batch_sweep.py --market ou-10bps --seeds 3 --config default \
        --config num_envs=32,update_interval=1024,minibatches=4,lr_scale=2   # chosen configurations

``--config`` (repeatable) replaces the grid: ``default`` (the base), or ``name=value`` overrides joined
by commas, where ``lr_scale=X`` multiplies both base learning rates (x1 when left out).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppo_lstm.config.plan import BASE_RATES, update_batch
from ppo_lstm.config.plan import minibatches as rule_or_given_minibatches
from ppo_lstm.config.schema import TrainConfig

DEFAULT_LR = dict(zip(("learning_rate_actor", "learning_rate_critic"), BASE_RATES))  # the base rates, always given
FIXED = {"minibatches": 4, **DEFAULT_LR}  # given unless a configuration sets them: the sweep's rates never follow a rule


def grid() -> list[dict[str, float]]:
    """The default configurations: the default batch, then batch 1,024 by minibatches and rate."""
    configs: list[dict[str, float]] = [parse_config("default")]
    for minibatches in (4, 8, 16, 32):
        for scale in (1, 2):
            config: dict[str, float] = {"num_envs": 32, "update_interval": 1024, "minibatches": minibatches}
            config.update({name: value * scale for name, value in DEFAULT_LR.items()})
            configs.append(config)
    return configs


def parse_config(text: str) -> dict[str, float | str]:
    """``default`` or ``name=value,...`` (``lr_scale`` scales both default learning rates)."""
    if text == "default":
        return {"num_envs": 8, **FIXED}
    config: dict[str, float] = dict(FIXED)
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name == "lr_scale":
            config.update({lr: rate * float(value) for lr, rate in DEFAULT_LR.items()})
        else:
            config[name] = _number_or_text(value)
    return config


def _number_or_text(value: str) -> float | str:
    """``"0.95"`` -> 0.95; a value that is no number (``env.ema_spans=none``) stays text."""
    try:
        return float(value)
    except ValueError:
        return value


def _show(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def run(market: str, seeds: int, jobs: int, steps: int, overrides: dict[str, float | str]) -> dict:
    """One ``bench/learning.py`` run; its JSON line's figures for ``market``."""
    command = [sys.executable, str(ROOT / "bench" / "learning.py"), "--markets", market, "--no-sb3",
               "--seeds", str(seeds), "--jobs", str(jobs), "--steps", str(steps)]
    for name, value in overrides.items():
        command += ["--set", f"{name}={_show(value)}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"bench"')]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
    figures = json.loads(lines[-1])["markets"][market]
    seconds = [seed["wall_s"] for seed in figures["ours_per_seed"]]
    return {"overrides": overrides, "mean": figures["ours_share_mean"], "worst": figures["ours_share_worst"],
            "train_s_per_seed": sum(seconds) / len(seconds), "reference": figures["reference"]}


def label(overrides: dict[str, float | str]) -> str:
    scale = overrides.get("learning_rate_actor", DEFAULT_LR["learning_rate_actor"]) / DEFAULT_LR["learning_rate_actor"]
    shape = {k: int(overrides[k]) for k in ("num_envs", "update_interval", "rollout_steps", "minibatches")
             if k in overrides}
    config = TrainConfig(**shape)
    batch, minibatches = update_batch(config), rule_or_given_minibatches(config)
    others = [f"{k}={_show(v)}" for k, v in overrides.items() if k not in (*shape, *DEFAULT_LR)]
    return (f"batch {batch:g}, {minibatches:g} minibatches of {batch / minibatches:g}, rates x{scale:g}"
            + "".join(f", {o}" for o in others))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--market", default="regime-10bps")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=131072)
    parser.add_argument("--config", action="append", default=None, help="a configuration (repeatable): default, "
                        "or name=value,... (lr_scale=X scales both learning rates); replaces the grid")
    args = parser.parse_args()
    started = time.perf_counter()
    configs = grid() if args.config is None else [parse_config(c) for c in args.config]
    rows = [run(args.market, args.seeds, args.jobs, args.steps, overrides) for overrides in configs]
    chosen = "".join(f" --config {c}" for c in args.config or [])
    print(f"# python bench/batch_sweep.py --market {args.market} --seeds {args.seeds} --jobs {args.jobs} "
          f"--steps {args.steps}{chosen}")
    print(f"{'configuration':52s} {'mean %':>7s} {'worst %':>8s} {'train s/seed':>13s}")
    for row in rows:
        print(f"{label(row['overrides']):52s} {100 * row['mean']:7.1f} {100 * row['worst']:8.1f} "
              f"{row['train_s_per_seed']:13.1f}")
    wall = time.perf_counter() - started
    print(f"% of the {rows[0]['reference']} on held-out episodes; wall {wall:.0f} s")
    print(json.dumps({"bench": "batch_sweep", "market": args.market, "seeds": args.seeds, "steps": args.steps,
                      "rows": rows, "wall_s": wall}))


if __name__ == "__main__":
    main()
