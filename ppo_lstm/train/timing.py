"""Where a worker's time goes: wall seconds per phase of the training loop, and its peak memory."""
from __future__ import annotations

import resource
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

# The loop's phases, in the order they run (Trainer.run).
PHASES = ("rollout", "gather", "update", "logging", "hold-out", "checkpoints", "sync check")


class PhaseClock:
    """Accumulates wall time per phase: ``with clock("update"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def shares(self) -> str:
        """``rollout 41%, gather 2%, ...`` over the phases timed (in :data:`PHASES` order)."""
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(f"{p} {100.0 * self.seconds[p] / total:.0f}%" for p in PHASES if p in self.seconds)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024.0
