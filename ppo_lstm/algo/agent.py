"""Recurrent actor-critic: MLP encoder -> LSTM -> categorical policy head and value head.

Shapes: T time steps, B env sequences, D observation size, H LSTM size, A actions.
The LSTM state is a pair ``(h, c)``, each ``[1, B, H]``.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LSTMState = tuple[Tensor, Tensor]


class StepWeights(NamedTuple):
    """The tensors :meth:`RecurrentActorCritic.step` reads (the module's own parameters, not
    copies), fetched once: each attribute of an ``nn.Module`` is a Python-level lookup."""

    encoder_1: Tensor  # [hidden, D]
    encoder_1_bias: Tensor
    encoder_2: Tensor  # [hidden, hidden]
    encoder_2_bias: Tensor
    lstm_ih: Tensor  # [4H, hidden]
    lstm_hh: Tensor  # [4H, H]
    lstm_ih_bias: Tensor
    lstm_hh_bias: Tensor
    policy: Tensor  # [A, H]
    policy_bias: Tensor
    value: Tensor  # [1, H]
    value_bias: Tensor


def sequence_boundaries(episode_starts: Tensor) -> list[int]:
    """``[0, t1, ..., T]``: the time steps ``t > 0`` where some env of ``episode_starts``
    ``[T, B]`` starts an episode, between 0 and T. On a GPU tensor this costs a sync;
    a single step (``T = 1``) never does."""
    steps = episode_starts.shape[0]
    if steps == 1:
        return [0, 1]
    return [0, *(torch.nonzero(episode_starts[1:].any(dim=1)).flatten() + 1).tolist(), steps]


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class RecurrentActorCritic(nn.Module):
    """Shared MLP encoder and LSTM trunk with separate policy and value heads.

    Orthogonal init: gain sqrt(2) for the encoder, 1 for the LSTM weights, 0.01 for
    the policy head, 1 for the value head; every bias is 0.
    """

    def __init__(self, obs_dim: int, num_actions: int, hidden_size: int = 64, lstm_size: int = 64) -> None:
        super().__init__()
        self.lstm_size = lstm_size
        self.encoder = nn.Sequential(
            _orthogonal(nn.Linear(obs_dim, hidden_size), math.sqrt(2)),
            nn.Tanh(),
            _orthogonal(nn.Linear(hidden_size, hidden_size), math.sqrt(2)),
            nn.Tanh(),
        )
        self.lstm = nn.LSTM(hidden_size, lstm_size)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.zeros_(param)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.policy_head = _orthogonal(nn.Linear(lstm_size, num_actions), 0.01)
        self.value_head = _orthogonal(nn.Linear(lstm_size, 1), 1.0)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> LSTMState:
        """Zero LSTM state ``(h, c)``, each ``[1, B, H]``."""
        zeros = torch.zeros(1, batch, self.lstm_size, device=device)
        return zeros, zeros.clone()

    def actor_parameters(self) -> list[nn.Parameter]:
        """Encoder, LSTM and policy head: trained at ``--learning-rate-actor``."""
        return [*self.encoder.parameters(), *self.lstm.parameters(), *self.policy_head.parameters()]

    def critic_parameters(self) -> list[nn.Parameter]:
        """Value head: trained at ``--learning-rate-critic``."""
        return list(self.value_head.parameters())

    def forward(self, obs: Tensor, state: LSTMState, episode_starts: Tensor,
                boundaries: Optional[list[int]] = None) -> tuple[Tensor, Tensor, LSTMState]:
        """Replay sequences from ``state``, zeroing it where an episode starts.

        Args:
            obs: ``[T, B, D]`` observations.
            state: ``(h, c)``, each ``[1, B, H]``: the state before ``obs[0]``.
            episode_starts: ``[T, B]``, 1.0 where ``obs[t]`` is an episode's first
                observation (the state is reset to zero before that step).
            boundaries: :func:`sequence_boundaries` of ``episode_starts``, when the caller
                has them on the host already (finding them on a GPU costs a sync).

        Returns:
            logits ``[T, B, A]``, values ``[T, B]`` and the final state ``(h, c)``.

        The LSTM runs over each stretch between episode boundaries in one call; it
        only splits the sequence at time steps where some env starts an episode. The
        encoder and heads are called as functions (the modules' own kernels, bit for bit).
        """
        steps, batch, _ = obs.shape
        first, second = self.encoder[0], self.encoder[2]
        flat = obs.reshape(steps * batch, -1)
        features = torch.tanh(F.linear(torch.tanh(F.linear(flat, first.weight, first.bias)), second.weight,
                                       second.bias)).reshape(steps, batch, -1)
        h, c = state
        keep = 1.0 - episode_starts.to(features.dtype)  # [T, B]
        if boundaries is None:
            boundaries = sequence_boundaries(episode_starts)
        run_lstm = self._lstm_runner(features)
        outputs = []
        for start, end in zip(boundaries[:-1], boundaries[1:]):
            mask = keep[start].view(1, batch, 1)
            out, (h, c) = run_lstm(features[start:end], (h * mask, c * mask))
            outputs.append(out)
        hidden = torch.cat(outputs) if len(outputs) > 1 else outputs[0]  # [T, B, H]
        policy, value = self.policy_head, self.value_head
        return (F.linear(hidden, policy.weight, policy.bias), F.linear(hidden, value.weight, value.bias).squeeze(-1),
                (h, c))

    def _lstm_runner(self, features: Tensor) -> Callable[[Tensor, LSTMState], tuple[Tensor, LSTMState]]:
        """How the LSTM runs on ``features``' device: the op :attr:`lstm` itself calls, on its own
        weights (without the module's per-call Python; bit for bit the module's result), or, under
        ``torch.autocast``, explicitly in the autocast dtype (bfloat16 with ``--autocast bf16``).

        Left to autocast, cuDNN's RNN rule casts the LSTM to float16, whatever dtype the
        autocast region asks for, and the update has no gradient scaler. The explicit call is bit
        for bit the module's LSTM cast to that dtype (tests/distributed/test_gpu_readiness.py)."""
        device_type = features.device.type
        lstm = self.lstm
        if not torch.is_autocast_enabled(device_type):
            def run_module(x: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
                out, h, c = torch.lstm(x, state, lstm._flat_weights, lstm.bias, lstm.num_layers, lstm.dropout,
                                       lstm.training, lstm.bidirectional, lstm.batch_first)
                return out, (h, c)
            return run_module
        dtype = torch.get_autocast_dtype(device_type)
        weights = [w.to(dtype) for w in lstm._flat_weights]  # cast once per forward, as autocast's cache does

        def run(x: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
            with torch.autocast(device_type, enabled=False), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous")
                out, h, c = torch.lstm(x.to(dtype), (state[0].to(dtype), state[1].to(dtype)), weights, lstm.bias,
                                       lstm.num_layers, lstm.dropout, lstm.training, lstm.bidirectional,
                                       lstm.batch_first)
            return out, (h, c)
        return run

    def step_weights(self) -> StepWeights:
        """The parameters :meth:`step` uses, for callers that step many times in a row (a
        rollout). They are the parameters themselves: an in-place update shows through, but a
        parameter replaced by a new tensor does not, so fetch them again after any such change."""
        first, second, lstm = self.encoder[0], self.encoder[2], self.lstm
        return StepWeights(first.weight, first.bias, second.weight, second.bias, lstm.weight_ih_l0,
                           lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0, self.policy_head.weight,
                           self.policy_head.bias, self.value_head.weight, self.value_head.bias)

    def step(self, obs: Tensor, state: LSTMState, episode_starts: Tensor,
             any_start: Optional[bool] = None,
             weights: Optional[StepWeights] = None) -> tuple[Tensor, Tensor, LSTMState]:
        """One time step of B envs: :meth:`forward` with ``T = 1``, for the rollout and backtests.

        Args: ``obs`` ``[B, D]``; ``state`` ``(h, c)``, each ``[1, B, H]``; ``episode_starts``
        ``[B]``; ``any_start``: whether any of them is 1, when the caller knows it on the host
        (False skips the state's reset, a multiplication by 1); ``weights``: this module's
        :meth:`step_weights`, when the caller holds them (default: fetched here). Returns logits
        ``[B, A]``, values ``[B]`` and the new state. The LSTM is stepped with ``torch.lstm_cell``
        on its own weights, and the layers are called as functions (the same kernels as the
        modules, without their per-call Python): several times cheaper per step than ``nn.LSTM``
        on the CPU, and equal to :meth:`forward` up to float rounding.
        """
        logits, values, h, c = self.step_cell(obs, state[0][0], state[1][0], episode_starts, any_start, weights)
        return logits, values, (h[None], c[None])

    def step_cell(self, obs: Tensor, h: Tensor, c: Tensor, episode_starts: Tensor,
                  any_start: Optional[bool] = None,
                  weights: Optional[StepWeights] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`step` with the state as ``h``, ``c`` ``[B, H]`` (no layer dimension), in and
        out: for a loop of steps (the rollout), which then makes no view of the state per step.
        Returns logits ``[B, A]``, values ``[B]``, ``h``, ``c`` ``[B, H]``; bit for bit :meth:`step`."""
        w = self.step_weights() if weights is None else weights
        if any_start is not False:
            keep = (1.0 - episode_starts.to(obs.dtype)).view(-1, 1)  # [B, 1]
            h, c = h * keep, c * keep
        features = torch.tanh(F.linear(torch.tanh(F.linear(obs, w.encoder_1, w.encoder_1_bias)), w.encoder_2,
                                       w.encoder_2_bias))  # [B, hidden]
        h, c = torch.lstm_cell(features, (h, c), w.lstm_ih, w.lstm_hh, w.lstm_ih_bias, w.lstm_hh_bias)
        return F.linear(h, w.policy, w.policy_bias), F.linear(h, w.value, w.value_bias)[:, 0], h, c
