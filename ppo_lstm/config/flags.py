"""Flags built from dataclass fields, and a command line read together with its ``--config`` file.

:func:`add_field_flag` makes a dataclass field a flag (its default, type and ``help``
metadata), so a configuration dataclass is the one place each flag is written. Every
switch has an opposite on the command line (:class:`~ppo_lstm.errors.Switch`): ``--NAME``
is undone by ``--no-NAME``, and a switch whose name already begins with ``no-`` by the
name without it (``--no-short`` / ``--short``), so a flag can undo what a file turned on.

:func:`parse_args` reads ``--config FILE`` (:mod:`ppo_lstm.config.files`) and the command
line together: the file's values become the parser's defaults, so a flag on the command
line wins. :func:`settings_or_exit` is the front of a command that takes ``--config`` and
``--json`` (evaluate-ppo-lstm, predict-ppo-lstm).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import EXIT_USAGE, Switch, UsageError
from .files import CONFIG_DEST, PRINT_DEST, FileSettings, dump_settings, read_settings
from .values import show

_UNSET = object()  # marks the options the command line did not give


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
