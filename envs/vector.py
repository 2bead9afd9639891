"""``VectorTradingEnv``: N trading envs stepped in one batched NumPy call.

A view of ``envs.core.TradingCore`` (the same accounting as ``TradingEnv``):
env i behaves bit for bit like a ``TradingEnv`` reset with ``seed + i`` and then
reset without a seed after each episode (SAME_STEP autoreset).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

from envs.config import EnvConfig, make_config
from envs.core import TradingCore
from envs.observation import observation_space

if TYPE_CHECKING:
    from envs.data import MarketData


class VectorTradingEnv(gym.vector.VectorEnv):
    """N trading envs; obs [N, W+3] float32, actions [N] int, rewards [N] float64.

    ``step`` infos (keys present only on steps where some env finished):
    ``final_obs`` [N, W+3] / ``_final_obs`` [N] bool, and ``episode`` = dict of
    ``reward``/``return`` float64[N], ``closed_trades``/``winning_trades``/
    ``open_lots``/``steps`` int64[N] with mask ``_episode`` [N] bool.
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int,
        config: EnvConfig | None = None,
        data: MarketData | None = None,
        span: tuple[int, int] | None = None,
        **overrides: Any,
    ) -> None:
        """``data``: history to trade (None: simulated); ``span``: the bars ``lo..hi-1`` of
        it that episodes lie within (default: all); ``overrides``: EnvConfig fields."""
        self.config = make_config(config, overrides)
        self.core = TradingCore(num_envs, self.config, data, span=span)
        self.num_envs = num_envs
        self.single_observation_space = observation_space(self.config)
        self.single_action_space = gym.spaces.Discrete(self.config.num_actions)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.render_mode = None
        self._started = False

    def scale_costs(self, fraction: float) -> None:
        """Charge ``fraction`` (0..1) of the configured fee and slippage from now on (a training
        curriculum, ``--cost-warmup``; 1 restores the configured costs)."""
        self.core.ledger.scale_costs(fraction)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all envs; env i is seeded ``seed + i`` (or ``seed[i]``); None continues its RNG."""
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"got {len(seeds)} seeds for {n} envs")
        rngs = self.core.rngs
        for i, s in enumerate(seeds):
            if s is not None or rngs[i] is None:
                rngs[i] = seeding.np_random(s)[0]
        self.core.reset_rows(self.core.rows)
        self._started = True
        return self.core.observe(), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step all envs with actions [N] int; finished envs auto-reset in the same step."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        core = self.core
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs)
        if (actions.view(np.uint64) >= self.config.num_actions).any():  # negatives wrap to huge
            raise ValueError(f"actions must lie in 0..{self.config.num_actions - 1}")
        rewards, terminated, truncated = core.step(actions)
        obs = core.observe()
        infos: dict[str, Any] = {}
        done = terminated | truncated
        if done.any():
            rows = np.flatnonzero(done)
            if len(rows) == self.num_envs:  # every env at once (the usual case): no gathers
                episode = core.episode_stats(slice(None))
                final_obs = obs
            else:
                episode = {}
                for key, value in core.episode_stats(rows).items():
                    full = np.zeros(self.num_envs, value.dtype)
                    full[rows] = value
                    episode[key] = full
                final_obs = np.zeros_like(obs)
                final_obs[rows] = obs[rows]
            infos = {"final_obs": final_obs, "_final_obs": done, "episode": episode, "_episode": done.copy()}
            core.reset_rows(rows)
            if final_obs is obs:
                obs = core.observe()
            else:
                obs[rows] = core.observe(rows)
        return obs, rewards, terminated, truncated, infos

    def get_state(self) -> dict[str, Any]:
        """Complete state of all N envs (arrays, positions, RNG states, step counters)."""
        state = self.core.get_state()
        state["started"] = self._started
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore ``get_state()``; later steps reproduce the original bit for bit."""
        self.core.set_state(state)
        self._started = bool(state["started"])
