"""Value normalisation (``--norm-value``): the critic learns the value targets standardised by
running statistics of them, as rl_games' ``normalize_value`` does.

The variant: a running mean and variance of the GAE returns (the value targets) of every
update's combined batch, combined with Chan et al.'s parallel formula exactly as OpenAI
baselines' ``RunningMeanStd`` (prior mean 0, variance 1, count 1e-4); the critic's output
``v`` stands for the value ``v * sqrt(var + 1e-8) + mean``. The rollout de-normalises every
value it stores or bootstraps from (so GAE and the returns are in reward units), and the
update first takes the batch's returns into the statistics, then trains the critic on the
returns and old values normalised with the statistics after that step.

The statistics are Python floats (float64), computed from the batch every rank holds after
the gather, so every rank holds the same ones without a collective; they travel in the
checkpoint as ``value_norm`` and come back bit for bit on ``--resume``. The checkpoint's
model is the normalised critic; a policy loaded for use (``evaluation.loading``, and so
deploy, serving and the ONNX export) has the statistics folded into its value head
(:func:`fold_into_value_head`), so the value it reports is in reward units.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .buffer import RolloutBatch

EPSILON = 1e-8  # added to the variance before its square root (Stable-Baselines3's VecNormalize's)
PRIOR_COUNT = 1e-4  # the prior's weight, baselines' RunningMeanStd(epsilon=1e-4)


@dataclass
class RunningMeanStd:
    """The running mean and (population) variance of every value seen, with the prior's count."""

    mean: float = 0.0
    var: float = 1.0
    count: float = PRIOR_COUNT

    def update(self, values: Tensor) -> None:
        """Take in ``values`` (any shape, e.g. the returns ``[T, B]``), in float64; a batch with a
        non-finite value is left out (its update is undone anyway), so the statistics stay finite."""
        flat = values.detach().reshape(-1).double()
        if flat.numel() == 0:
            return
        batch_mean, batch_var = (float(x) for x in torch.stack([flat.mean(), flat.var(unbiased=False)]).tolist())
        if not (math.isfinite(batch_mean) and math.isfinite(batch_var)):
            return
        self.update_from_moments(batch_mean, batch_var, float(flat.numel()))

    def update_from_moments(self, batch_mean: float, batch_var: float, batch_count: float) -> None:
        """Combine with a batch's mean, population variance and count (baselines' formula)."""
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count + delta * delta * self.count * batch_count / total
        self.mean, self.var, self.count = self.mean + delta * batch_count / total, m2 / total, total

    @property
    def std(self) -> float:
        return math.sqrt(self.var + EPSILON)

    def normalize(self, values: Tensor) -> Tensor:
        """``(values - mean) / std``, in ``values``' dtype and shape."""
        return (values - self.mean) / self.std

    def denormalize(self, values: Tensor) -> Tensor:
        """``values * std + mean``: the critic's output ``[...]`` in reward units."""
        return values * self.std + self.mean

    def normalized_batch(self, batch: RolloutBatch) -> RolloutBatch:
        """``batch`` with its ``values`` and ``returns`` ``[T, B]`` normalised (the rest shared)."""
        return dataclasses.replace(batch, values=self.normalize(batch.values), returns=self.normalize(batch.returns))

    def state(self) -> dict[str, float]:
        """For the checkpoint: plain floats, exact."""
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])


def fold_into_value_head(head: torch.nn.Linear, saved: dict[str, Any]) -> None:
    """Make ``head`` (the critic's last layer, ``[1, H]``) output the de-normalised value of the
    checkpoint statistics ``saved``: weight x std, bias x std + mean."""
    stats = RunningMeanStd()
    stats.load(saved)
    with torch.no_grad():
        head.weight.mul_(stats.std)
        head.bias.mul_(stats.std).add_(stats.mean)
