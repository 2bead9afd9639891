"""Market sources: where N envs' prices come from, behind one small interface.

An episode is ``W+L+1`` bars, ``0..W+L``; decision ``j`` is taken after bar
``t = W+j`` closes, fills at bar ``t+1``'s open and is marked at its close.
``envs.markets.simulated.SimulatedMarket`` draws a fresh seeded path per episode;
``envs.markets.historical.HistoricalMarket`` picks a random start offset into a file.
Both write each new episode's normalised returns into the observer's ``z``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from envs.config import EnvConfig

Rows = np.ndarray | slice  # env indices, or slice(None) for all envs in order


class Market(ABC):
    """Prices of N envs' episodes. ``rngs[i]`` is env i's generator; env i draws from it alone."""

    def __init__(self, num_envs: int, config: EnvConfig, z: np.ndarray) -> None:
        self.n, self.W = num_envs, config.window
        self.bars = config.window + config.episode_length + 1
        self.config = config
        self.z = z  # [N, W+L] float32, the observer's normalised returns

    @abstractmethod
    def forget(self, i: int) -> None:
        """Drop what env i drew ahead from its generator (it was reseeded)."""

    @abstractmethod
    def begin(self, rows: np.ndarray, sel: Rows, rngs: list) -> np.ndarray:
        """New episodes for envs ``rows`` [m] (``sel``: the same envs, a slice when all).

        Fills ``z[sel]``; returns each env's close of bar W [m] (the first decision's).
        """

    @abstractmethod
    def next_bar(self, t0: int, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Open and close [N] of the bar each env's next decision fills at: bar ``W + t + 1``.

        ``t`` [N]: decisions taken; ``t0``: their common value, or -1 when envs are out
        of step (then the bars are gathered per env).
        """

    @property
    @abstractmethod
    def open(self) -> np.ndarray:
        """Opens [N, W+L+1] of every env's episode."""

    @property
    @abstractmethod
    def close(self) -> np.ndarray:
        """Closes [N, W+L+1] of every env's episode."""

    @abstractmethod
    def get_state(self) -> dict[str, Any]:
        """State entries (besides ``open``/``close``): the episodes and the variate pools."""

    @abstractmethod
    def set_state(self, state: dict[str, Any], open_: np.ndarray, close: np.ndarray) -> None:
        """Restore from a core state whose ``open``/``close`` [N, W+L+1] were shape checked."""

