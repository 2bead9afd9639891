"""Content failures of the docs checks that are known and wait for a fix in the pages (issue #60).

Not an xfail: every other page and every other command or phrase is still checked, a new
failure still fails, and an entry that no longer fails fails its test too, so that it is
taken out here. Empty this set as the pages are fixed.

Each entry is ``(page, check, what)``: ``check`` is ``"command"`` (``what``: the command as
``doc_commands.Command.text`` shows it) or ``"earlier state"`` (``what``: the phrase).
"""
from __future__ import annotations

KNOWN_DOC_FAILURES: frozenset[tuple[str, str, str]] = frozenset()


def assert_known(page: str, check: str, failures: dict[str, str]) -> None:
    """Fail on a failure of ``page`` that is not in :data:`KNOWN_DOC_FAILURES` (``failures``:
    what -> why), and on an entry of ``page`` and ``check`` that no longer fails."""
    new = {what: why for what, why in failures.items() if (page, check, what) not in KNOWN_DOC_FAILURES}
    fixed = sorted(what for p, c, what in KNOWN_DOC_FAILURES if (p, c) == (page, check) and what not in failures)
    assert not new, f"{page}: {check}: {list(new.values())}"
    assert not fixed, (f"{page}: {check}: {fixed} pass now: take them out of KNOWN_DOC_FAILURES "
                       "(tests/docs/known_doc_failures.py)")
