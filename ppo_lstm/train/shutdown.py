"""Graceful stop on SIGINT / SIGTERM: the first signal asks, the second insists."""
from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Optional


class StopRequest:
    """Records the first SIGINT/SIGTERM; the trainer stops at the end of the current
    update (all ranks together) and checkpoints. A second signal exits at once
    with 128 + signal number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Optional[FrameType]) -> None:
        if self.signum is not None:
            sys.stderr.write(f"second {signal.Signals(signum).name}: exiting now\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        self.signum = signum
