"""Recurrent (LSTM) PPO for trading, on one device or many.

``ppo_lstm.TradingPolicy`` (``ppo_lstm.policy``): a trained policy fed one bar at a time.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["TradingPolicy", "Decision", "__version__"]


def __getattr__(name: str) -> Any:
    """Lazy access to the streaming policy (it imports torch and the envs)."""
    if name in ("TradingPolicy", "Decision"):
        from .deploy import policy

        return getattr(policy, name)
    raise AttributeError(f"module 'ppo_lstm' has no attribute {name!r}")
