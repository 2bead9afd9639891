"""The training jobs of ``bench/learning.py`` (run in child processes): ppo-lstm-trader's own
loop (``train_ours``) and sb3-contrib's RecurrentPPO (``train_sb3``), each scored greedily
on the held-out paths.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib  # noqa: E402
import csv  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from typing import Any, Optional  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.learning_markets import EVAL_SEED, env_config  # noqa: E402
from bench.learning_paths import Paths, history_paths, score_backtest, simulated_paths, trade  # noqa: E402
from envs.config import EnvConfig  # noqa: E402
from envs.data import MarketData, load_ohlcv  # noqa: E402
from ppo_lstm.evaluation.backtest import backtest_history, backtest_simulated, evaluation_seeds  # noqa: E402

SB3_STEPS, SB3_EPISODES = 16, 8  # n_steps per env, envs (128 transitions per update, as ours)


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def apply_overrides(env: EnvConfig, overrides: dict[str, Any]) -> tuple[EnvConfig, dict[str, Any]]:
    """``--set`` overrides split: ``env.NAME`` ones applied to ``env``, the rest returned for TrainConfig."""
    rest = dict(overrides)
    env_over = {k[4:]: rest.pop(k) for k in list(rest) if k.startswith("env.")}
    return replace(env, **env_over), rest


def _load_agent(path: Any, config: Any) -> tuple[Any, int]:
    """The agent of the checkpoint at ``path`` (trained with ``config``) and the env steps it was written at."""
    from ppo_lstm.rundir.checkpoint import load_checkpoint
    from ppo_lstm.train.build import build_agent

    state = load_checkpoint(path)
    agent = build_agent(config)
    agent.load_state_dict(state["model"])
    return agent, int(state["counters"]["env_steps"])


def train_ours(job: dict[str, Any]) -> dict[str, Any]:
    """Train one seed and score it greedily on the test set (runs in a child process; with
    ``workers`` > 1, in this process, which launches the workers as the CLI does)."""
    torch.set_num_threads(1)
    from ppo_lstm.rundir.checkpoint import BEST_NAME, CheckpointDir
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker, launch
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer
    from ppo_lstm.train.worker import train_worker

    env, overrides = apply_overrides(env_config(job["market"]), job["overrides"])
    if job.get("no_features"):  # the blind agent: no columns, so no window for them either
        env = replace(env, features=None, feature_window=EnvConfig.feature_window)
    episodes = max(8, job["steps"] // env.episode_length)
    # "final": the weights at the end (one checkpoint, at the end); "best": best.pt, the
    # hold-out's pick over the checkpoints written at --checkpoint-interval, as a user's run keeps it
    pick_best = job.get("pick", "final") == "best"
    interval = overrides.pop("checkpoint_interval", TrainConfig.checkpoint_interval)
    interval = interval if pick_best else 10**9
    with tempfile.TemporaryDirectory() as tmp:
        config = TrainConfig(episodes=episodes, seed=job["seed"], progress=False, log_file=os.path.join(tmp, "log"),
                             checkpoint_dir=tmp, checkpoint_interval=interval, log_interval=10**9,
                             data=job.get("train_csv"), env=env, **overrides)
        workers = job.get("workers", 1)
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the trainer's log lines
            start = time.perf_counter()
            if workers == 1:
                trainer = Trainer(config, Worker(LocalComm(), 0, torch.device("cpu")), None, StopRequest())
                trainer.run()
                agent, env_steps = trainer.agent, trainer.state.env_steps
            else:  # gloo workers, launched as `--distributed --device cpu --num-workers N` does
                config = replace(config, distributed=True, num_workers=workers, device="cpu")
                if launch(config, "cpu", train_worker) != 0:
                    raise RuntimeError(f"training with {workers} workers failed: {job}")
                agent, env_steps = _load_agent(CheckpointDir(tmp, 1).latest(), config)
        wall = time.perf_counter() - start
        picked_steps = env_steps
        if pick_best:
            agent, picked_steps = _load_agent(os.path.join(tmp, BEST_NAME), config)
        with open(os.path.join(tmp, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
        tail = rows[-max(1, len(rows) // 10):]
        entropy = float(np.mean([float(r["entropy"]) for r in tail]))
    agent = agent.eval()
    if job.get("test_csv"):
        data = load_ohlcv(job["test_csv"], features=env.feature_names)
        result = backtest_history(agent, env, data)
    else:
        result = backtest_simulated(agent, env, job["episodes"], EVAL_SEED)
    out = score_backtest(result, additive=bool(job.get("additive")))
    out.update(seed=job["seed"], wall_s=wall, env_steps=env_steps, final_entropy=entropy, workers=workers,
               pick=job.get("pick", "final"), picked_env_steps=picked_steps)
    return out


def make_sb3(env: EnvConfig, data: Optional[MarketData], seed: int) -> Any:
    """RecurrentPPO on ``env`` (trading ``data``, or simulated) with this benchmark's sizes."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env

    from envs.trading_env import TradingEnv

    vec = make_vec_env(lambda: TradingEnv(env, data=data), n_envs=SB3_EPISODES, seed=seed)
    return RecurrentPPO("MlpLstmPolicy", vec, n_steps=SB3_STEPS, batch_size=SB3_EPISODES * SB3_STEPS // 4,
                        n_epochs=4, seed=seed, device="cpu",
                        policy_kwargs=dict(lstm_hidden_size=64, net_arch=[64, 64], shared_lstm=True,
                                           enable_critic_lstm=False))


def sb3_greedy(model: Any, paths: Paths) -> dict[str, float]:
    """A RecurrentPPO policy's greedy score on ``paths`` (:func:`trade`'s dict)."""
    env = paths.env
    core = paths.new_core()
    core.reset_rows(core.rows)
    n, L = core.n, env.episode_length
    state, starts = None, np.ones(n, bool)
    lots = np.empty((n, L))
    offset = 0 if env.no_short else env.max_position
    for j in range(L):
        actions, state = model.predict(core.observe(), state=state, episode_start=starts, deterministic=True)
        starts = np.zeros(n, bool)
        core.step(np.asarray(actions, np.int64))
        lots[:, j] = np.asarray(actions, np.float64) - offset
    return trade(paths, lots)  # replays the same actions through a fresh core: the same equity


def train_sb3(job: dict[str, Any]) -> dict[str, Any]:
    """RecurrentPPO on the same env (the ``--set env.NAME`` overrides too) and budget, scored greedily on the
    same test paths."""
    torch.set_num_threads(1)
    env, _ = apply_overrides(env_config(job["market"]), job.get("overrides", {}))
    data = load_ohlcv(job["train_csv"], features=env.feature_names) if job.get("train_csv") else None
    model = make_sb3(env, data, job["seed"])
    start = time.perf_counter()
    model.learn(total_timesteps=job["steps"])
    wall = time.perf_counter() - start
    if job.get("test_csv"):
        test = load_ohlcv(job["test_csv"], features=env.feature_names)
        paths = history_paths(env, test, np.zeros(len(test)))
    else:
        paths = simulated_paths(env, evaluation_seeds(EVAL_SEED, job["episodes"]))
    out = sb3_greedy(model, paths)
    out.update(seed=job["seed"], wall_s=wall, env_steps=int(model.num_timesteps))
    return out


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "result": (train_sb3 if job["kind"] == "sb3" else train_ours)(job)}
