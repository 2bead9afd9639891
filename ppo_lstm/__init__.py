"""Recurrent (LSTM) PPO for trading, on one device or many.

The public API (imported lazily: ``import ppo_lstm`` does not import torch)::

    from ppo_lstm import TrainConfig, load_policy, backtest_history, backtest_simulated, TradingPolicy, state_lock

- ``TrainConfig`` (``ppo_lstm.config.schema``): every training setting, the flags are built from it;
- ``load_policy`` (``ppo_lstm.evaluation.loading``): a checkpoint's agent and its TrainConfig;
- ``backtest_history`` / ``backtest_simulated`` (``ppo_lstm.evaluation.backtest``): a policy
  bar for bar on a price file, or on fresh simulated episodes;
- ``TradingPolicy`` / ``Decision`` (``ppo_lstm.deploy.policy``): a trained policy fed one bar at a time;
- ``state_lock`` (``ppo_lstm.deploy.state``): one process at a time on a policy's state file.

Sub-packages: ``algo`` (agent, rollout, PPO), ``train`` (trainer, workers), ``rundir``
(checkpoints, lock, logs), ``evaluation`` (backtests, reports), ``deploy`` (streaming
policy, ONNX), ``serve`` (the policy as an HTTP server), ``walkforward`` (walk-forward evaluation and its verdict), ``distributed``
(everything that knows about ranks).
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "TrainConfig": "ppo_lstm.config.schema",
    "load_policy": "ppo_lstm.evaluation.loading",
    "backtest_history": "ppo_lstm.evaluation.backtest",
    "backtest_simulated": "ppo_lstm.evaluation.backtest",
    "TradingPolicy": "ppo_lstm.deploy.policy",
    "Decision": "ppo_lstm.deploy.policy",
    "state_lock": "ppo_lstm.deploy.state",
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (they import torch and the envs)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ppo_lstm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
