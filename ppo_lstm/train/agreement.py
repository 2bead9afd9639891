"""The one collective of a training iteration: every rank's rollout and what the ranks
must agree on (its finished episodes, whether its share is done, the signal it
received, its speed, whether it found its previous update non-finite, whether its
clock passed ``--time-limit``, and rank 0's ``--train-for`` episodes), gathered together.

One collective instead of one for the rollout and another for the agreement: on CPU
workers each gloo collective costs about a millisecond of latency plus the wait for
the slowest rank, so every sync point cut is time the workers spend training.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..algo.buffer import RolloutBatch
from ..distributed import Comm
from ..algo.episodes import EPISODE_FIELDS


@dataclass
class Agreement:
    """What every rank now knows about this iteration."""

    finished: bool  # every rank has finished its share of episodes
    signum: int  # the largest signal number any rank received (0: none)
    rank_sps: list[float]  # env-steps/s of each rank, in rank order
    records: list[list[float]]  # every rank's episode records ``[k, 6]``, in rank order
    bad_update_ranks: list[int] = field(default_factory=list)  # ranks that found the previous update non-finite
    time_up: bool = False  # some rank's clock passed --time-limit (or --train-for)
    fitted_episodes: int = 0  # --train-for: the episodes rank 0 fitted to the time (0: none this iteration)


@dataclass(frozen=True)
class RankReport:
    """What one rank tells the others in an iteration's collective: the episode ``records``
    ``[k, 6]`` (:data:`EPISODE_FIELDS`) it counts; ``capacity`` (T * N), which bounds the
    episodes a rank can finish in one rollout, so every rank's row has one size (gloo needs
    equal sizes); whether its share is ``done``; the signal it received (0: none); the
    ``seconds`` its last rollout, gather and update took (the first iteration: its rollout so
    far); whether it judged its previous update non-finite (``bad_update``); whether its clock
    passed ``--time-limit`` (``time_up``); and rank 0's ``--train-for`` episodes (``fitted``,
    0: none; exact in float64 up to 2**53)."""

    records: np.ndarray
    capacity: int
    done: bool = False
    signum: int = 0
    seconds: float = 1.0
    bad_update: bool = False
    time_up: bool = False
    fitted: int = 0


HEADER = 7  # episode count, done flag, signal, env-steps/s, bad-update flag, time-up flag, fitted episodes
ALIGN = 8  # bytes: the float64 agreement row is read through a view, which needs an aligned offset


def agreement_row(report: RankReport) -> torch.Tensor:
    """One rank's row ``[7 + capacity * 6]`` (float64): ``[episode count, done flag, signal
    number or 0, env-steps/s, bad-update flag, time-up flag, fitted episodes or 0, records padded
    to capacity x 6]``."""
    r = report
    row = torch.zeros(HEADER + r.capacity * len(EPISODE_FIELDS), dtype=torch.float64)
    row[:HEADER] = torch.tensor([len(r.records), float(r.done), float(r.signum), r.capacity / max(r.seconds, 1e-9),
                                 float(r.bad_update), float(r.time_up), float(r.fitted)], dtype=torch.float64)
    row[HEADER:HEADER + r.records.size] = torch.from_numpy(r.records.reshape(-1))
    return row


def read_agreement(rows: torch.Tensor, capacity: int) -> Agreement:
    """The :class:`Agreement` of every rank's :func:`agreement_row` ``[W, 7 + capacity * 6]``."""
    rows = rows.cpu()
    gathered = [rows[r, HEADER:].view(capacity, -1)[: int(rows[r, 0])] for r in range(rows.shape[0])]
    return Agreement(bool(rows[:, 1].sum() == rows.shape[0]), int(rows[:, 2].max()), rows[:, 3].tolist(),
                     torch.cat(gathered).tolist(), torch.nonzero(rows[:, 4]).flatten().tolist(),
                     bool(rows[:, 5].any()), int(rows[:, 6].max()))


def exchange(comm: Comm, batch: RolloutBatch, report: RankReport) -> tuple[RolloutBatch, Agreement]:
    """Gather every rank's ``batch`` ``[T, N]`` and ``report`` (:func:`agreement_row`) in ONE collective.

    Both travel as raw bytes in one row per rank (``[W, bytes]``): the batch's
    :meth:`~RolloutBatch.packed` rows ``[N, F]``, zero bytes up to the next multiple of
    8 (N * F float32 values may be an odd number), and the float64 agreement row, so
    every value arrives bit for bit. Returns the combined batch ``[T, N * W]`` (rank
    order) and the :class:`Agreement`.
    """
    rows = batch.packed()  # [N, F]
    agreement = agreement_row(report).to(rows.device)
    size = rows.numel() * rows.element_size()
    split = -(-size // ALIGN) * ALIGN  # the agreement row starts on an 8-byte boundary, whatever N * F is
    padding = torch.zeros(split - size, dtype=torch.uint8, device=rows.device)
    payload = torch.cat([rows.reshape(-1).view(torch.uint8), padding, agreement.view(torch.uint8)])  # [bytes]
    everyone = comm.gather(payload.unsqueeze(0), dim=0)  # [W, bytes]
    batch_rows = everyone[:, :size].contiguous().view(rows.dtype).reshape(-1, rows.shape[1])  # [N * W, F]
    agreed = read_agreement(everyone[:, split:].contiguous().view(torch.float64), report.capacity)
    return batch.unpacked(batch_rows), agreed
