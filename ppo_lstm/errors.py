"""Errors that end the program with one line on stderr and exit code 2."""
from __future__ import annotations


class UsageError(Exception):
    """A bad flag, a bad input file or an impossible configuration.

    ``str(err)`` is one line: what is wrong and how to fix it. The CLI prints it
    to stderr and exits with code 2, without a traceback.
    """


EXIT_USAGE = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
