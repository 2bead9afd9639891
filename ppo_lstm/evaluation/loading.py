"""A checkpoint for evaluation: its file (``checkpoint_file``), its agent and training config
(``load_policy``), the fingerprint of the data it trained on (``load_policy_and_data``,
``ppo_lstm.train.data_fingerprint``), and which of a backtest's bars training and the choice
of ``best.pt`` read (``mark_training_bars``). UsageError (one line) for an unusable file.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from ..algo.agent import RecurrentActorCritic
from ..algo.value_norm import fold_into_value_head
from ..config.schema import TrainConfig
from ..distributed.cuda import configure_numerics
from ..distributed.devices import resolve_device
from ..errors import UsageError, one_line
from ..train.build import model_flags
from ..rundir.checkpoint import BEST_NAME, LATEST_NAME, CheckpointDir, CheckpointError, load_checkpoint
from .backtest import BacktestResult
from .samples import split_bars, training_entry

if TYPE_CHECKING:
    from envs.data import MarketData


def checkpoint_file(path: Path) -> Path:
    """``path`` if a file; in a directory its ``best.pt``, else the checkpoint ``latest`` names,
    else its newest ``checkpoint_u*.pt``. UsageError when there is none."""
    if not path.exists():
        raise UsageError(f"--checkpoint {path}: no such file or directory")
    if not path.is_dir():
        if path.name == LATEST_NAME:  # the pointer file: the checkpoint it names
            pointed = CheckpointDir(path.parent).latest()
            if pointed is None or not pointed.is_file():
                raise UsageError(f"--checkpoint {path} names no checkpoint file that exists")
            return pointed
        return path
    directory = CheckpointDir(path)
    for candidate in (path / BEST_NAME, directory.latest(), *directory.checkpoints()[:1]):
        if candidate is not None and candidate.is_file():
            return candidate
    raise UsageError(f"--checkpoint {path}: no {BEST_NAME}, 'latest' or checkpoint_u*.pt in this directory; "
                     f"pass a training run's --checkpoint-dir or a .pt file")


def load_policy(path: str | os.PathLike, device: torch.device | str = "cpu") -> tuple[RecurrentActorCritic,
                                                                                      TrainConfig]:
    """The checkpoint's agent (on ``device``, whatever world size wrote it) and its training
    config (``config.env`` holds its env settings). UsageError (one line) when unusable."""
    agent, config, _ = load_policy_and_data(path, device)
    return agent, config


def load_policy_and_data(path: str | os.PathLike, device: torch.device | str = "cpu"
                         ) -> tuple[RecurrentActorCritic, TrainConfig, Optional[list[dict]]]:
    """:func:`load_policy`, and the fingerprint of the checkpoint's training data (one dict per
    instrument, ``ppo_lstm.train.data_fingerprint``; None when it records none)."""
    path = Path(path)
    if not zipfile.is_zipfile(path):  # the trainer writes torch's zip format; a cut-off file has no zip directory
        raise UsageError(f"{path}: not a checkpoint (not a PyTorch archive, or truncated); pass a .pt file "
                         f"written by the trainer, or its --checkpoint-dir")
    try:
        state = load_checkpoint(path)
    except CheckpointError as err:
        raise UsageError(str(err)) from None
    saved = state.get("config")
    if not isinstance(saved, dict) or not isinstance(saved.get("env", {}), dict):
        raise UsageError(f"{path}: the checkpoint holds no training config; it was not written by the trainer")
    try:
        config = TrainConfig.from_dict(saved)
        config.env.validate()
        agent = RecurrentActorCritic(config.env.obs_dim, config.env.num_actions, config.hidden_size,
                                     config.lstm_size)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: the checkpoint's config is unusable ({one_line(err)})") from None
    try:
        agent.load_state_dict(state["model"])
    except (RuntimeError, TypeError, KeyError, AttributeError) as err:
        raise UsageError(
            f"{path}: the model does not match the checkpoint's settings ({model_flags(config)}): "
            f"{one_line(err)}") from None
    if config.norm_value:  # the critic learned standardised values: report them in reward units
        fold_into_value_head(agent.value_head, state["value_norm"])
    fingerprint = state.get("data")
    return agent.to(device), config, fingerprint if isinstance(fingerprint, list) else None


def mark_training_bars(result: BacktestResult, trained_on: Optional[list[dict]], name: str,
                       data: MarketData) -> BacktestResult:
    """``result`` with ``sample`` (which of its scored bars training and the selection of
    ``best.pt`` read, :func:`ppo_lstm.evaluation.samples.split_bars`), ``training_bars`` (how
    many lie within the training bars) and ``training_period``, where ``data`` holds the bars the
    checkpoint's fingerprint records for instrument ``name``; else ``foreign_data``, why not, and
    no label; unchanged when the checkpoint records no training data."""
    if not trained_on:
        return result
    entry, why = training_entry(data, trained_on, name)
    if entry is None:
        result.foreign_data = f"these are not the bars the checkpoint's training read ({why}); no bar is labelled " \
                              f"as training or hold-out"
        return result
    sample = split_bars(result.time[1:], [entry], name)  # the T scored bars
    if sample is None:
        return result
    result.sample = sample
    result.training_bars = sample.training
    result.training_period = sample.training_period
    return result


def policy_device(name: str) -> torch.device:
    """The device ``--device name`` runs the policy on (checked by :func:`resolve_device`); on a
    GPU with the numerics training ran with: IEEE float32 in cuDNN's LSTM, deterministic kernels."""
    device = torch.device(resolve_device(name, cpu_hint=""))
    if device.type == "cuda":
        configure_numerics(deterministic=True)
    return device
