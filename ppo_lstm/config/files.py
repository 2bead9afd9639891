"""Config files for a command line: a YAML or TOML mapping of flag names to values.

``num-envs: 4`` in a file is ``--num-envs 4`` on the command line. Every ``--name``
option of an argparse parser is a key, spelt with ``-`` or ``_``; its value goes
through the option's own ``type`` and ``choices``, as the flag's text would, so a
file accepts exactly the values the command line accepts, and a multi-value option takes
a list of exactly as many values as the flag. Two keys of a mutually exclusive pair
(``checkpoint`` and ``model``) are refused together. A switch takes ``true`` or
``false``; an option whose default is none takes ``null`` (YAML) or is left out; the
file's key of a switch is its own name (``no-short: false``), never its opposite.

Every problem with a file raises :class:`UsageError` with one line naming the file, and
the key and line where they are known; only the keys of :data:`OTHER_COMMANDS_KEYS` are
skipped by a command that lacks them. YAML is read with ``yaml.safe_load`` (nothing
in a file is executed); TOML with :mod:`tomllib`. :func:`dump_settings` writes a file
that :func:`read_settings` reads back.

The parser's option table (``_actions``, ``_action_groups``) is read here, as argparse
offers no public way to list a parser's options.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..errors import Switch, UsageError, one_line
from .values import _is_paired_switch, _kind_of, convert

CONFIG_DEST, PRINT_DEST = "config_file", "print_config"  # the two options of this module
# Keys of one command that a file written for several may hold: a command without the option
# skips them. tune-ppo-lstm's best.yaml feeds train-ppo-lstm and walkforward-ppo-lstm alike.
OTHER_COMMANDS_KEYS = {"tuned-span": "walkforward-ppo-lstm"}
FORMATS = {".yaml": "YAML", ".yml": "YAML", ".toml": "TOML"}


@dataclass(frozen=True)
class FileSettings:
    """The settings one config file gave: ``values`` by argparse dest, typed as the flags
    would give them, and ``flags``, the flag each one sets (``"--num-envs"``)."""

    path: str
    values: dict[str, Any]
    flags: dict[str, str]


# ------------------------------------------------------------------ reading a file


def read_settings(path: str, parser: argparse.ArgumentParser) -> FileSettings:
    """The settings of the config file at ``path``, checked against ``parser``'s options:
    each key must name one of its flags and each value must be one that flag accepts."""
    mapping, lines = load_mapping(path)
    options = keyed_options(parser)
    values: dict[str, Any] = {}
    flags: dict[str, str] = {}
    keys: dict[str, Any] = {}
    for key, value in mapping.items():
        where = f"{path}, line {lines[key]}" if key in lines else str(path)
        name = str(key).replace("_", "-")
        if name in OTHER_COMMANDS_KEYS and name not in options:
            continue  # another command's setting
        action = _option_for(key, value, options, where)
        if action.dest in values:
            raise UsageError(f"{where}: '{key}' sets {action.option_strings[0]}, as '{keys[action.dest]}' "
                             f"already does; keep one of them")
        values[action.dest] = convert(action, key, value, where)
        flags[action.dest], keys[action.dest] = action.option_strings[0], key
    for group in parser._mutually_exclusive_groups:  # as argparse refuses both on the command line
        both = [keys[a.dest] for a in group._group_actions
                if a.dest in values and values[a.dest] is not None and values[a.dest] != a.default]
        if len(both) > 1:
            named = " and ".join(f"'{key}'" + (f" (line {lines[key]})" if key in lines else "") for key in both)
            raise UsageError(f"{path}: {named} exclude each other; keep one of them")
    return FileSettings(str(path), values, flags)


def load_mapping(path: str) -> tuple[dict[Any, Any], dict[Any, int]]:
    """The top-level mapping of a YAML or TOML file (chosen by its suffix), and the line
    of each key where the parser tells it (YAML). Raises :class:`UsageError` naming the
    file when it cannot be read or parsed, holds a key twice, or is not a mapping."""
    kind = FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise UsageError(f"{path}: a config file must be YAML (.yaml, .yml) or TOML (.toml); rename it "
                         f"or convert it")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"{path}: cannot read the config file ({err.strerror or one_line(err)})") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: the config file is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    if kind == "YAML":
        data, lines = _load_yaml(path, text)
    else:
        data, lines = _load_toml(path, text), {}
    if data is None:  # an empty YAML file, or one of comments only
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config file holds a mapping of flag names to values (e.g. 'episodes: 1000'), "
                         f"not {_kind_of(data)}")
    return data, lines


def _load_yaml(path: str, text: str) -> tuple[Any, dict[Any, int]]:
    """``yaml.safe_load`` the text; the key lines come from the node tree (``yaml.compose``,
    which builds no Python objects at all)."""
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise UsageError(f"{path}{where}: not valid YAML ({one_line(problem)})") from None
    lines: dict[Any, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key_node, _ in root.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            line = key_node.start_mark.line + 1
            if key_node.value in lines:
                raise UsageError(f"{path}, line {line}: key '{key_node.value}' is given twice (also on line "
                                 f"{lines[key_node.value]}); keep one of them")
            lines[key_node.value] = line
        if isinstance(data, dict):  # keys as safe_load typed them (e.g. 1 for "1")
            lines = {key: lines[str(key)] for key in data if str(key) in lines}
    return data, lines


def _load_toml(path: str, text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # imported here: a TOML file is rare, and every start-up would pay for it
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = one_line(err)
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        if found is None:
            raise UsageError(f"{path}: not valid TOML ({message})") from None
        raise UsageError(f"{path}, line {found.group(1)}, column {found.group(2)}: not valid TOML "
                         f"({message[:found.start()]})") from None


# ------------------------------------------------------------------ keys and values


def keyed_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a config file may use (``"num-envs"``, aliases too) and its option: each
    ``--name`` of ``parser`` but help, the ``--no-`` half of a ``--x / --no-x`` switch and
    the options of this module."""
    options: dict[str, argparse.Action] = {}
    for action in _settings_actions(parser):
        for option in action.option_strings:
            if option.startswith("--") and option not in _negatives(action):
                options[option[2:].replace("_", "-")] = action
    return options


def _negatives(action: argparse.Action) -> frozenset[str]:
    """The options of a switch that set it false (``--no-x``; ``--short`` of ``--no-short``)."""
    if isinstance(action, Switch):
        return action.negatives
    if isinstance(action, argparse.BooleanOptionalAction):
        return frozenset(option for option in action.option_strings if option.startswith("--no-"))
    return frozenset()


def _settings_actions(parser: argparse.ArgumentParser) -> Iterable[argparse.Action]:
    """The options that are settings: not help or version, nor ``--config``/``--print-config``."""
    for action in parser._actions:
        if action.dest in (CONFIG_DEST, PRINT_DEST, argparse.SUPPRESS) or not action.option_strings:
            continue
        if action.nargs == 0 and not (_is_paired_switch(action) or isinstance(action.const, bool)):
            continue  # help, version, count: nothing a file could set
        yield action


def _option_for(key: Any, value: Any, options: dict[str, argparse.Action], where: str) -> argparse.Action:
    """The option ``key`` names; UsageError naming the closest key when there is none."""
    name = str(key).replace("_", "-")
    if isinstance(key, str) and name in options:
        return options[name]
    if name in ("config", "print-config", "help"):
        raise UsageError(f"{where}: '{key}' is an option of the command line only, not a setting; remove it "
                         f"from the file")
    for option in options.values():
        if "--" + name in _negatives(option):
            raise UsageError(f"{where}: unknown key '{key}'; write '{option.option_strings[0][2:]}: false' instead")
    close = difflib.get_close_matches(name, list(options), n=1)
    if close:
        hint = f"did you mean '{close[0]}'?"
    elif isinstance(value, dict):
        hint = "settings are keys at the top level, not sections (e.g. 'clip: 0.2')"
    else:
        hint = "the keys are the flags of --help without their leading --"
    raise UsageError(f"{where}: unknown key '{key}'; {hint}")


# ------------------------------------------------------------------ writing a file


def dump_settings(parser: argparse.ArgumentParser, values: dict[str, Any], header: Iterable[str] = ()) -> str:
    """``values`` (by dest) as a YAML config file for ``parser``: the ``header`` lines as
    comments, then one commented section per option group, one ``key: value`` per option,
    keyed by its first flag. Reading it back with :func:`read_settings` gives ``values``."""
    parts = [f"# {line}" for line in header]
    keyed = set(map(id, _settings_actions(parser)))
    for group in parser._action_groups:
        entries = {action.option_strings[0][2:]: _plain(values[action.dest], action.default)
                   for action in group._group_actions if id(action) in keyed and action.dest in values}
        if entries:
            parts += ["", f"# {group.title}",
                      yaml.safe_dump(entries, sort_keys=False, default_flow_style=False, allow_unicode=True).rstrip()]
    return "\n".join(parts).lstrip("\n") + "\n"


def _plain(value: Any, default: Any = None) -> Any:
    """A value YAML writes as a plain scalar or list (paths as text); None where the default is
    not None as ``none`` (``--ema-spans none``), since a null there would read as "no value"."""
    if value is None and default is not None:
        return "none"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


