"""The policy's recurrent step as an ONNX model: what it holds and how it is run (onnxruntime).

The graph (``ppo_lstm.deploy.export_onnx`` writes it) is one decision of B envs::

    (observation [B, D] float32, h [B, H] float32, c [B, H] float32)
        -> (logits [B, A] float32, value [B] float32, h_next [B, H], c_next [B, H])

``h`` and ``c`` are zeros at the first decision, then the previous call's ``h_next`` and
``c_next``. The greedy action is ``argmax(logits)``; its signed lots are ``positions[action]``.

The model's ``metadata_props`` carry what a consumer needs to build the observations
(``METADATA_KEYS``): the env settings (``env``, JSON, every field; of ``settings_format``,
read through :mod:`ppo_lstm.config.migrate`; and the main ones on their own), ``positions``, ``features`` (JSON list of the data's feature columns the observation
uses, in order: the training ``--features``, ``[]`` without), ``ema_spans`` (JSON list of
the spans of the EMA deviations that follow them: the training ``--ema-spans``, ``[]``
without; a model written before the key existed reads as ``[]``), the observation layout
and its constants (``return_clip``, ``rms_floor``, ``upnl_scale``, ``upnl_clip``,
``time_scale``, the feature columns' normalisation: ``feature_window`` (the training
``--feature-window``: ``1024``, or ``256,1024,4096`` for several windows), ``feature_clip``, ``feature_std_floor_rel``, ``feature_std_floor_abs``, and the EMA
deviations' ``ema_clip``), the sizes, and the checkpoint's ``fingerprint``. The layout
is ``envs.observation``'s; ``OnnxStep`` refuses a model whose constants are not this
version's (the feature constants are checked only for a model that reads features, the
EMA one only for a model with spans).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import EnvConfig
from envs.data.features import FEATURE_CLIP, STD_FLOOR_ABS, STD_FLOOR_REL, feature_window_setting
from envs.ema_deviation import EMA_CLIP
from envs.observation import RMS_FLOOR, RETURN_CLIP, UPNL_CLIP, UPNL_SCALE

from ..errors import UsageError, one_line
from ..config.migrate import SETTINGS_FORMAT, migrate_env
from .spec import PolicySpec

MODEL_FORMAT = "ppo-lstm-trader recurrent step"
MODEL_VERSION = "1"
INPUTS = ("observation", "h", "c")
OUTPUTS = ("logits", "value", "h_next", "c_next")
METADATA_KEYS = (
    "format", "version", "fingerprint", "source", "settings_format", "env", "window", "max_position", "no_short", "episode_length",
    "initial_cash", "fee_bps", "slippage_bps", "positions", "features", "ema_spans", "observation", "obs_dim",
    "num_actions", "hidden_size", "lstm_size", "return_clip", "rms_floor", "upnl_scale", "upnl_clip", "time_scale",
    "feature_window", "feature_clip", "feature_std_floor_rel", "feature_std_floor_abs", "ema_clip", "inputs",
    "outputs",
)
OBSERVATION_LAYOUT = (
    "[0:W] log returns of close of the last W bars, each divided by the RMS of the W returns ending at that bar "
    "(a file's first W bars: the RMS of its first full window), clipped to +-return_clip; [W] position / "
    "max_position; [W+1] unrealised PnL of the open lots / initial_cash * upnl_scale, clipped to +-upnl_clip; "
    "[W+2] bars held in the current position / time_scale, clipped at 1; [W+3+j] the data's column features[j] "
    "as a rolling z-score over the feature_window bars ending at the bar (float64: mean and population std of "
    "the column's defined, non-NaN, values among them), (x - mean) / std clipped to +-feature_clip, 0 where std "
    "<= feature_std_floor_rel * |mean| + feature_std_floor_abs; with several windows (feature_window N1,N2,..., "
    "K of them, increasing) column j has K such entries, [W+3+j*K+i] over the last Ni bars, and each F below "
    "counts len(features) * K entries; the first decision is at or after the first bar "
    "where every feature column is defined; [W+3+F+k] (F = len(features)) the log close's deviation from its "
    "EMA of span ema_spans[k], a z-score: alpha = 2 / (span + 1), a = 1 - alpha; level = log open of the data's "
    "first bar, then level = level * a + log close * alpha at every bar (float64); (log close - level) * sqrt(1 - a^2) "
    "/ a / rms, rms the RMS of the W log returns ending at the bar (floored at rms_floor), clipped to "
    "+-ema_clip (envs.ema_deviation). Lots: one lot = initial_cash / "
    "(max_position * close of the first decision bar) units; fills at the next open with slippage_bps, "
    "fee_bps on each fill's notional (ppo_lstm.deploy.policy)")


def constants() -> dict[str, str]:
    """The observation's constants, as this version builds it."""
    return {"return_clip": repr(RETURN_CLIP), "rms_floor": repr(RMS_FLOOR), "upnl_scale": repr(UPNL_SCALE),
            "upnl_clip": repr(UPNL_CLIP)}


def ema_constants() -> dict[str, str]:
    """The EMA deviations' constant (``envs.ema_deviation``), as this version applies it."""
    return {"ema_clip": repr(EMA_CLIP)}


def feature_constants(window: int | str) -> dict[str, str]:
    """The feature columns' normalisation constants (``envs.data.features``), as this version applies them
    with the ``--feature-window`` setting ``window`` (``1024``, or ``"256,1024,4096"``)."""
    return {"feature_window": str(window), "feature_clip": repr(FEATURE_CLIP),
            "feature_std_floor_rel": repr(STD_FLOOR_REL), "feature_std_floor_abs": repr(STD_FLOOR_ABS)}


def metadata(env: EnvConfig, hidden_size: int, lstm_size: int, fingerprint: str, source: str) -> dict[str, str]:
    """The metadata_props of an exported model (all values strings)."""
    offset = 0 if env.no_short else env.max_position
    return {
        "format": MODEL_FORMAT, "version": MODEL_VERSION, "fingerprint": fingerprint, "source": source,
        "settings_format": str(SETTINGS_FORMAT), "env": json.dumps(asdict(env), sort_keys=True),
        "window": str(env.window),
        "max_position": str(env.max_position), "no_short": json.dumps(env.no_short),
        "episode_length": str(env.episode_length), "initial_cash": repr(float(env.initial_cash)),
        "fee_bps": repr(float(env.fee_bps)), "slippage_bps": repr(float(env.slippage_bps)),
        "positions": json.dumps([a - offset for a in range(env.num_actions)]),
        "features": json.dumps(list(env.feature_names)), "ema_spans": json.dumps(list(env.spans)),
        "observation": OBSERVATION_LAYOUT,
        "obs_dim": str(env.obs_dim), "num_actions": str(env.num_actions), "hidden_size": str(hidden_size),
        "lstm_size": str(lstm_size), **constants(), "time_scale": str(env.episode_length),
        **feature_constants(feature_window_setting(env.feature_windows)),
        **ema_constants(),
        "inputs": "observation [B, obs_dim] float32; h [B, lstm_size] float32; c [B, lstm_size] float32 "
                  "(zeros at the first decision, then the previous h_next, c_next)",
        "outputs": "logits [B, num_actions] float32; value [B] float32; h_next [B, lstm_size]; c_next [B, lstm_size]",
    }


def spec_of(meta: dict[str, str], source: str) -> PolicySpec:
    """The policy spec a model's metadata describes; ValueError when it is not this format."""
    if meta.get("format") != MODEL_FORMAT:
        raise ValueError("its metadata has no 'format': it was not written by export-ppo-lstm")
    if meta.get("version") != MODEL_VERSION:
        raise ValueError(f"model format version {meta.get('version')!r}; this version reads {MODEL_VERSION}")
    saved = json.loads(meta["env"])
    if not isinstance(saved, dict):
        raise ValueError("its env is not a JSON object")
    version = meta.get("settings_format")  # absent: format 1, whose env left out settings at their old values
    try:
        saved = migrate_env(saved, None if version is None else int(version), source)
    except (UsageError, ValueError) as err:
        raise ValueError(f"its settings_format {version!r}: {one_line(err)}") from None
    unknown = sorted(set(saved) - {f.name for f in fields(EnvConfig)})
    if unknown:
        raise ValueError(f"its env holds settings this version does not know: {', '.join(unknown)}")
    env = EnvConfig(**saved)
    env.validate()
    features = tuple(json.loads(meta.get("features", "[]")))
    if features != env.feature_names:
        raise ValueError(f"its features {list(features)} are not its env's {list(env.feature_names)}")
    spans = tuple(json.loads(meta.get("ema_spans", "[]")))
    if spans != env.spans:
        raise ValueError(f"its ema_spans {list(spans)} are not its env's {list(env.spans)}")
    ours = {**constants(), **(feature_constants(feature_window_setting(env.feature_windows)) if features else {}),
            **(ema_constants() if spans else {})}
    other = [k for k in ours if meta.get(k) != ours[k]]
    if other:
        raise ValueError(f"its observation constants ({', '.join(other)}) are not this version's")
    return PolicySpec(env=env, lstm_size=int(meta["lstm_size"]), fingerprint=meta["fingerprint"], backend="onnx",
                      source=source, features=features)


class OnnxStep:
    """An exported step run by onnxruntime (one CPU thread): the ``StepFn`` of ``TradingPolicy``.

    ``spec``: what its metadata describes. UsageError (one line) for a missing or
    unreadable file, a model without this project's metadata, or no onnxruntime.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        path = Path(path)
        try:
            import onnxruntime
        except ImportError:
            raise UsageError("--model needs onnxruntime: pip install 'ppo-lstm-trader[onnx]'") from None
        if not path.is_file():
            raise UsageError(f"--model {path}: no such file")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: they are reported here, in one line
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - onnxruntime raises its own types for bad files
            raise UsageError(f"{path}: not an ONNX model onnxruntime can load ({one_line(err, 160)}); export it "
                             f"again with export-ppo-lstm") from None
        meta = dict(self.session.get_modelmeta().custom_metadata_map)
        try:
            self.spec = spec_of(meta, str(path))
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{path}: not a policy exported by export-ppo-lstm ({one_line(err)})") from None
        names = tuple(i.name for i in self.session.get_inputs())
        outputs = tuple(o.name for o in self.session.get_outputs())
        if names != INPUTS or outputs != OUTPUTS:
            raise UsageError(f"{path}: inputs {names} / outputs {outputs}, expected {INPUTS} / {OUTPUTS}")

    def __call__(self, obs: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, float, np.ndarray,
                                                                               np.ndarray]:
        logits, value, h2, c2 = self.session.run(None, {"observation": obs, "h": h, "c": c})
        return logits[0], float(value[0]), h2, c2
