"""Errors that end the program: one line on stderr, exit code 2 for bad input, 1 when
training cannot go on; and the argparse parser every command line uses, which reports a
bad flag the same way, with the :class:`Switch` action of its boolean flags."""
from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn, Optional


class UsageError(Exception):
    """A bad flag, a bad input file or an impossible configuration.

    ``str(err)`` is one line: what is wrong and how to fix it. The CLI prints it
    to stderr and exits with code 2, without a traceback.
    """


class TrainingError(Exception):
    """Training cannot go on (e.g. repeated non-finite updates); exit code 1."""


_CPP_LOCATION = re.compile(r"^\[[^\]\s]+:\d+\]\s*")  # e.g. "[/path/gloo/transport/tcp/pair.cc:553] "


def one_line(err: BaseException, limit: int = 240, first_line: bool = False) -> str:
    """``err``'s message as one line of at most ``limit`` characters (its type's name when it
    has no message): a leading C++ source location such as ``[/path/pair.cc:553] `` removed,
    whitespace and line breaks collapsed. With ``first_line`` only the message's first line is
    kept (torch.distributed errors carry a C++ trace below it)."""
    text = _CPP_LOCATION.sub("", str(err).strip())
    if first_line:
        text = text.splitlines()[0] if text else ""
    return " ".join(text.split())[:limit] or type(err).__name__


EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class OneLineParser(argparse.ArgumentParser):
    """The parser of every command line: a bad flag is one line on stderr (with a pointer to
    --help), exit code :data:`EXIT_USAGE`."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_USAGE)


def opposite(option: str) -> str:
    """The other half of a switch: ``--x`` -> ``--no-x``, ``--no-short`` -> ``--short``."""
    name = option[2:]
    return "--" + name[3:] if name.startswith("no-") else "--no-" + name


class Switch(argparse.BooleanOptionalAction):
    """A boolean flag and its opposite (:func:`opposite`): ``--x`` sets true, ``--no-x``
    false; ``--no-short`` sets true, ``--short`` false. The last one given wins.
    ``negatives`` holds the options that set false."""

    def __init__(self, option_strings: list[str], dest: str, default: bool = False, required: bool = False,
                 help: Optional[str] = None) -> None:
        longs = [option for option in option_strings if option.startswith("--")]
        self.negatives = frozenset(opposite(option) for option in longs)
        argparse.Action.__init__(self, [*option_strings, *map(opposite, longs)], dest, nargs=0, default=default,
                                 required=required, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, option_string not in self.negatives)
