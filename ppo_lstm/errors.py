"""Errors that end the program: one line on stderr, exit code 2 for bad input, 1 when
training cannot go on."""
from __future__ import annotations


class UsageError(Exception):
    """A bad flag, a bad input file or an impossible configuration.

    ``str(err)`` is one line: what is wrong and how to fix it. The CLI prints it
    to stderr and exits with code 2, without a traceback.
    """


class TrainingError(Exception):
    """Training cannot go on (e.g. repeated non-finite updates); exit code 1."""


def one_line(err: BaseException, limit: int = 240) -> str:
    """``err``'s message with its whitespace and line breaks collapsed, at most ``limit``
    characters (its type's name when it has no message)."""
    return " ".join(str(err).split())[:limit] or type(err).__name__


EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
