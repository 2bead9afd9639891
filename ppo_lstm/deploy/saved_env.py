"""A saved model's env settings as this version reads them, without torch (the ONNX route reads them so).

``env_as_this_version`` is the env half of ``ppo_lstm.config.as_this_version``: a setting the
saving version lacked is what its run trained with (``ema_spans`` None, ``feature_window`` 256),
and ``feature_window`` without feature columns, which then means nothing, is today's default.
``ppo_lstm.config`` imports torch; this copy of its rule does not (``tests/deploy`` checks the two agree).
"""
from __future__ import annotations

from typing import Any

from envs.data.features import FEATURE_WINDOW, SAVED_FEATURE_WINDOW

ENV_SAVED_BEFORE: dict[str, Any] = {"ema_spans": None, "feature_window": SAVED_FEATURE_WINDOW}


def env_as_this_version(env: Any) -> dict[str, Any]:
    """Saved env settings (a dict of any version; anything else reads as none) as this version reads them."""
    env = {**ENV_SAVED_BEFORE, **(env if isinstance(env, dict) else {})}
    if not str(env.get("features") or "").strip():
        env["feature_window"] = FEATURE_WINDOW
    return env
