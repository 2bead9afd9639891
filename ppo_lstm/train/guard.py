"""The guard around each PPO update: one that gives non-finite losses, weights or outputs
is undone (weights and optimizer state back to the copies taken before it) and counted;
:data:`MAX_BAD_UPDATES` in a row end training on every rank.

On one worker a rank's verdict is final at once. On several, ranks that are not bitwise
equal (GPU kernels) could judge differently, so each verdict travels with the next
exchange and :meth:`UpdateGuard.agree` makes every rank act on it alike.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor

from ..algo.agent import RecurrentActorCritic, sequence_boundaries
from ..algo.buffer import RolloutBatch
from ..config.plan import share
from ..algo.rollout import NON_FINITE_ADVICE
from ..distributed import Comm
from ..errors import TrainingError
from ..rundir.logger import NullLogger, RunLogger

MAX_BAD_UPDATES = 3
Snapshot = tuple[list[Tensor], dict]  # the parameters and the optimizer's per-parameter state


def outputs_finite(agent: RecurrentActorCritic, batch: RolloutBatch, starts_on_host: Tensor, comm: Comm,
                   shard: bool = True) -> Tensor:
    """Whether the weights and the agent's outputs on ``batch`` ``[T, N*W]`` are all finite,
    as a 0-dim bool tensor on the agent's device, the same on every rank (huge but finite
    weights can still give inf/nan outputs, and crash the next rollout). Each rank checks
    its :func:`~ppo_lstm.algo.ppo.share` of the sequences, and one sum of the ranks' flags
    gives the verdict (without ``shard``, every rank checks the whole batch and no sum runs).
    ``starts_on_host``: the batch's episode starts ``[T, N*W]`` on the host."""
    parts = (comm.rank, comm.world_size) if shard else (0, 1)
    mine = share(batch.num_envs, *parts)
    part = batch.map(lambda _, t: t[:, mine])  # [T, N*W / W]
    with torch.no_grad():
        params = torch.cat([p.detach().reshape(-1) for p in agent.parameters()])
        logits, values, _ = agent(part.obs, (part.initial_h, part.initial_c), part.episode_starts,
                                  sequence_boundaries(starts_on_host[:, mine]))
        ok = torch.isfinite(params).all() & torch.isfinite(logits).all() & torch.isfinite(values).all()
    if parts[1] == 1:
        return ok
    return comm.sum((~ok).float().view(1))[0] == 0


class UpdateGuard:
    """Keeps, undoes and counts this rank's updates by their verdicts; warns in ``log``."""

    def __init__(self, agent: torch.nn.Module, optimizer: torch.optim.Optimizer, world_size: int,
                 log: Union[RunLogger, NullLogger]) -> None:
        self.agent, self.optimizer, self.world_size, self.log = agent, optimizer, world_size, log
        self.bad_updates = 0
        self.last_update_bad = False  # this rank judged its last update non-finite (told at the next exchange)
        self.undo: Optional[Snapshot] = None  # the weights before an update not yet agreed on

    def snapshot(self) -> Snapshot:
        """Copies of the parameters and the optimizer's per-parameter tensors (cheaper than deepcopy)."""
        params = [p.detach().clone() for p in self.agent.parameters()]
        state = {p: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                 for p, s in self.optimizer.state.items()}
        return params, state

    def judge(self, update: int, ok: bool, snapshot: Snapshot) -> bool:
        """This rank's verdict ``ok`` on update ``update``, taken from ``snapshot``: a bad one is
        undone at once. On one worker the verdict is counted at once; on several, a good
        update's snapshot is kept until :meth:`agree`. Returns whether the update was skipped."""
        self.undo = None
        self.last_update_bad = not ok
        if ok:
            if self.world_size == 1:
                self.bad_updates = 0
            else:
                self.undo = snapshot  # kept until every rank has agreed on this update
            return False
        self._restore(snapshot)
        if self.world_size == 1:
            self._count(update, "")
        return True

    def agree(self, update: int, bad_ranks: list[int]) -> None:
        """Act alike on every rank on the verdicts about update ``update`` that the exchange
        brought: if any rank found it non-finite, the ranks that kept it undo it too, and
        every rank counts it (several in a row end the job on every rank)."""
        if not bad_ranks:
            self.bad_updates = 0
        else:
            if self.undo is not None:
                self._restore(self.undo)
            self._count(update, f" on rank{'s' if len(bad_ranks) > 1 else ''} {', '.join(map(str, bad_ranks))}")
        self.undo = None
        self.last_update_bad = False

    def _count(self, update: int, where: str) -> None:
        """Warn about non-finite update ``update`` (found ``where``), undone on every rank; end
        training after :data:`MAX_BAD_UPDATES` in a row."""
        self.bad_updates += 1
        self.log.line(f"warning: update {update} gave non-finite losses or parameters{where}; skipped "
                      f"({self.bad_updates} in a row)", to_log=True)
        if self.bad_updates >= MAX_BAD_UPDATES:
            raise TrainingError(f"{MAX_BAD_UPDATES} updates in a row were non-finite; {NON_FINITE_ADVICE}")

    def _restore(self, snapshot: Snapshot) -> None:
        """Undo an update: parameters and optimizer state back to :meth:`snapshot`'s copies."""
        params, state = snapshot
        with torch.no_grad():
            for p, saved in zip(self.agent.parameters(), params):
                p.copy_(saved)
        self.optimizer.state.clear()
        self.optimizer.state.update(state)
