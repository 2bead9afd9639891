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


EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
