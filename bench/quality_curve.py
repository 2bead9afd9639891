"""Time to quality from learning curves, for ``bench/time_to_quality.py``.

A curve is one training run's held-out score at fixed env-step intervals: points
``(env_steps, wall_s, score)`` in the order they were taken, where ``wall_s`` is the
training time so far (evaluation time left out). A run *reaches* a target at the
first point whose score is at least the target; one that never does has no time.
"""
from __future__ import annotations

import math
import statistics
from typing import Optional, Sequence

Point = tuple[int, float, float]  # (env_steps, wall_s, score)


def first_reach(curve: Sequence[Point], target: float) -> Optional[Point]:
    """The first point of ``curve`` with ``score >= target``, or None."""
    for point in curve:
        if point[2] >= target:
            return point
    return None


def reach_summary(curves: Sequence[Sequence[Point]], target: float) -> dict[str, Optional[float]]:
    """Env steps and wall seconds to reach ``target`` over runs (seeds): the median and the worst.

    A run that never reaches it counts as infinitely slow: the worst is then None
    (not reached), and so is the median when half the runs or more never reach it.
    ``reached`` counts the runs that do."""
    hits = [first_reach(curve, target) for curve in curves]
    steps = [math.inf if h is None else float(h[0]) for h in hits]
    walls = [math.inf if h is None else h[1] for h in hits]

    def finite(x: float) -> Optional[float]:
        return x if math.isfinite(x) else None

    return {"reached": sum(h is not None for h in hits), "runs": len(hits),
            "steps_median": finite(_upper_median(steps)), "steps_worst": finite(max(steps)),
            "wall_median": finite(_upper_median(walls)), "wall_worst": finite(max(walls))}


def _upper_median(values: list[float]) -> float:
    """The median, where a tie between a finite and an infinite middle value is infinite."""
    return statistics.median_high(values) if len(values) % 2 == 0 else statistics.median(values)


def best_score(curves: Sequence[Sequence[Point]]) -> float:
    """The median over runs of each run's best score: what a trainer's runs typically reach."""
    return statistics.median(max(p[2] for p in curve) for curve in curves)
