"""Config files for a command line: a YAML or TOML mapping of flag names to values.

``num-envs: 4`` in a file is ``--num-envs 4`` on the command line. Every ``--name``
option of an argparse parser is a key, spelt with ``-`` or ``_``; its value goes
through the option's own ``type`` and ``choices``, as the flag's text would, so a
file accepts exactly the values the command line accepts, and a multi-value option takes
a list of exactly as many values as the flag. Two keys of a mutually exclusive pair
(``checkpoint`` and ``model``) are refused together. A switch takes ``true`` or
``false``; an option whose default is none takes ``null`` (YAML) or is left out.

Every switch has an opposite on the command line (:class:`Switch`), so a flag can undo
what a file turned on: ``--NAME`` is undone by ``--no-NAME``, and a switch whose name
already begins with ``no-`` by the name without it (``--no-short`` / ``--short``). The
file's key is the switch's own name (``no-short: false``), never its opposite.

:func:`parse_args` reads ``--config FILE`` and the command line together: the file's
values become the parser's defaults, so a flag on the command line wins. Every
problem with the file raises :class:`UsageError` with one line naming the file, and
the key and line where they are known; only the keys of :data:`OTHER_COMMANDS_KEYS` are
skipped by a command that lacks them. YAML is read with ``yaml.safe_load`` (nothing
in a file is executed); TOML with :mod:`tomllib` (``tomli`` on Python 3.10).

:func:`settings_or_exit` is the front of a command that takes ``--config`` and ``--json``
(evaluate-ppo-lstm, predict-ppo-lstm): its settings, or the exit code of a bad file or of
``--print-config``.

:func:`add_field_flag` makes a dataclass field a flag (its default, type and ``help``
metadata), so a configuration dataclass is the one place each flag is written.

The parser's option table (``_actions``, ``_action_groups``) is read here, as argparse
offers no public way to list a parser's options.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from .config_values import _is_paired_switch, _kind_of, convert, show
from .errors import EXIT_USAGE, Switch, UsageError, one_line

CONFIG_DEST, PRINT_DEST = "config_file", "print_config"  # the two options of this module
# Keys of one command that a file written for several may hold: a command without the option
# skips them. tune-ppo-lstm's best.yaml feeds train-ppo-lstm and walkforward-ppo-lstm alike.
OTHER_COMMANDS_KEYS = {"tuned-span": "walkforward-ppo-lstm"}
FORMATS = {".yaml": "YAML", ".yml": "YAML", ".toml": "TOML"}
_UNSET = object()  # marks the options the command line did not give


@dataclass(frozen=True)
class FileSettings:
    """The settings one config file gave: ``values`` by argparse dest, typed as the flags
    would give them, and ``flags``, the flag each one sets (``"--num-envs"``)."""

    path: str
    values: dict[str, Any]
    flags: dict[str, str]


@dataclass(frozen=True)
class ParsedArgs:
    """A command line read together with its config file.

    ``namespace`` holds every setting (the command line's, else the file's, else the
    default; not the two options of this module), ``given`` the dests that the command
    line or the file set, and ``overridden`` those the command line set to another value
    than the file's (in the file's order).
    """

    namespace: argparse.Namespace
    file: Optional[FileSettings]
    given: frozenset[str]
    overridden: tuple[str, ...]
    print_config: bool

    def describe(self) -> Optional[str]:
        """The start-up line: which file was read and which of its values the command line
        overrode (file value -> command-line value); None without a config file."""
        if self.file is None:
            return None
        count = len(self.file.values)
        line = f"Config file {self.file.path}: {count} setting{'' if count == 1 else 's'}"
        if not self.overridden:
            return line + ", none overridden on the command line"
        changes = [f"{self.file.flags[dest]} {show(self.file.values[dest])} -> "
                   f"{show(getattr(self.namespace, dest))}" for dest in self.overridden]
        return line + "; the command line overrode " + ", ".join(changes)


def flag_name(name: str) -> str:
    """A field's flag: ``num_envs`` -> ``--num-envs``."""
    return "--" + name.replace("_", "-")


def _base_type(hint: Any) -> type:
    """``Optional[int]`` -> int, ``float`` -> float."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_config_group(parser: argparse.ArgumentParser, title: str, config_class: type, prefix: str) -> None:
    """Add every field of the dataclass ``config_class`` to ``parser`` as one group of flags,
    each stored under ``prefix + field name`` (a command's own settings beside the training's)."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(config_class)
    for f in dataclasses.fields(config_class):
        add_field_flag(group, f, hints[f.name], prefix + f.name)


def add_field_flag(group: Any, f: dataclasses.Field, hint: Any, dest: str) -> None:
    """Add one dataclass field (type ``hint``) to an argparse group as ``--field-name``, from
    its default and its ``help`` (and optional ``choices``, ``metavar``, ``nargs``,
    ``aliases``) metadata. A bool is a :class:`Switch` (``--x`` / ``--no-x``)."""
    meta = f.metadata
    kind = _base_type(hint)
    kwargs: dict[str, Any] = {"dest": dest, "default": f.default, "help": meta["help"]}
    if kind is bool:
        kwargs["action"] = Switch
    elif "choices" in meta:
        kwargs.update(type=kind, choices=meta["choices"])
    else:
        kwargs.update(type=kind, metavar=meta.get("metavar", f.name.upper()))
    if "nargs" in meta:
        kwargs["nargs"] = meta["nargs"]
    action = group.add_argument(flag_name(f.name), *meta.get("aliases", ()), **kwargs)
    action.null_value = meta.get("null_value")  # what a config file's null gives where the default is not None


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except ``None``: those help texts say what None means."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE`` and ``--print-config`` to ``parser`` (in a group of their own)."""
    group = parser.add_argument_group("config file")
    group.add_argument("--config", dest=CONFIG_DEST, metavar="FILE", default=None,
                       help="read settings from a YAML (.yaml/.yml) or TOML (.toml) file whose keys are these "
                            "flags without their leading -- (e.g. num-envs: 4); flags given here override it")
    group.add_argument("--print-config", dest=PRINT_DEST, action="store_true",
                       help="print the resolved settings as YAML (a config file) and exit")


def parse_args(parser: argparse.ArgumentParser, argv: Optional[list[str]] = None) -> ParsedArgs:
    """Parse ``argv`` with ``parser`` (which has :func:`add_config_options`), reading the
    ``--config`` file it names. Bad flags end as argparse ends them; a bad file raises
    :class:`UsageError`. ``parser``'s defaults become the file's values."""
    required = [action for action in parser._actions if action.required]
    groups = [group for group in parser._mutually_exclusive_groups if group.required]
    for item in [*required, *groups]:  # the file may give them: argparse checks them on the second pass
        item.required = False
    dests = {action.dest for action in parser._actions if action.dest != argparse.SUPPRESS}
    command_line = vars(parser.parse_args(argv, argparse.Namespace(**dict.fromkeys(dests, _UNSET))))
    from_command_line = {dest for dest, value in command_line.items() if value is not _UNSET}
    path = command_line.get(CONFIG_DEST, _UNSET)
    file = read_settings(path, parser) if path not in (_UNSET, None) else None
    if file is not None:
        parser.set_defaults(**file.values)
    for action in required:
        action.required = file is None or action.dest not in file.values
    for group in groups:
        group.required = file is None or not any(a.dest in file.values for a in group._group_actions)
    values = vars(parser.parse_args(argv))
    for group in parser._mutually_exclusive_groups:  # one of a group on the command line replaces the file's
        dests = {a.dest for a in group._group_actions}
        if dests & from_command_line and file is not None:
            for action in group._group_actions:
                if action.dest in file.values and action.dest not in from_command_line:
                    values[action.dest] = None if action.nargs != 0 else False
    print_config = bool(values.pop(PRINT_DEST, False))
    values.pop(CONFIG_DEST, None)
    from_command_line -= {CONFIG_DEST, PRINT_DEST}
    from_file = set(file.values) if file is not None else set()
    overridden = tuple(dest for dest, value in (file.values.items() if file is not None else ())
                       if dest in from_command_line and values[dest] != value)
    return ParsedArgs(argparse.Namespace(**values), file, frozenset(from_command_line | from_file), overridden,
                      print_config)


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


def settings_or_exit(parser: argparse.ArgumentParser, argv: Optional[list[str]], verb: str,
                     ) -> tuple[Optional[argparse.Namespace], int]:
    """The front of a command with ``--config`` and ``--json`` (evaluate-ppo-lstm, predict-ppo-lstm): its settings
    and 0 to go on, or None and the exit code when it is done (a bad file: one line on stderr,
    2; ``--print-config``: the settings printed, 0). Prints the file's start-up line, on
    stderr under ``--json`` so that stdout stays one JSON object."""
    try:
        parsed = parse_args(parser, argv)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return None, EXIT_USAGE
    if parsed.print_config:
        sys.stdout.write(dump_settings(parser, vars(parsed.namespace), (f"Resolved settings; {verb} with: "
                                                                        f"--config FILE",)))
        return None, 0
    note = parsed.describe()
    if note is not None:
        print(note, file=sys.stderr if parsed.namespace.json else sys.stdout)
    return parsed.namespace, 0
