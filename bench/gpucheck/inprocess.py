"""The phases that run in the acceptance command's own process: env-steps/s of the training
loop, the dtypes of the update's LSTM under bf16 autocast, and synchronizing CUDA calls."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable, Optional

import torch

from .plan import STEPS_PER_ENV, Plan


def make_trainer(device: str, num_envs: int, tmp: str, autocast: str = "off", deterministic: bool = True):
    """A :class:`Trainer` of the default model on ``device``, ``num_envs`` envs x 16 steps per update."""
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.distributed import LocalComm, Worker
    from ppo_lstm.distributed.cuda import configure_numerics
    from ppo_lstm.train.shutdown import StopRequest
    from ppo_lstm.train.trainer import Trainer

    if device == "cuda":
        configure_numerics(deterministic)
    config = TrainConfig(episodes=10**9, num_envs=num_envs, update_interval=num_envs * STEPS_PER_ENV,
                         autocast=autocast, deterministic=deterministic, progress=False, holdout=0.0,
                         holdout_episodes=0, log_file=os.path.join(tmp, "log"), checkpoint_dir=tmp)
    return Trainer(config, Worker(LocalComm(), 0, torch.device(device)), None, StopRequest())


def _sync(trainer) -> None:
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()


def gathered(trainer, records: Any):
    """The rollout just collected, with its episode ``records`` ``[k, 6]``, through the rank
    exchange: the update's batch ``[T, N]``."""
    from ppo_lstm.train.agreement import RankReport, exchange

    local = trainer.rollout.finish()
    batch, _ = exchange(trainer.comm, local, RankReport(records, trainer.steps * trainer.config.num_envs))
    return batch


def full_schedules() -> Any:
    """The schedules an iteration here updates at: full costs and rates."""
    from ppo_lstm.config.schedule import Schedules

    return Schedules(costs=1.0, rates=1.0)


def iteration(trainer) -> tuple[float, float]:
    """One training iteration without logging: (rollout seconds, update seconds)."""
    tic = time.perf_counter()
    records = trainer.rollout.collect(trainer.state.update)
    batch = gathered(trainer, records)
    _sync(trainer)
    mid = time.perf_counter()
    trainer._update(batch, full_schedules())
    _sync(trainer)
    return mid - tic, time.perf_counter() - mid


def throughput(plan: Plan, device: str, num_envs: int, **kwargs: Any) -> dict[str, Any]:
    """env-steps/s of rollout + update at ``num_envs``, after one warm-up iteration, over at
    least ``plan.min_iterations`` iterations or ``plan.budget`` seconds (50 iterations at most)."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(device, num_envs, tmp, **kwargs)
        try:
            iteration(trainer)  # warm-up: allocations, cuBLAS/cuDNN handles
            rollout = update = 0.0
            done = 0
            while (done < plan.min_iterations or rollout + update < plan.budget) and done < 50:
                r, u = iteration(trainer)
                rollout, update, done = rollout + r, update + u, done + 1
        finally:
            trainer.log.close()
    steps = done * num_envs * STEPS_PER_ENV
    return {"env_steps_per_s": round(steps / (rollout + update), 1), "iterations": done,
            "rollout_share": round(rollout / (rollout + update), 3)}


def lstm_dtypes(plan: Plan) -> dict[str, str]:
    """The dtype the update's LSTM runs in under --autocast bf16 (the project's explicit path),
    and what nn.LSTM left to autocast would give (on CUDA: cuDNN's own rule)."""
    from ppo_lstm.config.schema import TrainConfig
    from ppo_lstm.train.build import build_agent

    device = plan.device
    agent = build_agent(TrainConfig()).to(device)
    obs = torch.randn(4, 3, agent.encoder[0].in_features, device=device)
    seen = []
    original = torch.lstm

    def spy(*args: Any) -> Any:
        seen.append(str(args[0].dtype))
        return original(*args)

    with torch.autocast(device, dtype=torch.bfloat16):
        torch.lstm = spy
        try:
            logits, _, _ = agent(obs, agent.initial_state(3, device), torch.zeros(4, 3, device=device))
        finally:
            torch.lstm = original
        plain, _ = agent.lstm(agent.encoder(obs))
    return {"project_lstm": ",".join(sorted(set(seen))), "plain_nn_lstm_under_autocast": str(plain.dtype),
            "logits": str(logits.dtype), "weights": str(next(agent.parameters()).dtype)}


def syncs(plan: Plan, envs: int = 64) -> dict[str, Any]:
    """Synchronizing CUDA calls per rollout step and per update, at ``envs`` envs (the rehearsal:
    at the largest of its sizes, run but not counted: the sync debug mode needs CUDA)."""
    from ppo_lstm.distributed.cuda import count_syncs

    count: Optional[Callable[[Callable[[], Any]], int]] = count_syncs if plan.device == "cuda" else None
    envs = envs if plan.device == "cuda" else max(plan.sizes)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(plan.device, envs, tmp)
        try:
            iteration(trainer)
            collect = lambda: trainer.rollout.collect(trainer.state.update)  # noqa: E731
            rollout = count(collect) if count else collect()
            batch = gathered(trainer, torch.zeros(0, 6).numpy())
            update = count(lambda: trainer._update(batch, full_schedules())) if count else trainer._update(batch, full_schedules())
        finally:
            trainer.log.close()
    if count is None:
        return {"per_rollout_step": "not counted on the CPU", "per_update": "not counted on the CPU",
                "ran": f"{trainer.steps} rollout steps and one update at {envs} envs"}
    return {"per_rollout_step": round(rollout / trainer.steps, 2), "per_update": update}
