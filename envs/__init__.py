"""Trading environments: config, data loading, simulated markets, single and vector envs.

- ``config.py``: ``EnvConfig``, every env option, its default, help text and validation;
- ``core.py``: ``TradingCore``, N envs' clock and state around a market, a ledger and an observer;
- ``ledger.py``: positions, FIFO lots, fills, fees, slippage, equity and the reward;
- ``observation.py``: the observation (return window, position, PnL, time, features, EMA deviations) and its space;
- ``ema_deviation.py``: ``--ema-spans``, the log close's deviation from its EMAs (memory beyond the window);
- ``accumulate.py``: running sums along time over many envs, bit for bit NumPy's;
- ``trading_env.py``: ``TradingEnv``, the gymnasium env (the N = 1 view of the core);
- ``vector.py``: ``VectorTradingEnv``, the gymnasium vector env (the N-env view);
- ``data/``: loading OHLCV files, their feature columns and several instruments;
- ``markets/``: the price sources, simulated processes and historical files.

Registered gymnasium ids (single env via ``gymnasium.make``, vector env via
``gymnasium.make_vec(id, num_envs=N, vectorization_mode="vector_entry_point")``):
``ppo_lstm_trader/Trading-v0`` (market from the config, default "mixed") and one per
market: ``ppo_lstm_trader/GBM-v0``, ``OU-v0``, ``Regime-v0``, ``Jump-v0``,
``GARCH-v0``, ``Mixed-v0``. They are registered on import (their entry points are strings:
nothing is built until ``gymnasium.make``); ``TradingEnv`` and ``VectorTradingEnv`` are imported
on first use, so code that needs only the observation or the config (the ONNX inference route)
does not load the env, the markets or the data loader.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium

from envs.config import MARKETS, EnvConfig

if TYPE_CHECKING:
    from envs.data.loading import DataError, MarketData, load_ohlcv
    from envs.trading_env import TradingEnv
    from envs.vector import VectorTradingEnv

NAMESPACE = "ppo_lstm_trader"
ENV_ID = f"{NAMESPACE}/Trading-v0"
MARKET_IDS: dict[str, str] = {
    m: f"{NAMESPACE}/{name}-v0"
    for m, name in zip(MARKETS, ("GBM", "OU", "Regime", "Jump", "GARCH", "Mixed"))
}

__all__ = [
    "EnvConfig", "MARKETS", "TradingEnv", "VectorTradingEnv", "MarketData", "DataError",
    "load_ohlcv", "ENV_ID", "MARKET_IDS",
]

_DATA_NAMES = ("MarketData", "DataError", "load_ohlcv")


def __getattr__(name: str) -> Any:
    """Lazy access to the envs (``trading_env.py``, ``vector.py``) and the data-loading names (``envs.data``)."""
    if name == "TradingEnv":
        from envs.trading_env import TradingEnv

        return TradingEnv
    if name == "VectorTradingEnv":
        from envs.vector import VectorTradingEnv

        return VectorTradingEnv
    if name in _DATA_NAMES:
        import envs.data as data

        return getattr(data, name)
    raise AttributeError(f"module 'envs' has no attribute {name!r}")


def _register() -> None:
    specs: dict[str, dict[str, Any]] = {ENV_ID: {}}
    specs.update({env_id: {"market": m} for m, env_id in MARKET_IDS.items()})
    for env_id, kwargs in specs.items():
        if env_id in gymnasium.registry:
            continue
        gymnasium.register(
            id=env_id,
            entry_point="envs.trading_env:TradingEnv",
            vector_entry_point="envs.vector:VectorTradingEnv",
            kwargs=kwargs,
        )


_register()
