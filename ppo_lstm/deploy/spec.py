"""What a stream needs of a trained policy: ``PolicySpec``, the settings it records, and the step's type.

``StepFn`` is one step of the network for one env; ``ppo_lstm.deploy.torch_step.TorchStep`` is the
agent's own (``RecurrentActorCritic.step``), ``ppo_lstm.deploy.onnx_model.OnnxStep`` the exported
graph's. This module imports no torch (the ONNX route runs without it); ``checkpoint_fingerprint``,
``TorchStep`` and ``checkpoint_step`` live in ``torch_step.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from envs.config import EnvConfig

from ..errors import UsageError

# (obs [1, D] float32, h [1, H], c [1, H]) -> (logits [A] float32, value, h' [1, H], c' [1, H])
StepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, float, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class PolicySpec:
    """What a stream needs of a trained policy besides its weights.

    ``env``: the training env's settings (window, max position, costs, initial cash; its
    ``episode_length`` is the time feature's scale); ``fingerprint``: SHA-256 of the
    checkpoint's weights and settings (``checkpoint_fingerprint``); ``backend``:
    ``"checkpoint"`` or ``"onnx"``; ``features``: the data's feature columns the
    observation uses (``env.feature_names``: the training ``--features``, in order).
    """

    env: EnvConfig
    lstm_size: int
    fingerprint: str
    backend: str = "checkpoint"
    source: str = ""
    features: tuple[str, ...] = ()

    @property
    def ema_spans(self) -> tuple[int, ...]:
        """The spans of its EMA deviations: its env's (the training ``--ema-spans``)."""
        return self.env.spans

    @property
    def positions(self) -> tuple[int, ...]:
        """Signed lots of each action index: ``-K..K`` (``0..K`` with no_short)."""
        offset = 0 if self.env.no_short else self.env.max_position
        return tuple(a - offset for a in range(self.env.num_actions))

    def check_env(self, env: EnvConfig) -> None:
        """UsageError unless ``env`` (the settings to trade with) has this policy's feature columns and
        EMA spans."""
        if tuple(self.features) != env.feature_names:
            raise UsageError(f"{self.source}: the policy's feature columns {list(self.features)} are not its env's "
                             f"{list(env.feature_names)}")
        if tuple(self.ema_spans) != env.spans:
            raise UsageError(f"{self.source}: the policy's EMA spans {list(self.ema_spans)} are not its env's "
                             f"{list(env.spans)} (--ema-spans)")
