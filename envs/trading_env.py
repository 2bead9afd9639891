"""``TradingEnv``: one trading account as a gymnasium env (the N=1 view of ``TradingCore``).

Discrete(num_actions) target position in lots; Box[W+3] float32 observation (layout
in ``envs.observation``). Decision ``j`` is taken after bar ``W+j`` closes, fills
at the next bar's open with slippage and is marked at its close (``envs.ledger``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from envs.config import EnvConfig, make_config
from envs.core import TradingCore
from envs.observation import observation_space

if TYPE_CHECKING:
    from envs.data import MarketData


class TradingEnv(gym.Env):
    """Single trading env: Discrete(num_actions) target position, Box[W+3] obs.

    ``TradingEnv(config=None, data=None, **overrides)``; overrides are EnvConfig
    fields (``market="regime"``). With ``data`` each episode is a random
    ``W+L+1``-bar window of it, otherwise a fresh simulated path.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: EnvConfig | None = None, data: MarketData | None = None, **overrides: Any) -> None:
        self.config = make_config(config, overrides)
        self.core = TradingCore(1, self.config, data)
        self.observation_space = observation_space(self.config)
        self.action_space = gym.spaces.Discrete(self.config.num_actions)
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.core.rngs[0] = self.np_random  # the same object: draws advance it
        self.core.reset_rows(self.core.rows)
        self._done = False
        return self.core.observe()[0], {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("episode is over (or never started): call reset() before step()")
        a = int(action)
        if not 0 <= a < self.config.num_actions:
            raise ValueError(f"action {action!r} outside 0..{self.config.num_actions - 1}")
        reward, terminated, truncated = self.core.step(np.array([a], np.int64))
        obs = self.core.observe()[0]
        info: dict[str, Any] = {}
        if terminated[0] or truncated[0]:
            self._done = True
            stats = self.core.episode_stats(self.core.rows)
            info["episode"] = {k: v[0].item() for k, v in stats.items()}
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def get_state(self) -> dict[str, Any]:
        """Complete env state (incl. the RNG) as plain containers + numpy arrays."""
        state = self.core.get_state()
        state["done"] = self._done
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()``; stepping afterwards reproduces the original exactly."""
        self.core.set_state(state)
        if self.core.rngs[0] is not None:
            self._np_random = self.core.rngs[0]
        self._done = bool(state["done"])
