"""Per-env pools of random variates drawn ahead of time, several episodes per draw.

Resetting N envs then costs no per-env generator call per episode: each env reads
its next variates from its own buffer, refilled only when it runs dry.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class VariatePool:
    """Per-env buffers [N, size] of uniforms (``normal=False``) or standard normals.

    Env i's buffer is refilled from ``rngs[i]`` alone, in one ``Generator.random`` or
    ``Generator.standard_normal`` call, only when the next episode needs more than
    is left (the rest is dropped), so what env i reads is a function of its seed
    alone, whatever the other envs do. The state is the generator state before the
    last refill plus the read position: enough to redraw the buffer exactly.
    """

    def __init__(self, n: int, size: int, normal: bool) -> None:
        self.size, self.normal = size, normal
        self.buf = np.empty((n, size))
        self.cur = np.full(n, size, np.int64)  # read position; size: empty
        self.before: list[dict | None] = [None] * n  # generator state before the last refill
        self._views: dict[int, np.ndarray] = {}  # width -> [N, size-width+1, width] windows of buf

    def clear(self, i: int) -> None:
        """Empty env i's buffer (its generator changed)."""
        self.cur[i] = self.size
        self.before[i] = None

    def fill(self, i: int, rng: np.random.Generator) -> None:
        """Refill env i's buffer from ``rng``."""
        self.before[i] = rng.bit_generator.state
        if self.normal:
            rng.standard_normal(out=self.buf[i])
        else:
            rng.random(out=self.buf[i])
        self.cur[i] = 0

    def take(self, rows: np.ndarray, width: int, rngs: list) -> np.ndarray:
        """The next ``width`` variates [len(rows), width] of each env in ``rows`` (a gathered copy)."""
        cur = self.cur[rows]
        refill = np.flatnonzero(cur > self.size - width)
        if len(refill):
            for i in rows[refill].tolist():
                self.fill(i, rngs[i])
            cur[refill] = 0
        view = self._views.get(width)
        if view is None:
            view = self._views[width] = sliding_window_view(self.buf, width, axis=1)
        out = view[rows, cur]
        self.cur[rows] = cur + width
        return out

    def get_state(self) -> dict[str, Any]:
        return {"cursor": self.cur.copy(), "rngs": list(self.before)}

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Restore ``get_state()`` output (None: every buffer empty) by redrawing the buffers."""
        for i in range(len(self.cur)):
            self.clear(i)
        if state is None:
            return
        for i, (st, cur) in enumerate(zip(state["rngs"], np.asarray(state["cursor"]))):
            if st is None:
                continue
            rng = np.random.Generator(getattr(np.random, st["bit_generator"])())
            rng.bit_generator.state = st
            self.fill(i, rng)
            self.cur[i] = int(cur)
