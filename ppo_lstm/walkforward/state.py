"""``<out>/walkforward.json``: the walk-forward's settings and a fingerprint of its data,
written when it starts. A rerun with the same settings and data resumes it; anything
else is refused with one line, so no job is ever reused for a different question.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from ..config.migrate import SETTINGS_FORMAT, migrate_settings
from ..config.schema import TrainConfig
from ..errors import UsageError
from ..rundir.checkpoint import atomic_write_bytes
from .config import WalkForwardConfig

STATE_NAME = "walkforward.json"
JOBS_DIR = "jobs"


def fingerprint(paths: list[str]) -> dict[str, str]:
    """SHA-256 of each data file's bytes, by absolute path."""
    out = {}
    for path in paths:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        out[str(Path(path).resolve())] = digest.hexdigest()
    return out


def settings_of(wf: WalkForwardConfig, train: TrainConfig) -> dict[str, Any]:
    """Every setting that decides the results: the walk-forward's, and the training's but its
    launch fields (device, threads, logging, ...) and the data paths (fingerprinted apart)."""
    launch = {f.name for f in dataclasses.fields(TrainConfig) if f.metadata.get("launch")}
    values = {k: v for k, v in train.to_dict().items() if k not in launch and k != "data"}
    return {"walkforward": wf.settings(), "train": values}


def check_or_write(out: Path, wf: WalkForwardConfig, train: TrainConfig, files: list[str]) -> None:
    """Write ``walkforward.json``, or check that the one there is this walk-forward's;
    UsageError (one line) when it is not, or when ``jobs/`` belongs to none."""
    state = {"settings_format": SETTINGS_FORMAT, "settings": settings_of(wf, train), "data": fingerprint(files)}
    path = out / STATE_NAME
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise UsageError(f"{path} is unreadable; it is not a walk-forward's state; use another --out") from None
        _compare(path, saved, state)
        return
    if (out / JOBS_DIR).exists():
        raise UsageError(f"{out / JOBS_DIR} holds jobs of another walk-forward (no {STATE_NAME} beside it); "
                         f"use another --out")
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(state, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(path, lambda handle: handle.write(text.encode("utf-8")))


def _compare(path: Path, saved: dict[str, Any], state: dict[str, Any]) -> None:
    old, new = _flat(_as_this_version(saved, str(path))), _flat(state["settings"])
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if changed:
        shown = ", ".join(f"{k.split('.')[-1].replace('_', '-')} {old.get(k)} -> {new.get(k)}" for k in changed[:3])
        raise UsageError(f"{path.parent} holds a walk-forward with other settings ({shown}); rerun it with its own "
                         f"settings to resume it, or use another --out")
    if saved.get("data") != state["data"]:
        gone = sorted(set(saved.get("data", {})) ^ set(state["data"]))
        moved = [p for p in state["data"] if p in saved.get("data", {}) and saved["data"][p] != state["data"][p]]
        what = (f"{moved[0]} changed since it started" if moved else f"its data files differ ({', '.join(gone[:2])})")
        raise UsageError(f"{path.parent} holds a walk-forward whose data {what}; restore the data, or use another "
                         f"--out for the new data")


def _as_this_version(saved: dict[str, Any], what: str) -> dict[str, Any]:
    """The saved settings with their training half in this format (:mod:`ppo_lstm.config.migrate`), so
    a setting the saving version did not have reads as what its jobs trained with, not as a change."""
    settings = saved.get("settings", {})
    train = settings.get("train")
    if not isinstance(train, dict):
        return settings
    return {**settings, "train": migrate_settings(train, saved.get("settings_format"), what)}


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out
