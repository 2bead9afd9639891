"""The one collective every update ends with: each rank's finished episodes, whether its
share is done, the signal it received and its speed, in one fixed-size row per rank."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .distributed import Comm
from .logger import EPISODE_FIELDS


@dataclass
class Agreement:
    """What every rank now knows about the update just done."""

    finished: bool  # every rank has finished its share of episodes
    signum: int  # the largest signal number any rank received (0: none)
    rank_sps: list[float]  # env-steps/s of each rank, in rank order
    records: list[list[float]]  # every rank's episode records ``[k, 6]``, in rank order


def agree(comm: Comm, records: np.ndarray, done: bool, signum: int, seconds: float, capacity: int,
          device: torch.device) -> Agreement:
    """Exchange one row per rank. Each row has a fixed size (gloo needs equal sizes):
    ``[episode count, done flag, signal number or 0, env-steps/s, records padded to capacity x 6]``,
    where ``capacity`` (T * N) bounds the episodes a rank can finish in one rollout and
    ``records`` ``[k, 6]`` (:data:`EPISODE_FIELDS`) are the ones it counts.
    """
    row = torch.zeros(1, 4 + capacity * len(EPISODE_FIELDS), dtype=torch.float64)
    row[0, :4] = torch.tensor([len(records), float(done), float(signum), capacity / seconds])
    row[0, 4:4 + records.size] = torch.from_numpy(records.reshape(-1))
    rows = comm.gather(row.to(device), dim=0).cpu()  # [W, 4 + capacity * 6]
    gathered = [rows[r, 4:].view(capacity, -1)[: int(rows[r, 0])] for r in range(comm.world_size)]
    return Agreement(bool(rows[:, 1].sum() == comm.world_size), int(rows[:, 2].max()), rows[:, 3].tolist(),
                     torch.cat(gathered).tolist())
