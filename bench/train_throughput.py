"""Training throughput: env-steps/s of the full PPO-LSTM loop (rollout + update), one core.

Runs ppo-lstm-trader's trainer and, when installed, sb3-contrib's RecurrentPPO on the
same trading env with the same sizes, at two configurations:

* ``defaults``: this project's defaults, 8 envs x 16 steps = 128 transitions per
  update, 4 epochs x 4 minibatches, MLP 64x64, one shared LSTM of 64;
* ``matched``: 8 envs x 128 steps = 1024 transitions per update, 4 epochs x 4
  minibatches, the same sizes (close to RecurrentPPO's own defaults).

RecurrentPPO runs twice: stepping this project's ``TradingEnv`` (one env per process
step, as sb3's ``DummyVecEnv`` steps any gymnasium env), and stepping gym-anytrading's
``stocks-v0`` (its natural env, whose step is cheaper), with the same sizes. Each trainer
runs ``--repeats`` times per configuration, the three alternating; the table shows the
median env-steps/s and this project's ratio against each, the JSON line every run as well.
Prints a table and one JSON line; compare the ratios, not the absolute numbers (shared machine).

    python bench/train_throughput.py [--steps 20480] [--repeats 3]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Optional  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.config import EnvConfig  # noqa: E402
from ppo_lstm.config.schema import TrainConfig
from ppo_lstm.distributed import LocalComm, Worker  # noqa: E402
from ppo_lstm.train.shutdown import StopRequest  # noqa: E402
from ppo_lstm.train.trainer import Trainer  # noqa: E402

NUM_ENVS, EPOCHS, MINIBATCHES, SIZE = 8, 4, 4, 64
CONFIGS = {"defaults": 16, "matched": 128}  # rollout steps per env and update
OURS = "ppo-lstm-trader"
SB3 = "sb3-contrib RecurrentPPO on TradingEnv"
SB3_STOCKS = "sb3-contrib RecurrentPPO on stocks-v0"


def ours(total_steps: int, env: EnvConfig, steps: int) -> float:
    """env-steps/s of ppo-lstm-trader's trainer (in-process, the same loop as the CLI)."""
    episodes = max(NUM_ENVS, total_steps // env.episode_length)
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(episodes=episodes, num_envs=NUM_ENVS, update_interval=NUM_ENVS * steps,
                             epochs=EPOCHS, minibatches=MINIBATCHES, hidden_size=SIZE, lstm_size=SIZE,
                             progress=False, log_file=os.path.join(tmp, "log"), checkpoint_dir=tmp,
                             checkpoint_interval=10**9, log_interval=10**9, holdout=0.0, env=env)
        trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
        start = time.perf_counter()
        trainer.run()
        return trainer.state.env_steps / (time.perf_counter() - start)


def trading_env(env: EnvConfig) -> Callable[[], Any]:
    """This project's single-env ``TradingEnv`` on ``env``."""
    from envs.trading_env import TradingEnv

    return lambda: TradingEnv(env)


def stocks_v0() -> Optional[Callable[[], Any]]:
    """gym-anytrading's ``stocks-v0`` (GOOGL daily bars, window 30), or None if not installed."""
    try:
        import gym_anytrading  # noqa: F401  (registers stocks-v0)
    except ImportError:
        print("gym-anytrading not installed: skipping RecurrentPPO on stocks-v0 (pip install -e '.[bench]')")
        return None
    import gymnasium as gym

    return lambda: gym.make("stocks-v0")


def sb3_recurrent_ppo(total_steps: int, make_env: Optional[Callable[[], Any]], steps: int) -> float | None:
    """env-steps/s of sb3-contrib RecurrentPPO on ``make_env``'s env, or None if either is missing."""
    try:
        from sb3_contrib import RecurrentPPO
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError:
        print("sb3-contrib not installed: skipping RecurrentPPO (pip install -e '.[bench]')")
        return None
    if make_env is None:
        return None
    vec = make_vec_env(make_env, n_envs=NUM_ENVS, seed=1)
    model = RecurrentPPO("MlpLstmPolicy", vec, n_steps=steps, batch_size=NUM_ENVS * steps // MINIBATCHES,
                         n_epochs=EPOCHS, seed=1, device="cpu",
                         policy_kwargs=dict(lstm_hidden_size=SIZE, net_arch=[SIZE, SIZE], shared_lstm=True,
                                            enable_critic_lstm=False))
    start = time.perf_counter()
    model.learn(total_timesteps=total_steps)
    return model.num_timesteps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20480, help="env steps per framework")
    parser.add_argument("--market", default="regime")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each trainer per configuration (median)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    env = EnvConfig(market=args.market)
    peers = {SB3: trading_env(env), SB3_STOCKS: stocks_v0()}
    runs: dict[str, dict[str, list[float]]] = {}
    for name, steps in CONFIGS.items():
        runs[name] = {OURS: [], SB3: [], SB3_STOCKS: []}
        for _ in range(args.repeats):
            runs[name][OURS].append(ours(args.steps, env, steps))
            for peer, make_env in peers.items():
                sps = sb3_recurrent_ppo(args.steps, make_env, steps)
                if sps is not None:
                    runs[name][peer].append(sps)
    results: dict[str, dict[str, float | None]] = {
        name: {trainer: statistics.median(values) if values else None for trainer, values in by_trainer.items()}
        for name, by_trainer in runs.items()}
    print(f"{'config':<10}{'batch':>7}{'trainer':>40}{'env-steps/s':>14}{'ppo-lstm-trader is':>20}"
          f"   (median of {args.repeats} runs each)")
    ratios: dict[str, dict[str, float | None]] = {}
    for name, steps in CONFIGS.items():
        ours_sps = results[name][OURS]
        ratios[name] = {peer: ours_sps / results[name][peer] if results[name][peer] and ours_sps else None
                        for peer in peers}
        for trainer, sps in results[name].items():
            if sps is None:
                continue
            ratio = f"{ours_sps / sps:.1f}x" if trainer != OURS and ours_sps else ""
            print(f"{name:<10}{NUM_ENVS * steps:>7}{trainer:>40}{sps:>14,.0f}{ratio:>20}")
    print(json.dumps({"bench": "train_throughput", "steps": args.steps, "market": args.market, "threads": 1,
                      "repeats": args.repeats,
                      "configs": {n: {"envs": NUM_ENVS, "steps_per_env": t, "epochs": EPOCHS,
                                      "minibatches": MINIBATCHES, "size": SIZE} for n, t in CONFIGS.items()},
                      "env_steps_per_s": results, "ratio_vs_sb3": {n: r[SB3] for n, r in ratios.items()},
                      "ratio_vs_sb3_stocks_v0": {n: r[SB3_STOCKS] for n, r in ratios.items()},
                      "runs_env_steps_per_s": runs}))


if __name__ == "__main__":
    main()
