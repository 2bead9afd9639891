"""The search space: flag names mapped to distributions, read from YAML and checked against
the training parser, and the built-in space for PPO-LSTM.

A space file maps a training flag (without ``--``) to one distribution::

    learning-rate-actor: {log-uniform: [1e-5, 1e-2]}
    gamma: {uniform: [0.95, 0.999]}
    epochs: {int: [2, 8]}
    lstm-size: {choice: [32, 64, 128]}

``uniform`` and ``log-uniform`` on an integer flag sample integers (``log-uniform``: on a log
scale); ``int`` is only for integer flags. Each value must be one the flag accepts. The flags
that choose the bars (``data``, ``data-start``, ``data-end``) are the study's, never sampled.
"""
from __future__ import annotations

import argparse
import copy
import difflib
import json
import math
from dataclasses import dataclass
from typing import Any, Optional

import optuna

from ..config.schema import TrainConfig
from ..config.files import keyed_options, load_mapping
from ..config.values import convert as setting_value
from ..errors import UsageError

KINDS = ("log-uniform", "uniform", "int", "choice")
FIXED_BARS = ("data_start", "data_end")  # the study's bars: one span for all its trials (data: a list flag)

# The built-in space (docs/tuning.md): both learning rates, entropy, gamma, GAE lambda, clip,
# epochs, minibatches, env count (so the batch, by the batch rule), hidden and LSTM sizes, and the cost warm-up.
DEFAULT_SPACE: dict[str, dict[str, list[Any]]] = {
    "learning-rate-actor": {"log-uniform": [1e-5, 3e-3]},
    "learning-rate-critic": {"log-uniform": [1e-4, 1e-2]},
    "ent-coef": {"log-uniform": [1e-3, 0.1]},
    "gamma": {"uniform": [0.9, 0.999]},
    "gae-lambda": {"uniform": [0.8, 0.99]},
    "clip": {"uniform": [0.1, 0.3]},
    "epochs": {"int": [2, 8]},
    "minibatches": {"choice": [1, 2, 4]},
    "num-envs": {"choice": [16, 32, 64, 128]},
    "hidden-size": {"choice": [32, 64, 128]},
    "lstm-size": {"choice": [32, 64, 128]},
    "cost-warmup": {"uniform": [0.0, 0.8]},
}


@dataclass(frozen=True)
class Dimension:
    """One flag of the space: its parameter ``name`` (the flag without ``--``), the config
    field it sets (``dest``, ``"env.fee_bps"`` for an env flag), the distribution ``kind``,
    its ``values`` (low, high, or the choices) and whether the flag takes integers."""

    name: str
    dest: str
    kind: str
    values: tuple[Any, ...]
    integer: bool

    def suggest(self, trial: optuna.trial.Trial) -> Any:
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.values))
        low, high = self.values
        if self.integer:
            return trial.suggest_int(self.name, int(low), int(high), log=self.kind == "log-uniform")
        return trial.suggest_float(self.name, float(low), float(high), log=self.kind == "log-uniform")


@dataclass(frozen=True)
class Space:
    """The dimensions of a study, in file order; ``source`` names where they came from."""

    dimensions: tuple[Dimension, ...]
    source: str

    def canonical(self) -> str:
        """The space as JSON, stored with the study so that a re-run with another space is refused."""
        return json.dumps({d.name: {d.kind: list(d.values)} for d in self.dimensions}, sort_keys=True)

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """Sample every dimension; returns ``{dest: value}``."""
        return {d.dest: d.suggest(trial) for d in self.dimensions}


def load_space(path: Optional[str], parser: argparse.ArgumentParser) -> Space:
    """The space of the YAML file at ``path`` (None: :data:`DEFAULT_SPACE`), checked against the
    training flags of ``parser``; UsageError (one line) for anything wrong with it."""
    if path is None:
        return parse_space(DEFAULT_SPACE, parser, "the built-in space", {})
    mapping, lines = load_mapping(path)
    if not mapping:
        raise UsageError(f"{path}: the space is empty; map at least one flag to a distribution "
                         f"(e.g. 'ent-coef: {{log-uniform: [1e-3, 0.1]}}')")
    return parse_space(mapping, parser, path, lines)


def parse_space(mapping: dict[Any, Any], parser: argparse.ArgumentParser, source: str,
                lines: dict[Any, int]) -> Space:
    options = {name: action for name, action in keyed_options(parser).items() if not action.dest.startswith("tune.")}
    dimensions = []
    for key, spec in mapping.items():
        where = f"{source}, line {lines[key]}" if key in lines else source
        name = str(key).replace("_", "-")
        if name not in options:
            close = difflib.get_close_matches(name, list(options), n=1)
            hint = f"did you mean '{close[0]}'?" if close else "the keys are training flags without their leading --"
            raise UsageError(f"{where}: unknown flag '{key}' in the space; {hint}")
        action = options[name]
        name = action.option_strings[0][2:]
        if action.dest in FIXED_BARS:
            raise UsageError(f"{where}: '{name}' chooses the bars, which every trial of a study shares (the "
                             f"walk-forward checks its test windows against them); give it as a flag instead")
        dimensions.append(_dimension(name, action, spec, where))
    return Space(tuple(dimensions), source)


def _dimension(name: str, action: argparse.Action, spec: Any, where: str) -> Dimension:
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise UsageError(f"{where}: '{name}' needs one distribution, one of {', '.join(KINDS)} "
                         f"(e.g. '{name}: {{uniform: [LOW, HIGH]}}' or '{name}: {{choice: [A, B]}}')")
    kind, values = next(iter(spec.items()))
    if not isinstance(values, list):
        raise UsageError(f"{where}: '{name}: {kind}' takes a list, e.g. [LOW, HIGH]")
    if action.nargs not in (None, 0):
        raise UsageError(f"{where}: '{name}' takes a list of values and cannot be tuned; give it as a flag")
    integer = action.type is int
    if kind == "choice":
        if not values:
            raise UsageError(f"{where}: '{name}: choice' has nothing in it; list at least one value")
        checked = tuple(setting_value(action, name, v, where) for v in values)
        return Dimension(name, action.dest, kind, checked, integer)
    if action.nargs == 0 or action.choices is not None or action.type not in (int, float):
        raise UsageError(f"{where}: '{name}' is not a number; use '{name}: {{choice: [...]}}'")
    if kind == "int" and not integer:
        raise UsageError(f"{where}: '{name}' takes a number, not an integer; use uniform or log-uniform")
    if len(values) != 2:
        raise UsageError(f"{where}: '{name}: {kind}' takes [LOW, HIGH], got {len(values)} value(s)")
    low, high = (setting_value(action, name, v, where) for v in values)
    if not low < high:
        raise UsageError(f"{where}: '{name}: {kind}' needs low < high, got [{low}, {high}]")
    if kind == "log-uniform" and not low > 0:
        raise UsageError(f"{where}: '{name}: log-uniform' needs low > 0, got {low}")
    if not (math.isfinite(low) and math.isfinite(high)):
        raise UsageError(f"{where}: '{name}: {kind}' needs finite bounds, got [{low}, {high}]")
    return Dimension(name, action.dest, kind, (low, high), integer)


def apply(base: TrainConfig, values: dict[str, Any]) -> TrainConfig:
    """``base`` with ``values`` (``{dest: value}``) set; the base is left as it is."""
    config = copy.deepcopy(base)
    for dest, value in values.items():
        target, attr = (config.env, dest[4:]) if dest.startswith("env.") else (config, dest)
        setattr(target, attr, value)
    return config
