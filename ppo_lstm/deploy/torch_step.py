"""The torch side of a checkpoint's policy: its fingerprint, the agent's network step, and loading it.

``checkpoint_fingerprint`` is the SHA-256 of a checkpoint's weights and settings (states and ONNX
models record it); ``TorchStep`` is the ``StepFn`` of ``RecurrentActorCritic.step``, the call the
backtest makes; ``checkpoint_step`` loads both from a checkpoint file or directory. The ONNX route
never imports this module.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch

from ..algo.agent import RecurrentActorCritic
from ..config.schema import TrainConfig
from ..config.migrate import fingerprint_env_settings
from .spec import PolicySpec


def checkpoint_fingerprint(agent: RecurrentActorCritic, config: TrainConfig) -> str:
    """SHA-256 (hex) of the agent's weights and the checkpoint's network and env settings."""
    digest = hashlib.sha256()
    settings = {"env": fingerprint_env_settings(config.env), "hidden_size": config.hidden_size, "lstm_size": config.lstm_size}
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
    from ..evaluation.loading import checkpoint_file, load_policy

    path = checkpoint_file(Path(checkpoint))
    agent, config = load_policy(path, device)
    spec = PolicySpec(env=config.env, lstm_size=config.lstm_size,
                      fingerprint=checkpoint_fingerprint(agent, config), backend="checkpoint", source=str(path),
                      features=config.env.feature_names)
    return spec, TorchStep(agent, device)
