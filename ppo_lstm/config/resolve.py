"""One launch's settings: :func:`resolve` turns a command line (and, on ``--resume``, the
checkpoint's saved settings) into the run's :class:`TrainConfig`, checked, and its
:class:`BatchPlan`, once per launch: by the command line (under torchrun, by rank 0, which
sends it to every rank), ``--print-config``, tune and the walk-forward. Nothing else merges,
checks or plans settings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..errors import UsageError
from .checks import validate
from .command_line import CommandLine, flag_settings
from .flags import flag_name
from .plan import BatchPlan
from .schema import TrainConfig
from .values import show


@dataclass(frozen=True)
class Resolved:
    """A launch's settings: the run's ``config`` and ``plan`` on ``world_size`` workers, the
    settings the command line ``given``, its start-up ``notes``, and on a resume one
    ``--flag old -> new`` entry in ``changes`` per given setting that differs from the
    checkpoint's (None for a fresh run)."""

    config: TrainConfig
    plan: BatchPlan
    given: frozenset[str]
    notes: tuple[str, ...]
    changes: Optional[tuple[str, ...]]

    def change_line(self) -> Optional[str]:
        """The start-up line on what a resume changed; None for a fresh run."""
        if self.changes is None:
            return None
        return f"Settings changed on resume: {', '.join(self.changes)}" if self.changes else \
            "Settings: as in the checkpoint"


def resolve(command: CommandLine, world_size: int, saved: Optional[dict[str, Any]] = None,
            source: str = "the checkpoint") -> Resolved:
    """The run of ``command`` on ``world_size`` workers. With ``saved`` (a checkpoint's settings,
    already in this format: :mod:`ppo_lstm.config.migrate`), the run is the checkpoint's but
    for the launch fields and the settings the command line gave, which win. UsageError (one
    line) for settings that cannot run."""
    config, changes = command.config, None
    if saved is not None:
        config, found = _resumed(command.config, command.given, saved, source)
        changes = tuple(found)
    validate(config, world_size)
    notes = (command.note,) if command.note else ()
    return Resolved(config, BatchPlan.of(config, world_size), command.given, notes, changes)


def resolve_config(config: TrainConfig, world_size: int) -> Resolved:
    """:func:`resolve` of a config built in code (a tuning trial, a walk-forward job)."""
    return resolve(CommandLine(config, frozenset(), False, None), world_size)


def _resumed(config: TrainConfig, given: frozenset[str], saved: dict[str, Any],
             source: str) -> tuple[TrainConfig, list[str]]:
    try:
        merged = TrainConfig.from_dict(saved)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{source} holds {err}; resume it with the version that wrote it") from None
    changes = []
    for name, (f, value) in flag_settings(config).items():
        if not (f.metadata.get("launch") or name in given):
            continue
        target = merged.env if name.startswith("env.") else merged
        old = getattr(target, f.name)
        if not f.metadata.get("launch") and old != value:
            changes.append(f"{flag_name(f.name)} {show(old)} -> {show(value)}")
        setattr(target, f.name, value)
    return merged, changes
