"""Files of any earlier format as this version reads them: one ordered chain of migrations.

Every file that holds a run's settings carries a format number: a checkpoint its
``format``; a walk-forward state, a tuning study and an ONNX model's metadata their
``settings_format`` beside the settings. :func:`migrate_checkpoint` and
:func:`migrate_settings` run the chain ``v1 -> v2 -> ...`` once, at load, so every other
module reads the current format only. A file newer than this version is refused in one
line. A change in what a setting means, or a new setting whose default differs from what
earlier runs trained with, takes a new format and a step of the chain.

Format 1 is every file written before the number was read. Its meaning is inferred, here
and only here, from the keys it holds: a setting the writing version lacked is what its run
trained with, not today's default, and the batch rule it trained under follows from
whether it held ``rollout_steps`` (``ppo_lstm.config.plan.RULES``). Format 3 lets
``feature_window`` name several windows (text); format 2's single window reads as it is.
Format 4 records ``schedule_rule``: earlier runs keep rule 1's clocks
(``ppo_lstm.config.schedule``).
"""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable

from envs.data.features import FEATURE_WINDOW, SAVED_FEATURE_WINDOW, feature_window_setting

from ..errors import UsageError
from .plan import SAVED_RATE_CAP

if TYPE_CHECKING:
    from envs.config import EnvConfig

CHECKPOINT_FORMAT = 4  # what this version writes into a checkpoint's "format"
SETTINGS_FORMAT = 4  # ... and beside saved settings elsewhere ("settings_format")
# Format 1, a setting the writing version lacked: what its runs trained with. Before --cost-warmup,
# full costs; before --rate-cap, rates capped at x8; before --ema-spans, no EMA deviations; before
# --feature-window, 256 bars.
V1_MISSING: dict[str, Any] = {"cost_warmup": 0.0, "rate_cap": SAVED_RATE_CAP}
V1_MISSING_ENV: dict[str, Any] = {"ema_spans": None, "feature_window": SAVED_FEATURE_WINDOW}


def fingerprint_env_settings(env: "EnvConfig") -> dict[str, Any]:
    """The canonical form of ``env`` that a policy's fingerprint hashes and a predict state's ``policy``
    entry records: ``asdict(env)``, with one feature window as its int, less each setting at the value
    a file without it reads as (:data:`V1_MISSING_ENV`: no EMA spans, in any spelling; the single
    256-bar window) and less ``feature_window`` without feature columns, where it means nothing. So a
    policy's fingerprint stays the same when a later format adds a setting."""
    settings = asdict(env)
    if not env.spans:
        settings.pop("ema_spans", None)
    if not env.feature_names or env.feature_windows == (V1_MISSING_ENV["feature_window"],):
        settings.pop("feature_window", None)
    else:
        settings["feature_window"] = feature_window_setting(env.feature_windows)
    return settings


def env_v1_to_v2(env: Any) -> dict[str, Any]:
    """A format-1 env dict (``EnvConfig`` fields) in format 2; ``feature_window`` without feature
    columns, which then means nothing, is today's default."""
    env = {**V1_MISSING_ENV, **(env if isinstance(env, dict) else {})}
    if not str(env.get("features") or "").strip():
        env["feature_window"] = FEATURE_WINDOW
    return env


def settings_v1_to_v2(values: dict[str, Any]) -> dict[str, Any]:
    """Format-1 settings (``TrainConfig.to_dict()``) in format 2, which records ``batch_rule``:
    1 for a run saved before ``rollout_steps`` existed (16 steps at every count, minibatches
    that divide the sequences, no 64-transition floor), else 2."""
    rule = 2 if "rollout_steps" in values else 1
    return {**V1_MISSING, "batch_rule": rule, **values, "env": env_v1_to_v2(values.get("env"))}


def checkpoint_v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
    """A format-1 checkpoint in format 2: its settings, the counters format 2 adds (its training
    seconds, unknown: 0) and the run id and best hold-out the oldest format-1 files lack."""
    out = {**state, "format": 2, "run_id": state.get("run_id") or None}
    if isinstance(state.get("counters"), dict):
        out["counters"] = {"best_holdout": None, **state["counters"], "train_seconds": 0.0}
    if isinstance(state.get("config"), dict):  # a file without settings is refused by its reader
        out["config"] = settings_v1_to_v2(state["config"])
    return out


def env_v2_to_v3(env: Any) -> Any:
    """A format-2 env dict in format 3, whose ``feature_window`` may also be text naming several windows
    (``"256,1024,4096"``): format 2's is one window, an int, which format 3 reads as it is."""
    return dict(env) if isinstance(env, dict) else env


def settings_v2_to_v3(values: dict[str, Any]) -> dict[str, Any]:
    """Format-2 settings in format 3 (:func:`env_v2_to_v3` of their env)."""
    return {**values, "env": env_v2_to_v3(values["env"])} if "env" in values else dict(values)


def checkpoint_v2_to_v3(state: dict[str, Any]) -> dict[str, Any]:
    """A format-2 checkpoint in format 3: its settings (:func:`settings_v2_to_v3`), nothing else changes."""
    out = {**state, "format": 3}
    if isinstance(state.get("config"), dict):
        out["config"] = settings_v2_to_v3(state["config"])
    return out


def env_v3_to_v4(env: Any) -> Any:
    """A format-3 env dict in format 4: the same (format 4 changes the run's settings, not the env's)."""
    return dict(env) if isinstance(env, dict) else env


def settings_v3_to_v4(values: dict[str, Any]) -> dict[str, Any]:
    """Format-3 settings in format 4, which records ``schedule_rule``: 1, the clocks every earlier run
    trained its cost warm-up and rates' annealing on. The env settings do not change."""
    return {**values, "schedule_rule": 1}


def checkpoint_v3_to_v4(state: dict[str, Any]) -> dict[str, Any]:
    """A format-3 checkpoint in format 4: its settings (:func:`settings_v3_to_v4`), nothing else changes."""
    out = {**state, "format": 4}
    if isinstance(state.get("config"), dict):
        out["config"] = settings_v3_to_v4(state["config"])
    return out


SETTINGS_CHAIN: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: settings_v1_to_v2, 2: settings_v2_to_v3,
                                                                         3: settings_v3_to_v4}
ENV_CHAIN: dict[int, Callable[[Any], Any]] = {1: env_v1_to_v2, 2: env_v2_to_v3, 3: env_v3_to_v4}
CHECKPOINT_CHAIN: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: checkpoint_v1_to_v2,
                                                                            2: checkpoint_v2_to_v3,
                                                                            3: checkpoint_v3_to_v4}


def _version(value: Any, newest: int, what: str) -> int:
    """The format number ``value`` (None: 1), or UsageError for one this version cannot read."""
    version = 1 if value is None else value
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"{what} has an unknown format {value!r}; it was not written by ppo-lstm-trader")
    if version > newest:
        raise UsageError(f"{what} is of format {version}, newer than this version of ppo-lstm-trader reads "
                         f"(up to {newest}); upgrade ppo-lstm-trader to read it")
    return version


def _run(chain: dict[int, Callable[[Any], Any]], value: Any, version: int, newest: int) -> Any:
    for step in range(version, newest):
        value = chain[step](value)
    return value


def migrate_checkpoint(state: dict[str, Any], what: str) -> dict[str, Any]:
    """A loaded checkpoint (``what`` names it in errors) in :data:`CHECKPOINT_FORMAT`."""
    version = _version(state.get("format"), CHECKPOINT_FORMAT, what)
    return _run(CHECKPOINT_CHAIN, state, version, CHECKPOINT_FORMAT)


def migrate_settings(values: dict[str, Any], version: Any, what: str) -> dict[str, Any]:
    """Saved settings (``TrainConfig.to_dict()``) of format ``version`` (None: 1) in :data:`SETTINGS_FORMAT`."""
    return _run(SETTINGS_CHAIN, values, _version(version, SETTINGS_FORMAT, what), SETTINGS_FORMAT)


def migrate_env(env: Any, version: Any, what: str) -> dict[str, Any]:
    """Saved env settings (``EnvConfig`` fields) of format ``version`` (None: 1) in :data:`SETTINGS_FORMAT`."""
    return _run(ENV_CHAIN, env, _version(version, SETTINGS_FORMAT, what), SETTINGS_FORMAT)


def migrate_settings_by_dest(values: dict[str, Any], version: Any, what: str) -> dict[str, Any]:
    """:func:`migrate_settings` of settings keyed by dest (``"env.fee_bps"``), as a tuning study records them."""
    nested = {k: v for k, v in values.items() if not k.startswith("env.")}
    env = {k[4:]: v for k, v in values.items() if k.startswith("env.")}
    read = migrate_settings({**nested, "env": env}, version, what)
    return {**{k: v for k, v in read.items() if k != "env"}, **{f"env.{k}": v for k, v in read["env"].items()}}
