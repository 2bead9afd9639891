"""What a stream needs of a trained policy: ``PolicySpec``, its fingerprint, and the network step.

``StepFn`` is one step of the network for one env; ``TorchStep`` is the agent's own
(``RecurrentActorCritic.step``), ``ppo_lstm.deploy.onnx_model.OnnxStep`` the exported graph's.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from envs.config import EnvConfig
from envs.data.features import SAVED_FEATURE_WINDOW

from ..algo.agent import RecurrentActorCritic
from ..config import TrainConfig
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


def env_settings(env: EnvConfig) -> dict[str, Any]:
    """``asdict(env)`` less ``ema_spans`` when it gives no spans (None, "" or "none") and less
    ``feature_window`` without feature columns or at 256 (its default before 1,024): the settings
    a fingerprint and a state's ``policy`` entry record, so those of a policy written before the
    settings existed are the ones recorded then (``ppo_lstm.config.as_this_version`` reads them back)."""
    settings = asdict(env)
    if not env.spans:
        settings.pop("ema_spans", None)
    if not env.feature_names or env.feature_window == SAVED_FEATURE_WINDOW:
        settings.pop("feature_window", None)
    return settings


def checkpoint_fingerprint(agent: RecurrentActorCritic, config: TrainConfig) -> str:
    """SHA-256 (hex) of the agent's weights and the checkpoint's network and env settings."""
    digest = hashlib.sha256()
    settings = {"env": env_settings(config.env), "hidden_size": config.hidden_size, "lstm_size": config.lstm_size}
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, tensor in sorted(agent.state_dict().items()):
        value = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()


class TorchStep:
    """The agent's :meth:`RecurrentActorCritic.step` for one env: the call the backtest makes."""

    def __init__(self, agent: RecurrentActorCritic, device: torch.device | str = "cpu") -> None:
        self.agent, self.device = agent, torch.device(device)
        self.starts = torch.zeros(1, device=self.device)  # the state is zeroed by the caller, not here

    def __call__(self, obs: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, float, np.ndarray,
                                                                               np.ndarray]:
        dev = self.device
        with torch.inference_mode():
            state = (torch.from_numpy(h)[None].to(dev), torch.from_numpy(c)[None].to(dev))  # [1, 1, H]
            logits, value, (h2, c2) = self.agent.step(torch.from_numpy(obs).to(dev), state, self.starts)
            return logits[0].cpu().numpy(), float(value[0]), h2[0].cpu().numpy(), c2[0].cpu().numpy()


def checkpoint_step(checkpoint: str | os.PathLike, device: torch.device | str = "cpu"
                    ) -> tuple[PolicySpec, TorchStep]:
    """The spec and network step of a checkpoint file or directory (as ``evaluate-ppo-lstm
    --checkpoint``); UsageError (one line) for an unusable file."""
    from ..evaluation.cli import checkpoint_file, load_policy  # evaluate imports much; only the loader is needed

    path = checkpoint_file(Path(checkpoint))
    agent, config = load_policy(path, device)
    spec = PolicySpec(env=config.env, lstm_size=config.lstm_size,
                      fingerprint=checkpoint_fingerprint(agent, config), backend="checkpoint", source=str(path),
                      features=config.env.feature_names)
    return spec, TorchStep(agent, device)
