"""Saved settings of any version as this version reads them."""
from __future__ import annotations

from typing import Any

from envs.data.features import FEATURE_WINDOW, SAVED_FEATURE_WINDOW

from .plan import SAVED_RATE_CAP, STEPS_PER_ENV

# What a run saved before a setting existed trained with, where that is not today's default:
# before --cost-warmup, full costs; before --rate-cap, rates capped at x8; before --rollout-steps,
# 16 steps at every env count; before --ema-spans, no EMA deviations; before --feature-window, 256 bars.
SAVED_BEFORE: dict[str, Any] = {"cost_warmup": 0.0, "rate_cap": SAVED_RATE_CAP, "rollout_steps": STEPS_PER_ENV}
ENV_SAVED_BEFORE: dict[str, Any] = {"ema_spans": None, "feature_window": SAVED_FEATURE_WINDOW}


def as_this_version(values: dict[str, Any]) -> dict[str, Any]:
    """Saved training settings (``TrainConfig.to_dict()`` of any version) as this version reads
    them: a setting the saving version lacked is what its run trained with (:data:`SAVED_BEFORE`,
    :data:`ENV_SAVED_BEFORE`), not today's default, and ``feature_window`` without feature
    columns, which then means nothing, is today's default. Checkpoints
    (:meth:`TrainConfig.from_dict`), walk-forward state and tune studies read saved settings so."""
    env = values.get("env")
    env = {**ENV_SAVED_BEFORE, **(env if isinstance(env, dict) else {})}
    if not str(env.get("features") or "").strip():
        env["feature_window"] = FEATURE_WINDOW
    return {**SAVED_BEFORE, **values, "env": env}


def as_this_version_by_dest(values: dict[str, Any]) -> dict[str, Any]:
    """:func:`as_this_version` of settings keyed by dest (``"env.fee_bps"``), as a tune study records them."""
    nested = {k: v for k, v in values.items() if not k.startswith("env.")}
    read = as_this_version({**nested, "env": {k[4:]: v for k, v in values.items() if k.startswith("env.")}})
    return {**{k: v for k, v in read.items() if k != "env"}, **{f"env.{k}": v for k, v in read["env"].items()}}


