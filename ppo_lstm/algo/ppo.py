"""The PPO update with truncated BPTT over whole env sequences (as in CleanRL's LSTM PPO).

A minibatch is a set of env sequences ``[T, B]``; each is replayed from its stored
initial LSTM state with done-masking, so the first minibatch reproduces the
rollout's log-probs (ratio 1 up to float rounding). On W ranks each rank computes the
gradient of its 1/W of every minibatch's sequences, and one sum per gradient step
gives every rank the whole minibatch's gradient.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from .agent import RecurrentActorCritic, sequence_boundaries
from .buffer import RolloutBatch
from .value_norm import RunningMeanStd
from ..config.plan import share, shares
from ..distributed import Comm


@dataclass
class PPOSettings:
    """Hyper-parameters of one update (a view of the training config)."""

    clip: float
    epochs: int
    minibatches: int
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    clip_vloss: bool
    norm_adv: bool
    target_kl: float | None
    autocast: bool = False  # the forward pass in bfloat16 (torch.autocast on the batch's device)
    micro_batches: int = 1  # pieces of each rank's share of a minibatch, whose gradients add up before the sum
    shard: bool = True  # each rank computes its share of a minibatch (else every rank the whole of it, no sum)


@dataclass
class UpdateStats:
    """Means over every minibatch of every epoch run (losses, entropy, approx-KL, clip fraction);
    the explained variance is of the rollout's values. A non-finite loss excludes its
    minibatch and every later one from the means; ``finite`` is False then."""

    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clip_fraction: float
    explained_variance: float
    epochs_run: int
    finite: bool

    @classmethod
    def from_row(cls, row: list[float], epochs_run: int) -> "UpdateStats":
        """From :attr:`PendingStats.row`'s values: 5 sums, the count, the explained variance, the finite flag."""
        count = max(row[5], 1.0)
        pg, v, ent, kl, cf = (x / count for x in row[:5])
        return cls(pg, v, ent, kl, cf, row[6], epochs_run, bool(row[7]))


@dataclass
class PendingStats:
    """An update's statistics, still on the device: ``row`` ``[8]`` float32 holds the sums
    of policy loss, value loss, entropy, approx-KL and clip fraction over the minibatches
    counted, their count, the explained variance and the finite flag (1.0 or 0.0).
    :meth:`fetch` brings them to the host in one copy; the trainer adds its own flags
    to the same copy."""

    row: Tensor
    epochs_run: int

    def fetch(self) -> UpdateStats:
        return UpdateStats.from_row(self.row.tolist(), self.epochs_run)


class FlatGradients:
    """Every parameter's ``.grad`` as a view into one flat buffer ``[P + E]`` (P parameters in
    all, then ``extra`` E values that travel with the gradients in the same collective).

    Zeroing, averaging across ranks and scaling the gradients are then one operation
    each, where ``optimizer.zero_grad`` and ``nn.utils.clip_grad_norm_`` take one per
    parameter. Backward accumulates into the views in place, and the optimizer reads
    them as usual. Results are bit for bit those of ``zero_grad(set_to_none=True)`` and
    ``clip_grad_norm_``: the norm is taken per parameter, in the same order, and the same
    clip factor multiplies every element.
    """

    def __init__(self, parameters: list[nn.Parameter], extra: int = 0) -> None:
        self.size = sum(p.numel() for p in parameters)  # P
        self.flat = torch.zeros(self.size + extra, device=parameters[0].device, dtype=parameters[0].dtype)
        self.extra = self.flat[self.size:]  # [E]
        self.grads: list[Tensor] = []
        offset = 0
        for p in parameters:
            p.grad = self.flat[offset:offset + p.numel()].view_as(p)
            self.grads.append(p.grad)
            offset += p.numel()

    def zero_(self) -> None:
        self.flat.zero_()

    def clip_norm_(self, max_norm: float) -> Tensor:
        """Scale the gradients so that their global 2-norm is at most ``max_norm``; returns the norm before."""
        total = nn.utils.get_total_norm(self.grads, 2.0, foreach=True)
        self.flat[:self.size].mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total


def explained_variance(predicted: Tensor, target: Tensor) -> Tensor:
    """1 - Var[target - predicted] / Var[target], a 0-dim tensor on their device; nan when
    the target is constant."""
    var = target.var()
    return torch.where(var == 0, torch.full_like(var, float("nan")), 1 - (target - predicted).var() / var)


STEP_STATS = 6  # per gradient step: policy loss, value loss, entropy, approx-KL, clip fraction, non-finite losses


@dataclass
class Minibatch:
    """One gradient step's env sequences: ``order[envs]`` of the batch, the whole minibatch
    ``[T, B]``, with its advantages' mean and std when they are normalised."""

    order: Tensor  # [B_total] the epoch's permutation, on the CPU
    order_on_device: Tensor  # the same on the batch's device
    envs: slice  # the minibatch's positions in ``order``
    advantage_moments: Optional[tuple[Tensor, Tensor]]


def _piece_loss(agent: RecurrentActorCritic, batch: RolloutBatch, settings: PPOSettings, minibatch: Minibatch,
                piece: slice, starts_on_host: Tensor) -> Tensor:
    """Backward the loss of ``piece`` (positions in ``minibatch.order``) weighted by its share of
    the minibatch's sequences, so the pieces' gradients add up to the whole minibatch's.
    Returns its :data:`STEP_STATS` ``[6]``, weighted the same way (the count of non-finite losses unweighted)."""
    weight = (piece.stop - piece.start) / (minibatch.envs.stop - minibatch.envs.start)
    device = batch.obs.device
    boundaries = sequence_boundaries(starts_on_host[:, minibatch.order[piece]])
    mb = batch.select_envs(minibatch.order_on_device[piece])  # [T, b]
    with torch.autocast(device.type, dtype=torch.bfloat16) if settings.autocast else nullcontext():
        logits, values, _ = agent(mb.obs, (mb.initial_h, mb.initial_c), mb.episode_starts, boundaries)
    logits, values = logits.float(), values.float()  # the loss in float32 (no-ops without autocast)
    all_log_probs = logits.log_softmax(-1)  # [T, b, A]
    new_log_probs = all_log_probs.gather(-1, mb.actions.long().unsqueeze(-1)).squeeze(-1)  # [T, b]
    entropy = -(all_log_probs.exp() * all_log_probs).sum(-1).mean() * weight
    log_ratio = new_log_probs - mb.log_probs
    ratio = log_ratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean() * weight
        clip_fraction = ((ratio - 1).abs() > settings.clip).float().mean() * weight

    advantages = mb.advantages
    if minibatch.advantage_moments is not None:  # the whole minibatch's, not the piece's
        mean, std = minibatch.advantage_moments
        advantages = (advantages - mean) / (std + 1e-8)
    policy_loss = torch.max(
        -advantages * ratio, -advantages * ratio.clamp(1 - settings.clip, 1 + settings.clip)
    ).mean() * weight
    if settings.clip_vloss:
        clipped = mb.values + (values - mb.values).clamp(-settings.clip, settings.clip)
        value_loss = 0.5 * torch.max((values - mb.returns) ** 2, (clipped - mb.returns) ** 2).mean() * weight
    else:
        value_loss = 0.5 * ((values - mb.returns) ** 2).mean() * weight
    loss = policy_loss - settings.ent_coef * entropy + settings.vf_coef * value_loss
    loss.backward()
    return torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(), approx_kl, clip_fraction,
                        (~torch.isfinite(loss)).float()])


def ppo_update(agent: RecurrentActorCritic, optimizer: torch.optim.Optimizer, batch: RolloutBatch,
               settings: PPOSettings, permutation_generator: torch.Generator, comm: Comm,
               starts_on_host: Optional[Tensor] = None, value_norm: Optional[RunningMeanStd] = None) -> PendingStats:
    """Run ``epochs`` passes of minibatch PPO over the combined ``batch`` (``[T, B_total]`` sequences).

    Every rank calls this with the same combined batch and the same generator state, so
    every rank draws the same minibatches. Each gradient step is sharded (``settings.shard``;
    otherwise every rank computes the whole minibatch, and no collective runs): rank r runs
    forward and backward on its :func:`share` of the minibatch's sequences only (in
    ``micro_batches`` pieces), each piece's loss weighted by its share of the minibatch,
    and one ``comm.sum_`` adds the ranks' gradients together with the step's statistics
    (:data:`STEP_STATS`). Every rank then holds the whole minibatch's gradient and
    statistics, bit for bit alike, and clips and steps alike. Advantages are normalised
    with the whole minibatch's mean and std, which every rank computes from the batch.

    Nothing in the loop waits for the device but the target-KL stop: the episode
    boundaries come from ``starts_on_host`` (``batch.episode_starts`` on the CPU, copied
    once if not given), and the statistics and the finite flag accumulate on the device
    (:class:`PendingStats`). A non-finite loss on any rank's share reaches every rank in
    the step's sum; it does not stop the loop (the trainer undoes such an update) but
    ends the epochs with ``target_kl``, whose stop is decided on the whole minibatches' KL.

    ``value_norm`` (``--norm-value``; None: off): its statistics first take in the batch's
    returns ``[T, B_total]``, alike on every rank (the batch is), then the critic trains on the
    returns and old values normalised with them (one device -> host copy of two numbers).
    """
    if value_norm is not None:
        value_norm.update(batch.returns)
        batch = value_norm.normalized_batch(batch)
    num_envs = batch.num_envs
    if not 1 <= settings.minibatches <= num_envs:
        raise ValueError(f"{settings.minibatches} minibatches of the batch's {num_envs} env sequences leave one empty")
    device = batch.obs.device
    if starts_on_host is None:
        starts_on_host = batch.episode_starts.cpu()
    gradients = FlatGradients(list(agent.parameters()), extra=STEP_STATS)
    sums = torch.zeros(6, device=device)  # pg, v, entropy, kl, clipfrac, count
    finite = torch.ones((), dtype=torch.bool, device=device)  # every loss so far was finite
    count = torch.ones(1, device=device)
    epochs_run = 0
    parts = (comm.rank, comm.world_size) if settings.shard else (0, 1)  # this rank's part of each minibatch
    for _ in range(settings.epochs):
        order = torch.randperm(num_envs, generator=permutation_generator)  # on the CPU, like the generator
        # a copy from pageable memory would wait for the GPU: from pinned memory it does not
        order_on_device = order.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else order
        epoch_kl = torch.zeros((), device=device)
        for envs in shares(num_envs, settings.minibatches):  # near-equal: sizes differ by one sequence at most
            moments = None
            if settings.norm_adv:
                advantages = batch.advantages[:, order_on_device[envs]]  # [T, B] the whole minibatch's
                moments = advantages.mean(), advantages.std()
            minibatch = Minibatch(order, order_on_device, envs, moments)
            mine = share(envs.stop - envs.start, *parts)
            gradients.zero_()
            for k in range(settings.micro_batches):
                piece = share(mine.stop - mine.start, k, settings.micro_batches)
                if piece.stop > piece.start:
                    at = envs.start + mine.start
                    gradients.extra.add_(_piece_loss(agent, batch, settings, minibatch,
                                                     slice(at + piece.start, at + piece.stop), starts_on_host))
            if parts[1] > 1:
                comm.sum_(gradients.flat)  # [P + 6]: the minibatch's gradient and statistics on every rank
            step_stats = torch.cat([gradients.extra[:5], count])
            finite = finite & (gradients.extra[5] == 0)
            gradients.clip_norm_(settings.max_grad_norm)
            optimizer.step()
            sums += torch.where(finite, step_stats, torch.zeros_like(step_stats))
            epoch_kl = torch.maximum(epoch_kl, step_stats[3])
        epochs_run += 1
        if settings.target_kl is None:
            continue
        if not bool(finite) or float(epoch_kl) > settings.target_kl:  # alike on every rank
            break

    ev = explained_variance(batch.values.flatten(), batch.returns.flatten())
    return PendingStats(torch.cat([sums, ev.view(1), finite.float().view(1)]), epochs_run)
