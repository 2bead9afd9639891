"""Episode accounting: the fields a finished episode reports, its records ``[k, 6]``
and the totals summed over any number of episodes and ranks."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPISODE_FIELDS = ("reward", "return", "closed_trades", "winning_trades", "open_lots", "steps")  # env info keys


def episode_records(episode: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Records ``[k, 6]`` (:data:`EPISODE_FIELDS`, float64) of the envs in ``rows`` ``[k]``,
    from a vector env's ``infos["episode"]`` (each field ``[N]``)."""
    return np.stack([episode[key][rows] for key in EPISODE_FIELDS], axis=1).astype(np.float64)


@dataclass
class EpisodeTotals:
    """Sums over a set of finished episodes (any number of ranks)."""

    episodes: float = 0.0
    reward: float = 0.0
    dollar_return: float = 0.0
    closed: float = 0.0
    wins: float = 0.0
    open_lots: float = 0.0
    steps: float = 0.0

    def add(self, other: "EpisodeTotals") -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def of_records(cls, records: list[list[float]]) -> "EpisodeTotals":
        """Sums over episode records ``[k, 6]`` laid out as :data:`EPISODE_FIELDS`."""
        totals = cls(episodes=float(len(records)))
        for record in records:
            totals.reward += record[0]
            totals.dollar_return += record[1]
            totals.closed += record[2]
            totals.wins += record[3]
            totals.open_lots += record[4]
            totals.steps += record[5]
        return totals

    def as_list(self) -> list[float]:
        return [self.episodes, self.reward, self.dollar_return, self.closed, self.wins, self.open_lots, self.steps]

    @classmethod
    def from_list(cls, values: list[float]) -> "EpisodeTotals":
        return cls(*[float(v) for v in values])

    def means(self) -> dict[str, float]:
        """Per-episode means; the win rate is winning / closed trades (0 when none closed)."""
        n = max(self.episodes, 1.0)
        return {
            "mean_reward": self.reward / n,
            "mean_return": self.dollar_return / n,
            "win_rate": self.wins / self.closed if self.closed else 0.0,
            "closed_trades": self.closed,
            "open_lots": self.open_lots,
            "mean_steps": self.steps / n,
        }
