"""Near-equal contiguous pieces of a range: how an update's env sequences split into
minibatches, a minibatch into the ranks' shares, and a share into micro-batches."""
from __future__ import annotations


def share(count: int, part: int, parts: int) -> slice:
    """Part ``part`` of ``parts`` contiguous, near-equal pieces of ``range(count)`` (the first
    ``count % parts`` pieces one longer; a piece may be empty)."""
    base, longer = divmod(count, parts)
    start = part * base + min(part, longer)
    return slice(start, start + base + (part < longer))


def shares(count: int, parts: int) -> list[slice]:
    """Every :func:`share` of ``range(count)`` in ``parts``, in order."""
    return [share(count, part, parts) for part in range(parts)]
