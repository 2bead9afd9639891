"""The PPO update with truncated BPTT over whole env sequences (as in CleanRL's LSTM PPO).

A minibatch is a set of env sequences ``[T, B]``; each is replayed from its stored
initial LSTM state with done-masking, so the first minibatch reproduces the
rollout's log-probs (ratio 1 up to float rounding).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
import torch
from torch import Tensor, nn

from .agent import RecurrentActorCritic
from .buffer import RolloutBatch
from .distributed import Comm


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


@dataclass
class UpdateStats:
    """Means over every minibatch of every epoch run (losses, entropy, approx-KL, clip fraction);
    the explained variance is of the rollout's values."""

    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clip_fraction: float
    explained_variance: float
    epochs_run: int
    finite: bool


class FlatGradients:
    """Every parameter's ``.grad`` as a view into one flat buffer ``[P]`` (P parameters in all).

    Zeroing and scaling the gradients are then one operation each, where
    ``optimizer.zero_grad`` and ``nn.utils.clip_grad_norm_`` take one per parameter
    (about 5 % of a gradient step at the default sizes, timed in isolation).
    Backward accumulates into the views in place, and the optimizer reads them as
    usual. Results are bit for bit those of ``zero_grad(set_to_none=True)`` and
    ``clip_grad_norm_``: the norm is taken per parameter, in the same order, and the
    same clip factor multiplies every element.
    """

    def __init__(self, parameters: list[nn.Parameter]) -> None:
        self.flat = torch.zeros(sum(p.numel() for p in parameters), device=parameters[0].device,
                                dtype=parameters[0].dtype)  # [P]
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
        self.flat.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total


def explained_variance(predicted: Tensor, target: Tensor) -> float:
    """1 - Var[target - predicted] / Var[target]; nan when the target is constant."""
    var = target.var()
    return float("nan") if var == 0 else float(1 - (target - predicted).var() / var)


def ppo_update(agent: RecurrentActorCritic, optimizer: torch.optim.Optimizer, batch: RolloutBatch,
               settings: PPOSettings, permutation_generator: torch.Generator, comm: Comm) -> UpdateStats:
    """Run ``epochs`` passes of minibatch PPO over ``batch`` (``[T, B_total]`` sequences).

    Every rank calls this with the same combined batch and the same generator state,
    so every rank takes identical steps. With ``target_kl``, the early stop and the
    non-finite-loss stop are decided on cross-rank means after each epoch, so all ranks
    stop together; without it the loop holds no collective (a non-finite loss ends it,
    on every rank alike, and the trainer undoes the update).
    """
    num_envs = batch.num_envs
    if num_envs % settings.minibatches:
        raise ValueError(f"{settings.minibatches} minibatches do not divide the batch's {num_envs} env sequences")
    device = batch.obs.device
    gradients = FlatGradients(list(agent.parameters()))
    sums = torch.zeros(6, device=device)  # pg, v, entropy, kl, clipfrac, count
    finite = True
    epochs_run = 0
    for _ in range(settings.epochs):
        order = torch.randperm(num_envs, generator=permutation_generator).to(device)
        epoch_kl = torch.zeros((), device=device)
        for envs in order.view(settings.minibatches, -1):  # [M, B / M] env indices
            mb = batch.select_envs(envs)
            with torch.autocast(device.type, dtype=torch.bfloat16) if settings.autocast else nullcontext():
                logits, values, _ = agent(mb.obs, (mb.initial_h, mb.initial_c), mb.episode_starts)
            logits, values = logits.float(), values.float()  # the loss in float32 (no-ops without autocast)
            all_log_probs = logits.log_softmax(-1)  # [T, B/M, A]
            new_log_probs = all_log_probs.gather(-1, mb.actions.long().unsqueeze(-1)).squeeze(-1)  # [T, B/M]
            entropy = -(all_log_probs.exp() * all_log_probs).sum(-1).mean()
            log_ratio = new_log_probs - mb.log_probs
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - log_ratio).mean()
                clip_fraction = ((ratio - 1).abs() > settings.clip).float().mean()

            advantages = mb.advantages
            if settings.norm_adv:
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
            policy_loss = torch.max(
                -advantages * ratio, -advantages * ratio.clamp(1 - settings.clip, 1 + settings.clip)
            ).mean()
            if settings.clip_vloss:
                clipped = mb.values + (values - mb.values).clamp(-settings.clip, settings.clip)
                value_loss = 0.5 * torch.max((values - mb.returns) ** 2, (clipped - mb.returns) ** 2).mean()
            else:
                value_loss = 0.5 * ((values - mb.returns) ** 2).mean()
            loss = policy_loss - settings.ent_coef * entropy + settings.vf_coef * value_loss

            if not torch.isfinite(loss):
                finite = False
                break
            gradients.zero_()
            loss.backward()
            gradients.clip_norm_(settings.max_grad_norm)
            optimizer.step()
            sums += torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach(),
                                 approx_kl, clip_fraction, torch.ones((), device=device)])
            epoch_kl = torch.maximum(epoch_kl, approx_kl)
        epochs_run += 1
        if settings.target_kl is None:
            if not finite:
                break  # no collective in this loop, so no rank waits; the trainer agrees on the skip
            continue
        # With a KL target, one collective per epoch on every rank, whatever happened
        # locally: the stop is decided on the cross-rank mean, and no rank can leave the
        # loop while another waits for it.
        kl_mean, any_bad = comm.mean(torch.stack([epoch_kl, torch.tensor(float(not finite), device=device)]))
        if any_bad > 0:
            finite = False
            break
        if float(kl_mean) > settings.target_kl:
            break

    count = max(float(sums[5]), 1.0)
    pg, v, ent, kl, cf = (float(x) / count for x in sums[:5])
    return UpdateStats(pg, v, ent, kl, cf, explained_variance(batch.values.flatten(), batch.returns.flatten()),
                       epochs_run, finite)
